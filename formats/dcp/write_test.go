package dcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// TestPySetOrder: ties in dedup_save_plans go to the first holder in CPython's set order,
// which testdata/dcp/setorder.json records (planner/gen_setorder.py).
func TestPySetOrder(t *testing.T) {
	b, err := os.ReadFile("../../testdata/dcp/planner/setorder.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Small []struct {
			In    []int `json:"in"`
			Order []int `json:"order"`
		} `json:"small"`
		Big []struct {
			Start, Step, N int
			SHA256         string `json:"sha256"`
		} `json:"big"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	sorted := 0
	for _, c := range g.Small {
		if got := pySetOrder(c.In); !slices.Equal(got, c.Order) {
			t.Errorf("set of %v iterates %v, Python %v", c.In, got, c.Order)
		}
		if slices.IsSorted(c.Order) {
			sorted++
		}
	}
	if sorted == len(g.Small) {
		t.Fatal("every case iterates in increasing order: the fixture tests nothing")
	}
	for _, c := range g.Big {
		var in []int
		for i := range c.N {
			in = append(in, c.Start+i*c.Step)
		}
		var s strings.Builder
		for i, v := range pySetOrder(in) {
			if i > 0 {
				s.WriteString(", ")
			}
			fmt.Fprint(&s, v)
		}
		sum := sha256.Sum256([]byte("[" + s.String() + "]"))
		if hex.EncodeToString(sum[:]) != c.SHA256 {
			t.Errorf("set of %d ints from %d by %d: order differs from Python's", c.N, c.Start, c.Step)
		}
	}
}

// dirOutput is a statedict.Output writing plain files into a folder.
type dirOutput string

func (d dirOutput) Create(name string) (io.WriteCloser, error) {
	return os.Create(filepath.Join(string(d), filepath.FromSlash(name)))
}
func (d dirOutput) Name() string { return string(d) }

// f32 is a float32 tensor of shape holding base, base+1, ….
func f32(base int, shape ...int64) *statedict.Tensor {
	n := int64(1)
	for _, s := range shape {
		n *= s
	}
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(base)+uint32(i))
	}
	return &statedict.Tensor{DType: statedict.Float32, Shape: shape, Strides: statedict.ContiguousStrides(shape),
		Storage: statedict.NewMappedStorage(fmt.Sprint(base), "cpu", statedict.Float32, b)}
}

// shardedFixture is a small state dict over 4 ranks: a matrix split by rows unevenly
// (2, 2, 1 and an empty piece), one split by columns, a replicated vector, a 0-dim step
// counter and non-tensor values.
func shardedFixture(t *testing.T) (*statedict.Checkpoint, *statedict.Sharding) {
	rows, cols, rep, step := f32(0, 5, 3), f32(100, 2, 8), f32(200, 6), f32(300)
	model := statedict.NewDict("")
	model.Set("rows", rows)
	model.Set("cols", cols)
	model.Set("rep", rep)
	model.Set("none", &statedict.Tensor{DType: statedict.BFloat16, Shape: []int64{0, 3}, Strides: []int64{3, 1}})
	opt := statedict.NewDict("")
	opt.Set("step", step)
	opt.Set("lr", 0.5)
	opt.Set("betas", &statedict.List{Items: []statedict.Value{0.9, 0.95}})
	root := statedict.NewDict("")
	root.Set("model", model)
	root.Set("optim", opt)
	piece := func(off, size []int64, ranks ...int) statedict.Piece {
		return statedict.Piece{Offsets: off, Sizes: size, Ranks: ranks}
	}
	sh := &statedict.Sharding{Ranks: 4, Tensors: map[*statedict.Tensor]*statedict.TensorSharding{
		rows: {Pieces: []statedict.Piece{piece([]int64{0, 0}, []int64{2, 3}, 0), piece([]int64{2, 0}, []int64{2, 3}, 1),
			piece([]int64{4, 0}, []int64{1, 3}, 2), piece([]int64{5, 0}, []int64{0, 3}, 3)}},
		// columns, replicated over ranks 0/2 and 1/3
		cols: {Pieces: []statedict.Piece{piece([]int64{0, 0}, []int64{2, 4}, 0, 2), piece([]int64{0, 4}, []int64{2, 4}, 1, 3)}},
	}}
	return &statedict.Checkpoint{Root: root}, sh
}

func readMD(t *testing.T, dir string) *Metadata {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, MetadataFile))
	if err != nil {
		t.Fatal(err)
	}
	md, err := ReadMetadata(b, dir)
	if err != nil {
		t.Fatal(err)
	}
	return md
}

func TestWriteSharded(t *testing.T) {
	ck, sh := shardedFixture(t)
	dir := t.TempDir()
	w, err := Write(dirOutput(dir), ck, statedict.WriteOptions{Sharding: sh})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp", MetadataFile}
	if !slices.Equal(w.Files, want) {
		t.Fatalf("files %v, want %v", w.Files, want)
	}
	// Where each piece went: rows and cols by their holders (cols' replicas to the rank
	// with the smaller plan); rep, step and the bytes items deduplicated.
	md := readMD(t, dir)
	where := map[string]string{}
	for _, e := range md.Storage {
		where[fmt.Sprint(e.FQN, e.Offsets)] = e.RelativePath
	}
	for k, f := range map[string]string{
		"model.rows[0 0]": "__0_0.distcp", "model.rows[2 0]": "__1_0.distcp", "model.rows[4 0]": "__2_0.distcp", "model.rows[5 0]": "__3_0.distcp",
		"model.cols[0 0]": "__2_0.distcp", "model.cols[0 4]": "__3_0.distcp",
	} {
		if where[k] != f {
			t.Errorf("%s stored in %q, want %s (all: %v)", k, where[k], f, where)
		}
	}
	if len(md.Storage) != 11 {
		t.Errorf("%d stored items, want 11: %v", len(md.Storage), where)
	}
	// Read back: every tensor whole and bit-exact.
	got, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	srcT, _ := ck.Tensors()
	outT, _ := got.Tensors()
	if len(srcT) != len(outT) {
		t.Fatalf("%d tensors read back, %d written", len(outT), len(srcT))
	}
	for i := range srcT {
		a, _ := srcT[i].Tensor.Bytes()
		b, err := outT[i].Tensor.Bytes()
		if err != nil || srcT[i].Name != outT[i].Name || !bytes.Equal(a, b) {
			t.Errorf("%s: read back as %s, equal %v, %v", srcT[i].Name, outT[i].Name, bytes.Equal(a, b), err)
		}
	}
	if v, _ := got.Root.(*statedict.Dict).Get("optim"); v == nil {
		t.Fatal("no optim")
	} else if lr, _ := v.(*statedict.Dict).Get("lr"); lr != 0.5 {
		t.Errorf("optim.lr = %v", lr)
	}

	// Written in two parts (ranks 2, 3 then 0, 1) and finished: the same files.
	parts := t.TempDir()
	var pp [][]byte
	for _, ranks := range [][]int{{3, 2}, {0, 1}} {
		w, err := Write(dirOutput(parts), ck, statedict.WriteOptions{Sharding: sh, Ranks: ranks})
		if err != nil {
			t.Fatal(err)
		}
		if len(w.Files) != 2 || w.Part == nil {
			t.Fatalf("ranks %v: files %v, part %q", ranks, w.Files, w.Part)
		}
		pp = append(pp, w.Part)
	}
	if _, err := os.Stat(filepath.Join(parts, MetadataFile)); err == nil {
		t.Fatal("a writer of some ranks wrote the .metadata")
	}
	if _, err := Finish(dirOutput(parts), ck, statedict.WriteOptions{Sharding: sh}, pp); err != nil {
		t.Fatal(err)
	}
	for _, f := range want {
		a, _ := os.ReadFile(filepath.Join(dir, f))
		b, _ := os.ReadFile(filepath.Join(parts, f))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between one write and two parts", f)
		}
	}
	// Missing, doubled or foreign parts are refused.
	for _, c := range []struct {
		parts [][]byte
		want  string
	}{
		{pp[:1], "no part holds rank 0"},
		{[][]byte{pp[0], pp[0], pp[1]}, "in two parts"},
		{[][]byte{pp[0], []byte(strings.Replace(string(pp[1]), `"__0_0.distcp"`, `"__1_0.distcp"`, 1))}, "but rank 0 writes it"},
		{[][]byte{pp[0], []byte(strings.Replace(string(pp[1]), `"model.rows"`, `"model.row"`, 1))}, "not an item"},
	} {
		_, err := Finish(dirOutput(t.TempDir()), ck, statedict.WriteOptions{Sharding: sh}, c.parts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Finish: %v, want %q", err, c.want)
		}
	}
}

// TestWriteShardedSums: a tensor whose pieces are written in its own order feeds one
// digest (its checksum is free); one split by columns feeds a digest per piece.
func TestWriteShardedSums(t *testing.T) {
	ck, sh := shardedFixture(t)
	keys := map[any]*bytes.Buffer{}
	sum := func(key any) hash.Hash {
		b := &bytes.Buffer{}
		keys[key] = b
		return recorder{b}
	}
	if _, err := Write(dirOutput(t.TempDir()), ck, statedict.WriteOptions{Sharding: sh, Sum: sum}); err != nil {
		t.Fatal(err)
	}
	tensors, _ := ck.Tensors()
	for _, nt := range tensors {
		b, ok := keys[nt.Tensor]
		whole, _ := nt.Tensor.Bytes()
		switch nt.Name {
		case "model.none":
			if ok {
				t.Errorf("%s: a digest for an empty tensor", nt.Name)
			}
		case "model.cols":
			if ok {
				t.Errorf("%s: a digest of the whole tensor fed out of order", nt.Name)
			}
		default:
			if !ok || !bytes.Equal(b.Bytes(), whole) {
				t.Errorf("%s: digest fed %d bytes (want its %d bytes in order)", nt.Name, len(b.Bytes()), len(whole))
			}
		}
	}
	if len(keys) != 5 { // rows, rep, step whole; cols as two pieces; nothing for the empty one
		t.Errorf("%d digests, want 5", len(keys))
	}
}

// recorder is a hash.Hash that keeps what it is fed.
type recorder struct{ *bytes.Buffer }

func (r recorder) Sum(b []byte) []byte { return append(b, r.Bytes()...) }
func (r recorder) Size() int           { return 0 }
func (r recorder) BlockSize() int      { return 1 }

// FuzzFinishParts feeds arbitrary parts to Finish (with valid ones beside them): it must
// never panic, and a .metadata it writes must read back.
func FuzzFinishParts(f *testing.F) {
	ck, sh := shardedFixture(&testing.T{})
	dir := f.TempDir()
	var parts [][]byte
	for _, ranks := range [][]int{{0, 1}, {2, 3}} {
		w, err := Write(dirOutput(dir), ck, statedict.WriteOptions{Sharding: sh, Ranks: ranks})
		if err != nil {
			f.Fatal(err)
		}
		parts = append(parts, w.Part)
	}
	f.Add(parts[1])
	f.Add([]byte(strings.Replace(string(parts[1]), `"length":`, `"length":-`, 1)))
	f.Add([]byte(`{"ranks":[2,3],"items":[{"fqn":"model.rows","offsets":[4,0],"file":"__2_0.distcp","offset":0,"length":1e300}]}`))
	f.Fuzz(func(t *testing.T, part []byte) {
		out := t.TempDir()
		if _, err := Finish(dirOutput(out), ck, statedict.WriteOptions{Sharding: sh}, [][]byte{parts[0], part}); err != nil {
			return
		}
		b, err := os.ReadFile(filepath.Join(out, MetadataFile))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ReadMetadata(b, MetadataFile); err != nil {
			t.Fatalf("Finish wrote a .metadata that does not read back: %v", err)
		}
	})
}

// TestWriteManyRanks: a tensor in more chunks than one pickle batch holds (1,100 ranks)
// reads back whole.
func TestWriteManyRanks(t *testing.T) {
	const ranks = 1100
	x := f32(0, 2*ranks)
	ts := &statedict.TensorSharding{}
	for r := range ranks {
		ts.Pieces = append(ts.Pieces, statedict.Piece{Offsets: []int64{2 * int64(r)}, Sizes: []int64{2}, Ranks: []int{r}})
	}
	root := statedict.NewDict("")
	root.Set("x", x)
	dir := t.TempDir()
	sh := &statedict.Sharding{Ranks: ranks, Tensors: map[*statedict.Tensor]*statedict.TensorSharding{x: ts}}
	if _, err := Write(dirOutput(dir), &statedict.Checkpoint{Root: root}, statedict.WriteOptions{Sharding: sh}); err != nil {
		t.Fatal(err)
	}
	md := readMD(t, dir)
	if it, _ := md.Item("x"); it == nil || len(it.Tensor.Chunks) != ranks {
		t.Fatalf("metadata: %+v", it)
	}
	ck, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	got, _ := ck.Tensor("x")
	a, _ := got.Bytes()
	b, _ := x.Bytes()
	if !bytes.Equal(a, b) {
		t.Fatal("read back differs")
	}
}
