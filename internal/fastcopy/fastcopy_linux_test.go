package fastcopy

import (
	"bytes"
	"hash"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/statedict"
	"golang.org/x/sys/unix"
)

// modes runs a test with direct I/O allowed, switched off, and on the portable path other
// systems take (no direct I/O, no early writeback).
func modes(t *testing.T, test func(t *testing.T, direct bool)) {
	for _, mode := range []string{"direct", "cached", "portable"} {
		t.Run(mode, func(t *testing.T) {
			switch mode {
			case "cached":
				t.Setenv("CKPT_DIRECT_IO", "off")
			case "portable":
				t.Setenv("CKPT_WRITE_PATH", "portable")
			}
			test(t, mode == "direct")
		})
	}
}

func randomFile(t *testing.T, dir string, n int) (string, []byte) {
	t.Helper()
	src := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	path := filepath.Join(dir, "src")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, src
}

// TestFileInterleaves checks that small writes and ranges (of a file, of memory, of a
// reader) land in order and byte-exact, across chunk boundaries, at unaligned offsets, with
// an unaligned final size, and that every range's sums see exactly its bytes.
func TestFileInterleaves(t *testing.T) {
	modes(t, func(t *testing.T, direct bool) {
		dir := t.TempDir()
		srcPath, src := randomFile(t, dir, 3*chunkSize+12345)
		out, err := os.Create(filepath.Join(dir, "out"))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		f := NewFile(out)
		if direct && !f.useDirect.Load() {
			t.Logf("the filesystem of %s refuses O_DIRECT: only the cached path is tested", dir)
		}
		var want bytes.Buffer
		const data, file, reader = 0, 1, 2 // where a range's bytes are
		pieces := []struct{ off, n, from int }{
			{0, 10, file}, {17, chunkSize + 3, file}, {5, 100 << 10, data}, {len(src) - 70000, 70000, file},
			{1, 3, file}, {0, 0, file}, {9, 2*chunkSize + 1, file}, {3, piece + 1, data},
			{11, chunkSize + piece + 5, reader}, {0, 7, reader},
		}
		for i, p := range pieces {
			hdr := []byte{byte(i), 'h'}
			if _, err := f.Write(hdr); err != nil {
				t.Fatal(err)
			}
			want.Write(hdr)
			bs := src[p.off : p.off+p.n]
			rng := statedict.Range{Data: bs, Off: int64(p.off)}
			switch p.from {
			case file:
				rng.Path = srcPath
			case reader:
				rng = statedict.Range{Src: bytes.NewReader(src), Off: int64(p.off), N: int64(p.n)}
			}
			crc, xx := crc32.NewIEEE(), xxhash.New()
			rng.Sums = []hash.Hash{crc, xx}
			n, err := statedict.WriteRange(f, rng)
			if err != nil || n != int64(p.n) {
				t.Fatalf("range %d: %d, %v", i, n, err)
			}
			if got, want := crc.Sum32(), crc32.ChecksumIEEE(bs); got != want {
				t.Errorf("range %d: CRC %08x, want %08x", i, got, want)
			}
			if got, want := xx.Sum64(), xxhash.Sum64(bs); got != want {
				t.Errorf("range %d: xxhash %016x, want %016x", i, got, want)
			}
			want.Write(bs)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if pos, _ := out.Seek(0, 1); pos != int64(want.Len()) {
			t.Errorf("file positioned at %d after Close, want its end %d", pos, want.Len())
		}
		got, _ := os.ReadFile(filepath.Join(dir, "out"))
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("output differs (%d bytes, want %d)", len(got), want.Len())
		}
	})
}

// TestFileContinues checks that a File picks up where the file's owner stopped writing, at
// an unaligned offset (which direct I/O cannot start from), and leaves earlier bytes alone.
func TestFileContinues(t *testing.T) {
	modes(t, func(t *testing.T, direct bool) {
		dir := t.TempDir()
		out, err := os.Create(filepath.Join(dir, "out"))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		out.WriteString("head")
		f := NewFile(out)
		if f.useDirect.Load() {
			t.Error("direct I/O chosen at an unaligned offset")
		}
		body := bytes.Repeat([]byte("0123456789"), chunkSize/5)
		f.Write(body)
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(filepath.Join(dir, "out"))
		if string(got[:4]) != "head" || !bytes.Equal(got[4:], body) {
			t.Fatalf("output differs (%d bytes)", len(got))
		}
	})
}

// TestFileSourceTooShort checks that a range past the end of its source file is an error
// naming the file and the offset, and that Write after Close is refused.
func TestFileSourceTooShort(t *testing.T) {
	modes(t, func(t *testing.T, direct bool) {
		dir := t.TempDir()
		srcPath, src := randomFile(t, dir, 1000)
		out, err := os.Create(filepath.Join(dir, "out"))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		f := NewFile(out)
		long := append(src, make([]byte, 100)...)
		_, err = f.WriteRange(statedict.Range{Data: long, Path: srcPath})
		if err == nil || !strings.Contains(err.Error(), srcPath) || !strings.Contains(err.Error(), "offset 0") {
			t.Fatalf("got %v, want an error naming %s and the offset", err, srcPath)
		}
		f.Close()
		if _, err := f.Write([]byte("x")); err == nil {
			t.Fatal("Write after Close succeeded")
		}
	})
}

// TestFileManySources checks that ranges of many source files (a folder of shards) are
// copied byte-exact while at most maxSources of them are open at once, in any order.
func TestFileManySources(t *testing.T) {
	dir := t.TempDir()
	const files = 3*maxSources + 1
	var paths []string
	for i := range files {
		p := filepath.Join(dir, "src"+strconv.Itoa(i))
		if err := os.WriteFile(p, bytes.Repeat([]byte{byte(i)}, 100), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	f := NewFile(out)
	var want []byte
	for _, i := range append(rand.New(rand.NewPCG(3, 4)).Perm(files), rand.New(rand.NewPCG(5, 6)).Perm(files)...) {
		data := bytes.Repeat([]byte{byte(i)}, 10)
		if _, err := f.WriteRange(statedict.Range{Data: data, Path: paths[i], Off: 7}); err != nil {
			t.Fatal(err)
		}
		if len(f.srcs) > maxSources {
			t.Fatalf("%d source files open, at most %d allowed", len(f.srcs), maxSources)
		}
		want = append(want, data...)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "out"))
	if !bytes.Equal(got, want) {
		t.Fatal("output differs")
	}
}

// TestFileDirectRefused checks the fall back to the page cache when the filesystem accepted
// O_DIRECT at open but refuses the writes (EINVAL), from the second chunk on.
func TestFileDirectRefused(t *testing.T) {
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	f := NewFile(out)
	if !f.useDirect.Load() {
		t.Skipf("the filesystem of %s refuses O_DIRECT at open: the fallback at write is not reachable here", dir)
	}
	var calls atomic.Int32
	writeDirect = func(d *os.File, b []byte, off int64) (int, error) {
		if calls.Add(1) > 1 {
			return 0, &os.PathError{Op: "write", Path: d.Name(), Err: unix.EINVAL}
		}
		return d.WriteAt(b, off)
	}
	defer func() { writeDirect = (*os.File).WriteAt }()
	want := bytes.Repeat([]byte("abcdefg"), 3*chunkSize/7+5)
	if _, err := f.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if f.useDirect.Load() {
		t.Error("still direct after EINVAL")
	}
	got, _ := os.ReadFile(filepath.Join(dir, "out"))
	if !bytes.Equal(got, want) {
		t.Fatalf("output differs (%d bytes, want %d)", len(got), len(want))
	}
}

// TestFileWriteError checks that a failing disk write surfaces from Close.
func TestFileWriteError(t *testing.T) {
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	ro, err := os.Open(out.Name()) // read-only: every write fails
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	out.Close()
	t.Setenv("CKPT_DIRECT_IO", "off")
	f := NewFile(ro)
	for range 2 * inFlight {
		if _, err := f.Write(make([]byte, chunkSize)); err != nil {
			break
		}
	}
	if err := f.Close(); err == nil {
		t.Fatal("Close after failed writes returned nil")
	}
}

// TestFileFlushes: as the stream goes, the file is flushed once per flushEvery bytes written
// (requests arriving while one waits merge into it), on both paths; a failed flush is the
// File's error, which Close returns, since the final fsync would not see it again.
func TestFileFlushes(t *testing.T) {
	defer func(v int64) { flushEvery = v }(flushEvery)
	flushEvery = 2 * chunkSize
	for _, c := range []struct {
		name, io string
		fail     bool
	}{{"page cache", "off", false}, {"direct", "on", false}, {"failing", "off", true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("CKPT_DIRECT_IO", c.io)
			dir := t.TempDir()
			srcPath, src := randomFile(t, dir, 9*chunkSize+100)
			out, err := os.Create(filepath.Join(dir, "out"))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			f := NewFile(out)
			var flushes atomic.Int32
			f.os.flush = func(g *os.File) error {
				flushes.Add(1)
				if c.fail {
					return unix.EIO
				}
				return g.Sync()
			}
			_, err = f.WriteRange(statedict.Range{Data: src, Path: srcPath})
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			n := flushes.Load()
			switch {
			case c.fail && (err == nil || !strings.Contains(err.Error(), "fdatasync")):
				t.Fatalf("a failed flush: Close returned %v", err)
			case !c.fail && err != nil:
				t.Fatal(err)
			case n < 1 || n > 4:
				t.Fatalf("%d flushes for a stream crossing 4 flush boundaries", n)
			}
			if got, _ := os.ReadFile(out.Name()); !c.fail && !bytes.Equal(got, src) {
				t.Fatal("output differs")
			}
		})
	}
}

// BenchmarkFile measures streaming a 256 MiB page-cache-warm file through File with two sums
// (CRC-32 and xxhash64, as a torch output with a manifest has), including the final fsync.
// Target: the disk's own streaming write speed (dd oflag=direct), at most 64 MiB resident.
func BenchmarkFile(b *testing.B) {
	dir := b.TempDir()
	src := make([]byte, 256<<20)
	for i := range src {
		src[i] = byte(i * 7)
	}
	srcPath := filepath.Join(dir, "src")
	if err := os.WriteFile(srcPath, src, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		out, err := os.Create(filepath.Join(dir, "out"))
		if err != nil {
			b.Fatal(err)
		}
		f := NewFile(out)
		if _, err := f.WriteRange(statedict.Range{Data: src, Path: srcPath, Sums: []hash.Hash{crc32.NewIEEE(), xxhash.New()}}); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		if err := out.Sync(); err != nil {
			b.Fatal(err)
		}
		out.Close()
	}
}

// TestFileMeasuresPaths: a large first file measures both write paths and the faster one
// writes the rest and later files on the device; every byte must land where it belongs
// whichever wins. Each case makes one path slow: every write on it moves the calibration
// clock on by 10 s (a real sleep would compete with the other path's writeback, which on a
// machine busy with other tests' writes took seconds, so the case could not fail for the
// right reason only). The stream mixes small writes with ranges of odd lengths — of a source
// file, or of memory (a bucket's reads, a cast), which measures the same way — so the
// page-cache window ends at an unaligned offset, from which direct I/O must take over.
func TestFileMeasuresPaths(t *testing.T) {
	var skew atomic.Int64
	now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	t.Cleanup(func() { now = time.Now })
	const penalty = int64(10 * time.Second)
	slow := func(t *testing.T, v *func(*os.File, []byte, int64) (int, error)) {
		orig := *v
		*v = func(d *os.File, b []byte, off int64) (int, error) {
			skew.Add(penalty)
			return orig(d, b, off)
		}
		t.Cleanup(func() { *v = orig })
	}
	for _, c := range []struct {
		name       string
		slowDirect bool
		fromMemory bool
	}{
		{"direct slow", true, false}, {"page cache slow", false, false},
		{"from memory, direct slow", true, true}, {"from memory, page cache slow", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			srcPath, src := randomFile(t, dir, 3*calWindow)
			out, err := os.Create(filepath.Join(dir, "out"))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			choices.Clear()
			defer choices.Clear()
			f := NewFile(out)
			if f.calib == nil {
				t.Skipf("the filesystem of %s refuses O_DIRECT at open: nothing to choose between", dir)
			}
			dev := f.calib.dev
			if c.slowDirect {
				slow(t, &writeDirect)
			} else {
				slow(t, &writeCached)
			}
			var want []byte
			for off, i := 0, 0; off < len(src); i++ {
				hdr := []byte{'h', byte(i), 1, 2, 3}[:1+i%5]
				if _, err := f.Write(hdr); err != nil {
					t.Fatal(err)
				}
				want = append(want, hdr...)
				n := min(len(src)-off, piece+i*7919%chunkSize)
				r := statedict.Range{Data: src[off : off+n], Path: srcPath, Off: int64(off)}
				if c.fromMemory {
					r = statedict.Range{Data: src[off : off+n]}
				}
				if _, err := f.WriteRange(r); err != nil {
					t.Fatal(err)
				}
				want = append(want, src[off:off+n]...)
				off += n
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "out")); !bytes.Equal(got, want) {
				t.Fatalf("output differs (%d bytes, want %d)", len(got), len(want))
			}
			direct, ok := choices.Load(dev)
			if !ok || direct.(bool) == c.slowDirect || f.useDirect.Load() == c.slowDirect {
				t.Fatalf("choice direct=%v (made %v), writing direct %v at the end: the slow path was not measured slower", direct, ok, f.useDirect.Load())
			}
			// The next file on the device takes the choice without measuring.
			out2, _ := os.Create(filepath.Join(dir, "out2"))
			defer out2.Close()
			g := NewFile(out2)
			defer g.Close()
			if g.calib != nil || g.useDirect.Load() == c.slowDirect {
				t.Fatal("a later file measured again or ignored the choice")
			}
		})
	}
}

// TestInPieces: the page-cache path writes every byte once, in order, in pieces of at most
// cachedPiece bytes that do not cross a multiple of cachedPiece, from any start offset; a
// failing write stops it with the count written so far.
func TestInPieces(t *testing.T) {
	for _, c := range []struct{ off, n int }{
		{0, 0}, {0, 1}, {0, cachedPiece}, {0, 4 << 20}, {2520, 4<<20 - 2520}, {cachedPiece - 1, 2}, {4096, 3*cachedPiece + 17},
	} {
		b := make([]byte, c.n)
		for i := range b {
			b[i] = byte(i*7 + 3)
		}
		got := make([]byte, c.n)
		next := int64(c.off)
		n, err := inPieces(func(p []byte, off int64) (int, error) {
			if off != next || len(p) == 0 || len(p) > cachedPiece || off/cachedPiece != (off+int64(len(p))-1)/cachedPiece {
				t.Fatalf("off %d n %d: piece of %d bytes at %d (expected at %d)", c.off, c.n, len(p), off, next)
			}
			copy(got[off-int64(c.off):], p)
			next += int64(len(p))
			return len(p), nil
		}, b, int64(c.off))
		if err != nil || n != c.n || !bytes.Equal(got, b) {
			t.Errorf("off %d n %d: wrote %d (%v), bytes equal %v", c.off, c.n, n, err, bytes.Equal(got, b))
		}
	}
	calls := 0
	n, err := inPieces(func(p []byte, off int64) (int, error) {
		if calls++; calls == 3 {
			return 10, io.ErrShortWrite
		}
		return len(p), nil
	}, make([]byte, 4*cachedPiece), 0)
	if n != 2*cachedPiece+10 || err != io.ErrShortWrite || calls != 3 {
		t.Errorf("failing write: %d bytes, %v after %d calls", n, err, calls)
	}
}

// TestCachedWritesOneAtATime: the page-cache path writes one chunk at a time (cachedMu),
// although two writers take chunks; every byte still lands in place.
func TestCachedWritesOneAtATime(t *testing.T) {
	t.Setenv("CKPT_DIRECT_IO", "off")
	var in, most atomic.Int32
	orig := writeCached
	writeCached = func(f *os.File, b []byte, off int64) (int, error) {
		n := in.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(2 * time.Millisecond) // long enough for the other writer to arrive
		defer in.Add(-1)
		return orig(f, b, off)
	}
	t.Cleanup(func() { writeCached = orig })
	dir := t.TempDir()
	_, src := randomFile(t, dir, 10*chunkSize+123)
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	f := NewFile(out)
	for off := 0; off < len(src); off += piece {
		if _, err := f.Write(src[off:min(len(src), off+piece)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "out")); !bytes.Equal(got, src) {
		t.Fatalf("output differs (%d bytes, want %d)", len(got), len(src))
	}
	if m := most.Load(); m != 1 {
		t.Fatalf("%d page-cache writes at once, want 1", m)
	}
}

// pieceLender lends copies of data's bytes in pieces of irregular sizes (refusing from
// refuseFrom on), poisoning each piece when it is given back, so that a byte written after
// its release shows in the output.
type pieceLender struct {
	data       []byte
	refuseFrom int64
	mu         sync.Mutex
	lent, back int
}

func (l *pieceLender) ReadAt(p []byte, off int64) (int, error) { return copy(p, l.data[off:]), nil }

func (l *pieceLender) Lend(off, n int64) ([]byte, func(), bool, error) {
	if off >= l.refuseFrom {
		return nil, nil, false, nil
	}
	l.mu.Lock()
	l.lent++
	k := min(n, int64(100<<10+l.lent*777_777%(5<<20)))
	l.mu.Unlock()
	b := append([]byte(nil), l.data[off:off+k]...)
	var once sync.Once
	return b, func() {
		once.Do(func() {
			for i := range b {
				b[i] = 0xee
			}
			l.mu.Lock()
			l.back++
			l.mu.Unlock()
		})
	}, true, nil
}

// TestFileLends: through the page cache, a range whose source lends its bytes is written
// from the lent memory (each piece given back once, after it is written and checksummed),
// interleaved with small writes, and read where the source stops lending; direct I/O
// never borrows.
func TestFileLends(t *testing.T) {
	for _, c := range []struct {
		name       string
		io         string
		refuseFrom int64
		lends      bool
	}{
		{"page cache", "off", 1 << 40, true},
		{"page cache, lending stops", "off", 9<<20 + 5, true},
		{"direct", "on", 1 << 40, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("CKPT_DIRECT_IO", c.io)
			dir := t.TempDir()
			_, src := randomFile(t, dir, 3*chunkSize+4321)
			l := &pieceLender{data: src, refuseFrom: c.refuseFrom}
			out, err := os.Create(filepath.Join(dir, "out"))
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			f := NewFile(out)
			sum, want := crc32.NewIEEE(), crc32.NewIEEE()
			var expect []byte
			for off, i := 0, 0; off < len(src); i++ {
				hdr := []byte("header")[:1+i%6]
				if _, err := f.Write(hdr); err != nil {
					t.Fatal(err)
				}
				expect = append(expect, hdr...)
				n := min(len(src)-off, 3<<20+i*7919)
				if k, err := f.WriteRange(statedict.Range{Src: l, Off: int64(off), N: int64(n), Sums: []hash.Hash{sum}}); err != nil || k != int64(n) {
					t.Fatalf("range of %d at %d: wrote %d, %v", n, off, k, err)
				}
				want.Write(src[off : off+n])
				if sum.Sum32() != want.Sum32() {
					t.Fatalf("range at %d: its sum was not fed all of it when WriteRange returned", off)
				}
				expect = append(expect, src[off:off+n]...)
				off += n
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, "out")); !bytes.Equal(got, expect) {
				t.Fatalf("output differs (%d bytes, want %d)", len(got), len(expect))
			}
			if (l.lent > 0) != c.lends || l.back != l.lent {
				t.Fatalf("%d pieces lent, %d given back (lending expected: %v)", l.lent, l.back, c.lends)
			}
		})
	}
}
