package dcp

import (
	"bytes"
	"encoding/binary"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// box is a chunk in a test tiling, with the memory layout of its tensor.
type box struct {
	off, size []int64
	layout    string // "rowmajor", "colmajor" (strides reversed), "offset" (storage offset 3), "reader" (io.ReaderAt storage)
}

// wholeTensor returns the contiguous bytes of a tensor whose element i holds i+1, as int32.
func wholeTensor(shape []int64) []byte {
	n, _ := numel(shape, 4)
	b := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(i+1))
	}
	return b
}

// indices calls fn with every index of shape in the given dim order (last varies fastest).
func indices(shape []int64, order []int, fn func(idx []int64)) {
	idx := make([]int64, len(shape))
	if n, _ := numel(shape, 1); n == 0 {
		return
	}
	for {
		fn(idx)
		k := len(order) - 1
		for ; k >= 0; k-- {
			d := order[k]
			if idx[d]++; idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
		if k < 0 {
			return
		}
	}
}

// makeChunk cuts a box out of the whole tensor into its own storage, laid out as asked.
func makeChunk(whole []byte, shape []int64, b box) Chunk {
	order := make([]int, len(shape))
	for d := range order {
		order[d] = d
	}
	if b.layout == "colmajor" {
		slices.Reverse(order)
	}
	gstr := statedict.ContiguousStrides(shape)
	var buf []byte
	if b.layout == "offset" {
		buf = append(buf, make([]byte, 12)...)
	}
	indices(b.size, order, func(idx []int64) {
		var g int64
		for d, x := range idx {
			g += (x + b.off[d]) * gstr[d]
		}
		buf = append(buf, whole[4*g:4*g+4]...)
	})
	strides := statedict.ContiguousStrides(b.size)
	if b.layout == "colmajor" {
		acc := int64(1)
		for d := range b.size {
			strides[d] = acc
			acc *= b.size[d]
		}
	}
	st := statedict.NewMappedStorage("c", "cpu", statedict.Int32, buf)
	if b.layout == "reader" {
		st = statedict.NewReaderStorage("c", "cpu", statedict.Int32, bytes.NewReader(buf), 0, int64(len(buf)))
	}
	t := &statedict.Tensor{DType: statedict.Int32, Shape: b.size, Strides: strides, Storage: st}
	if b.layout == "offset" {
		t.Offset = 3
	}
	return Chunk{Offsets: b.off, Tensor: t}
}

func sz(v ...int64) []int64 { return append([]int64{}, v...) }

// TestChunked assembles tilings of every kind (row, column, grid, 3-d, nested bands,
// non-guillotine pinwheel, empty chunks, 0-dim) from chunks laid out in every way, and
// compares the whole read (Tensor.WriteTo through the storage) and reads at many offsets,
// aligned or not, with the original bytes.
func TestChunked(t *testing.T) {
	tests := []struct {
		name  string
		shape []int64
		boxes []box
	}{
		{"1-d", sz(10), []box{{sz(0), sz(3), "rowmajor"}, {sz(3), sz(4), "offset"}, {sz(7), sz(3), "reader"}}},
		{"rows", sz(6, 4), []box{{sz(4, 0), sz(2, 4), "colmajor"}, {sz(0, 0), sz(2, 4), "rowmajor"}, {sz(2, 0), sz(2, 4), "offset"}}},
		{"columns and an empty chunk", sz(5, 9), []box{{sz(0, 0), sz(5, 3), "rowmajor"}, {sz(0, 3), sz(5, 3), "colmajor"},
			{sz(0, 6), sz(5, 3), "reader"}, {sz(0, 9), sz(5, 0), "rowmajor"}}},
		{"grid", sz(6, 8), []box{{sz(0, 0), sz(3, 4), "rowmajor"}, {sz(0, 4), sz(3, 4), "colmajor"},
			{sz(3, 0), sz(3, 4), "offset"}, {sz(3, 4), sz(3, 4), "reader"}}},
		{"3-d grid", sz(4, 6, 5), []box{{sz(0, 0, 0), sz(2, 6, 3), "rowmajor"}, {sz(0, 0, 3), sz(2, 6, 2), "colmajor"},
			{sz(2, 0, 0), sz(2, 6, 3), "offset"}, {sz(2, 0, 3), sz(2, 6, 2), "rowmajor"}}},
		{"middle dim", sz(2, 6, 3), []box{{sz(0, 0, 0), sz(2, 2, 3), "rowmajor"}, {sz(0, 2, 0), sz(2, 4, 3), "colmajor"}}},
		{"bands", sz(8, 3), []box{{sz(0, 0), sz(2, 3), "rowmajor"}, {sz(2, 0), sz(2, 3), "rowmajor"},
			{sz(4, 0), sz(2, 3), "colmajor"}, {sz(6, 0), sz(2, 3), "rowmajor"}}},
		{"pinwheel", sz(3, 3), []box{{sz(0, 0), sz(1, 2), "rowmajor"}, {sz(0, 2), sz(2, 1), "colmajor"},
			{sz(2, 1), sz(1, 2), "offset"}, {sz(1, 0), sz(2, 1), "rowmajor"}, {sz(1, 1), sz(1, 1), "reader"}}},
		{"one chunk", sz(2, 3), []box{{sz(0, 0), sz(2, 3), "colmajor"}}},
		{"0-dim", sz(), []box{{sz(), sz(), "rowmajor"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			whole := wholeTensor(tc.shape)
			chunks := make([]Chunk, len(tc.boxes))
			for i, b := range tc.boxes {
				chunks[i] = makeChunk(whole, tc.shape, b)
			}
			c, err := NewChunked(statedict.Int32, tc.shape, chunks)
			if err != nil {
				t.Fatal(err)
			}
			tensor := c.Tensor("x")
			if !slices.Equal(tensor.Shape, tc.shape) || c.Size() != int64(len(whole)) {
				t.Fatalf("tensor %v of %d bytes, want %v of %d", tensor.Shape, c.Size(), tc.shape, len(whole))
			}
			var got bytes.Buffer
			if _, err := tensor.WriteTo(&got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), whole) {
				t.Fatalf("assembled\n%v\nwant\n%v", got.Bytes(), whole)
			}
			// ReadAt is safe for concurrent use, as io.ReaderAt requires (run with -race).
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					p := make([]byte, len(whole))
					for off := 0; off < len(p); off += 7 + g {
						if _, err := c.ReadAt(p[off:min(off+7+g, len(p))], int64(off)); err != nil && err != io.EOF {
							t.Error(err)
						}
					}
					if !bytes.Equal(p, whole) {
						t.Errorf("concurrent reader %d read the wrong bytes", g)
					}
				})
			}
			wg.Wait()
			for off := range int64(len(whole)) {
				for _, n := range []int64{1, 5, 16, int64(len(whole))} {
					p := make([]byte, n)
					m, err := c.ReadAt(p, off)
					want := whole[off:min(off+n, int64(len(whole)))]
					if m != len(want) || !bytes.Equal(p[:m], want) || (m < len(p)) != (err == io.EOF) || err != nil && err != io.EOF {
						t.Fatalf("ReadAt(%d bytes, %d) = %d %v %v, want %v", n, off, m, err, p[:m], want)
					}
				}
			}
		})
	}
}

// TestNewChunkedErrors checks that chunks which do not tile the tensor, or do not match it,
// are refused with a message naming the chunk.
func TestNewChunkedErrors(t *testing.T) {
	shape := sz(4, 4)
	whole := wholeTensor(shape)
	chunk := func(off, size []int64) Chunk { return makeChunk(whole, shape, box{off, size, "rowmajor"}) }
	wrongDType := chunk(sz(2, 0), sz(2, 4))
	wrongDType.Tensor.DType = statedict.Float32
	tests := []struct {
		name   string
		chunks []Chunk
		msg    string
	}{
		{"gap", []Chunk{chunk(sz(0, 0), sz(2, 4))}, "chunks cover 8 of the 16 elements; no chunk holds the element at [2 0]"},
		{"overlap", []Chunk{chunk(sz(0, 0), sz(3, 4)), chunk(sz(2, 0), sz(2, 4))}, "chunk at offsets [2 0]: chunk (sizes [2 4]) overlaps the chunk at offsets [0 0]"},
		{"outside", []Chunk{chunk(sz(0, 0), sz(2, 4)), {Offsets: sz(3, 0), Tensor: chunk(sz(0, 0), sz(2, 4)).Tensor}}, "reaches outside the tensor of shape [4 4] in dim 0"},
		{"dtype", []Chunk{chunk(sz(0, 0), sz(2, 4)), wrongDType}, "chunk at offsets [2 0] is float32, the tensor int32"},
		{"dims", []Chunk{{Offsets: sz(0), Tensor: chunk(sz(0, 0), sz(4, 4)).Tensor}}, "do not match the 2 dims"},
		{"no tensor", []Chunk{{Offsets: sz(0, 0)}}, "has no tensor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewChunked(statedict.Int32, shape, tc.chunks)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %v, want %q", err, tc.msg)
			}
		})
	}
}

// TestCheckTiling covers the geometry rules on their own, including the edge cases torch
// produces (empty chunks at offset == dim, 0-dim tensors, no chunks for empty tensors).
func TestCheckTiling(t *testing.T) {
	c := func(off, size []int64) ChunkMeta { return ChunkMeta{off, size} }
	tests := []struct {
		name   string
		shape  []int64
		chunks []ChunkMeta
		bad    int
		msg    string // "" for valid
	}{
		{"empty shard at the end", sz(6), []ChunkMeta{c(sz(0), sz(6)), c(sz(6), sz(0))}, -1, ""},
		{"0-dim", sz(), []ChunkMeta{c(sz(), sz())}, -1, ""},
		{"0-dim twice", sz(), []ChunkMeta{c(sz(), sz()), c(sz(), sz())}, 1, "two chunks at the same offsets"},
		{"empty tensor, no chunk", sz(0, 3), nil, -1, ""},
		{"no chunk", sz(2), nil, -1, "chunks cover 0 of the 2 elements; no chunk holds the element at [0]"},
		{"negative offset", sz(4), []ChunkMeta{c(sz(-1), sz(5))}, 0, "reaches outside"},
		{"huge size", sz(4), []ChunkMeta{c(sz(2), sz(1<<62))}, 0, "reaches outside"},
		{"empty beyond the end", sz(4), []ChunkMeta{c(sz(0), sz(4)), c(sz(5), sz(0))}, 1, "reaches outside"},
		{"duplicate empty", sz(4), []ChunkMeta{c(sz(0), sz(4)), c(sz(4), sz(0)), c(sz(4), sz(0))}, 2, "two chunks at the same offsets"},
		{"rank mismatch", sz(4, 4), []ChunkMeta{c(sz(0), sz(4))}, 0, "do not match the 2 dims"},
		{"overlap along dim 1", sz(2, 6), []ChunkMeta{c(sz(0, 0), sz(2, 4)), c(sz(0, 3), sz(2, 3))}, 1, "overlaps the chunk at offsets [0 0]"},
		{"shape overflow", sz(1<<40, 1<<40), nil, -1, "invalid or too large"},
		{"negative dim", sz(-1), nil, -1, "invalid or too large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad, err := checkTiling(statedict.Float32, tc.shape, tc.chunks)
			if tc.msg == "" {
				if err != nil {
					t.Errorf("unexpected error %v", err)
				}
				return
			}
			if err == nil || bad != tc.bad || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("chunk %d error %v, want chunk %d %q", bad, err, tc.bad, tc.msg)
			}
		})
	}
}

// TestNest rebuilds nested state dicts the way torch's set_element does, and refuses paths
// that clash.
func TestNest(t *testing.T) {
	item := func(fqn string) Item { return Item{FQN: fqn} }
	tests := []struct {
		name  string
		items []Item
		paths map[string]Path
		want  string // statedict.Flatten rendering, or the error
	}{
		{"dicts", []Item{item("a.b"), item("a.c"), item("d")},
			map[string]Path{"a.b": {"a", "b"}, "a.c": {"a", "c"}, "d": {"d"}}, "a.b=0 a.c=1 d=2"},
		{"list with holes", []Item{item("l.2"), item("l.0.x")},
			map[string]Path{"l.2": {"l", int64(2)}, "l.0.x": {"l", int64(0), "x"}}, "l.0.x=1 l.1=<nil> l.2=0"},
		{"an int makes a list", []Item{item("s.3.step")},
			map[string]Path{"s.3.step": {"s", int64(3), "step"}}, "s.0=<nil> s.1=<nil> s.2=<nil> s.3.step=0"},
		{"int key into an existing dict", []Item{item("d.k"), item("d.0.x")},
			map[string]Path{"d.k": {"d", "k"}, "d.0.x": {"d", int64(0), "x"}}, "d.k=0 d.0.x=1"},
		{"no planner entry", []Item{item("x.y"), item("z")}, map[string]Path{"z": {"z"}}, "x.y=0 z=1"},
		{"through a leaf", []Item{item("a"), item("a.b")}, map[string]Path{"a": {"a"}, "a.b": {"a", "b"}},
			`"a.b": planner_data path ("a", "b"): element 1 (b) goes into a int`},
		{"string into a list", []Item{item("l.0"), item("l.x")}, map[string]Path{"l.0": {"l", int64(0)}, "l.x": {"l", "x"}},
			`key "x" into a list`},
		{"index into a dict", []Item{item("d.k"), item("d.0")}, map[string]Path{"d.k": {"d", "k"}, "d.0": {"d", int64(0)}},
			"list index 0 into a dict"},
		{"index too large", []Item{item("l")}, map[string]Path{"l": {"l", int64(1 << 40)}},
			"list index 1099511627776: lists would hold more empty slots"},
		{"padding budget", []Item{item("a"), item("b")}, map[string]Path{"a": {"a", int64(padBudget)}, "b": {"b", int64(2)}},
			`"b": planner_data path ("b", 2): list index 2: lists would hold more empty slots`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			md := &Metadata{Items: tc.items, PlannerData: tc.paths}
			values := make([]statedict.Value, len(tc.items))
			for i := range values {
				values[i] = int64(i)
			}
			root, err := Nest(md, values, ".metadata")
			var got string
			if err != nil {
				got = err.Error()
			} else {
				leaves, _ := statedict.Flatten(root)
				var parts []string
				for _, l := range leaves {
					parts = append(parts, l.Name+"="+statedict.KeyString(l.Value))
				}
				got = strings.Join(parts, " ")
				got = strings.ReplaceAll(got, "=None", "=<nil>")
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}
