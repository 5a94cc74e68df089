package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
	_ "github.com/ckpt-dev/ckpt/storage/local"
)

// zeroReader is a reader range's source recording, at the read of its last piece, how
// many releases there had been.
type zeroReader struct {
	size          int64
	releases      *int
	releasesAtEnd int
}

func (c *zeroReader) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	if off+int64(len(p)) == c.size {
		c.releasesAtEnd = *c.releases
	}
	return len(p), nil
}

// TestReaderRangeReleasesAsItGoes: a reader range (a cast of a mapped source reads through
// the mapping) goes to a local file in pieces, with the source's pages released every
// releaseEvery bytes while it is written, not once it is done: passed whole, a 262 MB
// tensor's pages all stayed resident (--dtype bfloat16 peaked at 322 MiB, 137 with pieces).
func TestReaderRangeReleasesAsItGoes(t *testing.T) {
	ctx := context.Background()
	out, err := storage.CreateOutput(ctx, filepath.Join(t.TempDir(), "out"), storage.OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Abort()
	p := NewPaged(ctx, out)
	releases := 0
	defer p.Releasing(func() { releases++ })()
	w, err := p.Create("")
	if err != nil {
		t.Fatal(err)
	}
	size := int64(3*releaseEvery + 5)
	src := &zeroReader{size: size, releases: &releases}
	n, err := statedict.WriteRange(w, statedict.Range{Src: src, N: size})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil || n != size {
		t.Fatalf("wrote %d of %d: %v", n, size, err)
	}
	if src.releasesAtEnd < 2 {
		t.Errorf("%d releases before the range's last piece was read, want 3 (one per %d bytes)", src.releasesAtEnd, releaseEvery)
	}
	if releases != 3 {
		t.Errorf("%d releases in all, want 3", releases)
	}
}

// TestDecoratedKeepsAbilities: through every decorator, a local file's writer still takes
// ranges (a file range goes to fastcopy's pread whole, its sums fed) and the output's
// abilities are found with storage.As; a bucket-like output (Write only) gets a reader's
// range from the bytes its source lends.
func TestDecoratedKeepsAbilities(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	out, err := storage.JoinOutput(ctx, filepath.Join(dir, "out"), storage.SharedOptions{OutputOptions: storage.OutputOptions{Folder: true}, Hosts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Abort()
	p := NewPaged(ctx, NewReplay(NewHold(out, "m.json"), "out", "m.json"))
	for _, ability := range []bool{
		has[storage.Leftovers](p), has[storage.FileSums](p), has[storage.Staged](p), has[storage.Reopener](p), has[storage.SharedOutput](p),
	} {
		if !ability {
			t.Fatalf("a decorated local folder lost an ability")
		}
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	srcPath := filepath.Join(dir, "src")
	if err := os.WriteFile(srcPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := p.Create("a/w.bin")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := storage.As[statedict.RangeWriter](w); !ok {
		t.Fatal("a decorated file writer takes no ranges")
	}
	if _, ok := storage.As[interface{ Unwrap() io.Writer }](w); !ok {
		t.Fatal("a decorated file writer does not give back the one it wraps")
	}
	tensor := xxhash.New()
	if _, err := statedict.WriteRange(w, statedict.Range{Data: data[16:], Path: srcPath, Off: 16, Sums: []hash.Hash{tensor}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if tensor.Sum64() != xxhash.Sum64(data[16:]) {
		t.Error("the range's sum was not fed its bytes")
	}
	fs, _ := storage.As[storage.FileSums](p)
	sums, err := fs.Sums()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sums["a/w.bin"], (storage.Finished{File: "a/w.bin", Size: int64(len(data) - 16), XXHash64: fmt.Sprintf("%016x", xxhash.Sum64(data[16:]))}); got != want {
		t.Errorf("journaled %+v, want %+v", got, want)
	}
	if err := p.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "out", "a", "w.bin")); err != nil || !bytes.Equal(got, data[16:]) {
		t.Fatalf("committed file differs: %v", err)
	}

	// Write only, the source lending its bytes.
	m := storage.NewMem()
	mo, err := m.CreateOutput(ctx, "mem://b/out", storage.OutputOptions{Folder: true})
	if err != nil {
		t.Fatal(err)
	}
	p = NewPaged(ctx, mo)
	w, err = p.Create("x")
	if err != nil {
		t.Fatal(err)
	}
	l := &lender{data: data, most: 1000}
	sum := xxhash.New()
	if n, err := statedict.WriteRange(w, statedict.Range{Src: l, Off: 16, N: int64(len(data) - 16), Sums: []hash.Hash{sum}}); err != nil || n != int64(len(data)-16) {
		t.Fatalf("wrote %d: %v", n, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get("mem://b/out/x"); !bytes.Equal(got, data[16:]) || sum.Sum64() != xxhash.Sum64(data[16:]) {
		t.Error("a lent range was not written whole with its sums fed")
	}
	if l.lent == 0 || l.read != 0 {
		t.Errorf("%d lends, %d reads: the range was not written from the lent bytes", l.lent, l.read)
	}
}

func has[T any](v any) bool {
	_, ok := storage.As[T](v)
	return ok
}

// lender lends at most most bytes of data at a time.
type lender struct {
	data       []byte
	most       int64
	lent, read int
}

func (l *lender) ReadAt(p []byte, off int64) (int, error) {
	l.read++
	return copy(p, l.data[off:]), nil
}

func (l *lender) Lend(off, n int64) ([]byte, func(), bool, error) {
	l.lent++
	n = min(n, l.most)
	return l.data[off : off+n], func() {}, true, nil
}

// TestPagedCancels: a cancelled write stops at the next piece and the output does not
// commit.
func TestPagedCancels(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m := storage.NewMem()
	mo, _ := m.CreateOutput(context.Background(), "mem://b/out", storage.OutputOptions{Folder: true})
	p := NewPaged(ctx, mo)
	w, err := p.Create("x")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if n, err := w.Write(make([]byte, releaseEvery)); n != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled write wrote %d: %v", n, err)
	}
	if _, err := p.Create("y"); !errors.Is(err, context.Canceled) {
		t.Errorf("created after cancelling: %v", err)
	}
	if err := p.Commit(nil); !errors.Is(err, context.Canceled) {
		t.Errorf("committed after cancelling: %v", err)
	}
}

// kept is a test output that kept files of an interrupted run (storage.Leftovers), whose
// bytes it can read back (storage.Reopener).
type kept struct {
	storage.Output
	files   map[string][]byte
	resumed map[string]storage.Finished
}

func (k *kept) Resumed() map[string]storage.Finished { return k.resumed }
func (k *kept) CleanedUp() bool                      { return false }
func (k *kept) Open(name string) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(k.files[name])), nil
}

func journal(name string, b []byte) storage.Finished {
	return storage.Finished{File: name, Size: int64(len(b)), XXHash64: fmt.Sprintf("%016x", xxhash.Sum64(b))}
}

// TestReplay: a kept file is hashed, not written, feeding the range sums; it must be what
// the journal recorded, on disk and as this run would write it; manifests are written anew.
func TestReplay(t *testing.T) {
	ctx := context.Background()
	data := []byte("the bytes the interrupted run wrote")
	m := storage.NewMem()
	newKept := func(onDisk []byte) *kept {
		mo, _ := m.CreateOutput(ctx, "mem://b/out", storage.OutputOptions{Folder: true, Force: true, Owned: func(context.Context, string) ([]string, bool) { return m.Names(), true }})
		return &kept{Output: mo, files: map[string][]byte{"f": onDisk, "m.json": data},
			resumed: map[string]storage.Finished{"f": journal("f", data), "m.json": journal("m.json", data)}}
	}
	write := func(r *Replay, name string, b []byte) (storage.Finished, error) {
		w, err := r.Create(name)
		if err != nil {
			return storage.Finished{}, err
		}
		sum := xxhash.New()
		if _, err := statedict.WriteRange(w, statedict.Range{Data: b, Sums: []hash.Hash{sum}}); err != nil {
			return storage.Finished{}, err
		}
		if sum.Sum64() != xxhash.Sum64(b) {
			t.Errorf("%s: the range's sum was not fed", name)
		}
		return journal(name, b), w.Close()
	}

	r := NewReplay(newKept(data), "out", "m.json")
	if _, err := write(r, "f", data); err != nil {
		t.Fatal(err)
	}
	if _, err := write(r, "m.json", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Get("mem://b/out/f"); ok {
		t.Error("a kept file was written again")
	}
	if got, _ := m.Get("mem://b/out/m.json"); string(got) != "{}" {
		t.Error("a manifest was not written anew")
	}

	r = NewReplay(newKept(data), "out", "m.json")
	if _, err := write(r, "f", []byte("other bytes")); err == nil || !strings.Contains(err.Error(), "would differ from the interrupted run's") {
		t.Errorf("a run writing other bytes over a kept file: %v", err)
	}
	r = NewReplay(newKept([]byte("damaged bytes")), "out", "m.json")
	if _, err := r.Create("f"); err == nil || !strings.Contains(err.Error(), "was damaged after the interrupted run finished it") {
		t.Errorf("a kept file damaged on disk: %v", err)
	}
}

// staged is a test output whose files appear at Commit.
type staged struct{ storage.Output }

func (staged) Staged() (string, error) { return "", nil }

// TestHold: over an output whose files appear as they are written, the files to write
// last appear only at Commit, after every other and in the order closed; over a Staged
// one they are written as any other.
func TestHold(t *testing.T) {
	ctx := context.Background()
	m := storage.NewMem()
	mo, _ := m.CreateOutput(ctx, "mem://b/out", storage.OutputOptions{Folder: true})
	h := NewHold(mo, "manifest")
	for _, name := range []string{"sub.manifest", "data", "manifest"} {
		w, err := h.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, name)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := m.Get("mem://b/out/manifest"); ok {
		t.Fatal("a manifest appeared before Commit")
	}
	if _, ok := m.Get("mem://b/out/data"); !ok {
		t.Fatal("a file was held")
	}
	if err := h.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if got := m.Names(); strings.Join(got, " ") != "mem://b/out/data mem://b/out/manifest mem://b/out/sub.manifest" {
		t.Errorf("committed %v", got)
	}

	m2 := storage.NewMem()
	mo2, _ := m2.CreateOutput(ctx, "mem://b/out", storage.OutputOptions{Folder: true})
	h = NewHold(staged{mo2}, "manifest")
	w, _ := h.Create("manifest")
	io.WriteString(w, "m")
	w.Close()
	if _, ok := m2.Get("mem://b/out/manifest"); !ok {
		t.Error("a staged output's manifest was held")
	}
}

// TestHashesAndProgress: each key's digest is of the bytes fed for it; progress counts
// them against the total, never past it, and Finish reports the total.
func TestHashesAndProgress(t *testing.T) {
	var calls [][2]int64
	p := NewProgress(func(done, total int64) { calls = append(calls, [2]int64{done, total}) })
	h := NewHashes()
	p.Expect(10)
	a, b := new(int), new(int)
	io.WriteString(p.Counting(h.Sum(a)), "0123456")
	io.WriteString(p.Counting(h.Sum(b)), "789ab")
	if sum, ok := h.Sum64(a); !ok || sum != xxhash.Sum64String("0123456") {
		t.Error("wrong digest for a")
	}
	if _, ok := h.Sum64(new(int)); ok {
		t.Error("a digest for a key never fed")
	}
	p.Grow(5)
	p.Finish()
	want := [][2]int64{{7, 10}, {10, 10}, {15, 15}}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Errorf("progress %v, want %v", calls, want)
	}
}

// TestTarget: a target writes the output's files once each; a file of a folder output
// is a single-file output of its own, named after it.
func TestTarget(t *testing.T) {
	ctx := context.Background()
	m := storage.NewMem()
	mo, _ := m.CreateOutput(ctx, "mem://b/out", storage.OutputOptions{Folder: true})
	root := NewTarget(mo, "mem://b/out")
	sub := root.Sub("optimizer.pt")
	if sub.Name() != "mem://b/out/optimizer.pt" || root.Name() != "mem://b/out" || sub.File() != "optimizer.pt" {
		t.Errorf("names %q, %q", root.Name(), sub.Name())
	}
	w, err := sub.Create("")
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, ok := m.Get("mem://b/out/optimizer.pt"); !ok {
		t.Error("a file of the folder was not written at its name")
	}
	if _, err := sub.Create("x"); err == nil || !strings.Contains(err.Error(), "a single-file output cannot hold x") {
		t.Errorf("a file of a folder held another: %v", err)
	}
	if _, err := root.Create("optimizer.pt"); err == nil || !strings.Contains(err.Error(), "optimizer.pt written twice") {
		t.Errorf("a file written twice: %v", err)
	}
}

func TestIsManifest(t *testing.T) {
	for _, c := range []struct {
		name string
		want bool
	}{
		{"ckpt-manifest.json", true},              // a folder's
		{".ckpt-manifest.json", true},             // a single file's (its name + this)
		{"optimizer.pt.ckpt-manifest.json", true}, // a file of a folder's
		{"sub/ckpt-manifest.json", true},          // in a subfolder
		{"model.safetensors", false},              // a file
		{"xckpt-manifest.json", false},            // another name ending alike
		{"ckpt-manifest.json.partial", false},     // not the manifest
	} {
		if got := IsManifest(c.name, "ckpt-manifest.json"); got != c.want {
			t.Errorf("IsManifest(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}
