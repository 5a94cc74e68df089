package megatron

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/statedict"
)

// slot is a place in a tree a mutation can change: a dict entry or a list item.
type slot struct {
	get func() statedict.Value
	set func(statedict.Value)
}

// slots lists every place of the tree under v a pickle could have filled with another
// value, depth first (objects' arguments and state included: the args Namespace).
func slots(v statedict.Value, out *[]slot, depth int) {
	if depth > 12 {
		return
	}
	switch x := v.(type) {
	case *statedict.Dict:
		for i := range x.Entries() {
			e := &x.Entries()[i]
			*out = append(*out, slot{func() statedict.Value { return e.Value }, func(n statedict.Value) { e.Value = n }})
			slots(e.Value, out, depth+1)
		}
	case *statedict.List:
		for i := range x.Items {
			*out = append(*out, slot{func() statedict.Value { return x.Items[i] }, func(n statedict.Value) { x.Items[i] = n }})
			slots(x.Items[i], out, depth+1)
		}
	case statedict.Tuple:
		// Tuples are immutable: no pickle puts a tuple inside itself.
		for i := range x {
			slots(x[i], out, depth+1)
		}
	case *statedict.Object:
		for i := range x.Args {
			*out = append(*out, slot{func() statedict.Value { return x.Args[i] }, func(n statedict.Value) { x.Args[i] = n }})
			slots(x.Args[i], out, depth+1)
		}
		slots(x.State, out, depth+1)
	}
}

// mutate applies the fuzzer's instructions for one file to its tree: 4 bytes each — the
// file they apply to, an operation, a slot and a value.
func mutate(root statedict.Value, file int, ops []byte) {
	var all []slot
	slots(root, &all, 0)
	if len(all) == 0 {
		return
	}
	for len(ops) >= 4 {
		f, op, at, val := int(ops[0]), ops[1], int(ops[2]), ops[3]
		ops = ops[4:]
		if f%8 != file {
			continue
		}
		s := all[(at*int(val+1))%len(all)]
		switch op % 10 {
		case 0:
			s.set(nil)
		case 1:
			s.set(int64(val) - 64)
		case 2:
			s.set(int64(1) << (val % 63))
		case 3:
			s.set(string([]byte{'x', val}))
		case 4:
			s.set(val%2 == 0)
		case 5:
			s.set(all[int(val)%len(all)].get())
		case 6:
			s.set(statedict.NewDict(""))
		case 7:
			if t, ok := s.get().(*statedict.Tensor); ok && len(t.Shape) > 0 {
				u := *t
				u.Shape = slices.Clone(t.Shape)
				u.Shape[int(val)%len(u.Shape)] = int64(val % 70)
				u.Strides = statedict.ContiguousStrides(u.Shape)
				s.set(&u)
			}
		case 8:
			if t, ok := s.get().(*statedict.Tensor); ok {
				u := *t
				u.DType = []statedict.DType{statedict.Float32, statedict.BFloat16, statedict.Uint8, statedict.Float64}[val%4]
				s.set(&u)
			}
		case 9:
			if t, ok := s.get().(*statedict.Tensor); ok {
				u := *t
				u.Offset = int64(val)
				s.set(&u)
			}
		}
	}
}

// FuzzMerge reads a TP=2 × PP=2 save (the Llama one with the distributed optimizer, or
// with the first byte's high bit the GPT one without) with its rank files' trees changed
// as the fuzzer says (entries removed, replaced by numbers, strings, other entries, tensors
// reshaped, retyped, moved): the merge must refuse with a corrupt or unsupported error, or
// give a tree whose every tensor reads (or fails to read) without a panic and within its
// storages (once formats.Open's expansion check has passed it, as for any tree).
func FuzzMerge(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1, 3, 7})                // an int somewhere in the first rank file
	f.Add([]byte{1, 7, 40, 3, 2, 8, 10, 1})  // a reshaped and a retyped tensor
	f.Add([]byte{4, 5, 200, 9, 5, 0, 17, 2}) // an entry copied, one removed
	f.Add([]byte{0x80, 1, 30, 3})            // the save without the distributed optimizer
	var dirs [2]string
	var files [2][]string
	for i, name := range []string{"llama_tp2pp2", "gpt_tp2pp2_nodist"} {
		dirs[i] = fixtures + name
		files[i], _ = filepath.Glob(dirs[i] + "/iter_0000003/*/*.pt")
		sort.Strings(files[i])
		if len(files[i]) != 8/(i+1) {
			f.Fatalf("%s: %d rank files", name, len(files[i]))
		}
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		which := 0
		if len(ops) > 0 && ops[0]&0x80 != 0 {
			which = 1
		}
		dir, files := dirs[which], files[which]
		op := Openers{File: func(ctx context.Context, p string) (*statedict.Checkpoint, error) {
			ck, err := torchzip.Open(ctx, p)
			if err != nil {
				return nil, err
			}
			mutate(ck.Root, slices.Index(files, p), ops)
			return ck, nil
		}}
		ck, err := Open(context.Background(), dir, op)
		if err != nil {
			if !errors.Is(err, ckpterr.ErrCorrupt) && !errors.Is(err, ckpterr.ErrUnsupported) {
				t.Fatalf("error outside the family: %v", err)
			}
			return
		}
		defer ck.Close()
		if statedict.CheckExpansion(ck.Root) != nil { // as formats.Open checks every tree
			return
		}
		statedict.Walk(ck.Root, "", func(_ string, v statedict.Value) error {
			if x, ok := v.(*statedict.Tensor); ok && x.NBytes() < 1<<20 {
				x.Bytes()
			}
			return nil
		})
	})
}

// referenceLayout is Megatron's _compute_per_buffer_param_layout followed by
// get_parameter_state_dp_zero's coalescing, step for step on absolute buffer indices (data
// parallel size 2, bucket ends padded to lcm(2, 128) when aligned, to 2 before).
func referenceLayout(params []layoutParam, bucketSize, align int64) ([]int64, int64) {
	pad := func(x, d int64) int64 { return (x + d - 1) / d * d }
	endPad := int64(128)
	if align == 1 {
		endPad = 2
	}
	type placed struct{ start, bucket int64 }
	index := make([]placed, len(params))
	var bucketStarts, unpadded []int64
	var paramStart, bucketStart, paramEnd, bucketID int64
	open := 0
	finalize := func(end int64) {
		unpadded = append(unpadded, end-bucketStart)
		bucketStarts = append(bucketStarts, bucketStart)
		bucketStart = pad(end, endPad)
		bucketID++
	}
	for i := len(params) - 1; i >= 0; i-- {
		p := params[i]
		paramStart = pad(paramStart, align)
		if p.shared && open > 0 {
			finalize(paramStart)
			open, paramStart = 0, bucketStart
		}
		paramEnd = paramStart + p.numel
		index[i] = placed{paramStart, bucketID}
		open++
		if (bucketSize != noBuckets && paramEnd-bucketStart >= bucketSize) || p.shared {
			finalize(paramEnd)
			open, paramStart = 0, bucketStart
		} else {
			paramStart = paramEnd
		}
	}
	if open > 0 {
		finalize(paramEnd)
	}
	offsets := make([]int64, len(unpadded))
	var total int64
	for b, n := range unpadded {
		offsets[b] = total
		total += n
	}
	starts := make([]int64, len(params))
	for i, p := range index {
		starts[i] = p.start - bucketStarts[p.bucket] + offsets[p.bucket]
	}
	return starts, total
}

// FuzzBufferLayout checks bufferLayout against Megatron's layout computed step for step on
// absolute indices, for any parameter sizes, shared embeddings, bucket size and alignment,
// and that the places it gives are disjoint and inside the buffer.
func FuzzBufferLayout(f *testing.F) {
	f.Add([]byte{1, 0, 3, 0, 200, 0}, uint32(0), true)
	f.Add([]byte{64, 1, 65, 0, 7, 1}, uint32(100), false)
	f.Add([]byte{255, 0, 255, 0, 255, 0, 1, 1}, uint32(300), true)
	f.Fuzz(func(t *testing.T, b []byte, bucket uint32, aligned bool) {
		var params []layoutParam
		for i := 0; i+1 < len(b) && len(params) < 64; i += 2 {
			params = append(params, layoutParam{numel: int64(b[i])*int64(b[i]) + 1, shared: b[i+1]&1 == 1})
		}
		if len(params) == 0 {
			return
		}
		align := int64(1)
		if aligned {
			align = 64
		}
		size := int64(bucket % 100000)
		got, total := bufferLayout(params, size, align)
		want, wantTotal := referenceLayout(params, size, align)
		if !slices.Equal(got, want) || total != wantTotal {
			t.Fatalf("%v (bucket %d, align %d): %v %d, Megatron's %v %d", params, size, align, got, total, want, wantTotal)
		}
		type span struct{ a, b int64 }
		spans := make([]span, len(params))
		for i, p := range params {
			spans[i] = span{got[i], got[i] + p.numel}
			if spans[i].a < 0 || spans[i].b > total {
				t.Fatalf("param %d at [%d, %d) of %d", i, spans[i].a, spans[i].b, total)
			}
		}
		slices.SortFunc(spans, func(x, y span) int { return int(x.a - y.a) })
		for i := 1; i < len(spans); i++ {
			if spans[i].a < spans[i-1].b {
				t.Fatalf("params overlap: %v", spans)
			}
		}
	})
}
