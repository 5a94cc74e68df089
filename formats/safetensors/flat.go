package safetensors

import (
	"fmt"
	"hash"
	"io"
	"maps"
	"math/big"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/statedict"
)

// Flat is a checkpoint tree laid out for a flat format: every tensor under its flattened
// name, tied aliases removed.
type Flat struct {
	// Tensors are kept once each, in the tree's order.
	Tensors []statedict.NamedTensor
	// Tied maps each removed alias to the name kept for its tensor.
	Tied map[string]string
	// NotWritten lists the non-tensor values, which safetensors cannot hold, with their
	// Python type ("epoch: int", "fused: NoneType", "args: argparse.Namespace").
	NotWritten []string
}

// Flatten lays out root for safetensors as the reference converter does: identical views
// of one storage are one tensor under several names, kept once under the first name in
// sorted order — except that output-projection aliases (lm_head.*), which transformers
// re-ties from the embedding, give way to the other name.
func Flatten(root statedict.Value) (*Flat, error) {
	f := &Flat{Tied: map[string]string{}}
	byStorage := map[*statedict.Storage][]statedict.NamedTensor{}
	var order []*statedict.Storage
	pos := map[string]int{}
	err := statedict.Walk(root, "", func(name string, v statedict.Value) error {
		pos[name] = len(pos)
		t, ok := v.(*statedict.Tensor)
		if !ok {
			f.NotWritten = append(f.NotWritten, name+": "+typeName(v))
			return nil
		}
		if _, seen := byStorage[t.Storage]; !seen {
			order = append(order, t.Storage)
		}
		byStorage[t.Storage] = append(byStorage[t.Storage], statedict.NamedTensor{Name: name, Tensor: t})
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, st := range order {
		group := byStorage[st]
		for len(group) > 0 {
			first := group[0].Tensor
			var same, rest []statedict.NamedTensor
			for _, nt := range group {
				if sameView(nt.Tensor, first) {
					same = append(same, nt)
				} else {
					rest = append(rest, nt)
				}
			}
			keep := keepName(same)
			for _, nt := range same {
				if nt.Name == keep.Name {
					f.Tensors = append(f.Tensors, nt)
				} else {
					f.Tied[nt.Name] = keep.Name
				}
			}
			group = rest
		}
	}
	sort.SliceStable(f.Tensors, func(a, b int) bool { return pos[f.Tensors[a].Name] < pos[f.Tensors[b].Name] })
	return f, nil
}

// Names maps each kept tensor to its name.
func (f *Flat) Names() map[*statedict.Tensor]string {
	m := make(map[*statedict.Tensor]string, len(f.Tensors))
	for _, nt := range f.Tensors {
		m[nt.Tensor] = nt.Name
	}
	return m
}

// Metadata is the __metadata__ a file holding tensors gets: format "pt" as Hugging Face
// writers put, the caller's own entries, and removed → kept for the aliases of those
// tensors (the convention of safetensors' converter).
func (f *Flat) Metadata(tensors []statedict.NamedTensor, extra map[string]string) map[string]string {
	md := map[string]string{"format": "pt"}
	maps.Copy(md, extra)
	in := map[string]bool{}
	for _, nt := range tensors {
		in[nt.Name] = true
	}
	for removed, kept := range f.Tied {
		if in[kept] {
			md[removed] = kept
		}
	}
	return md
}

func typeName(v statedict.Value) string {
	switch x := v.(type) {
	case *statedict.Object:
		return x.Class
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case complex128:
		return "complex"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case statedict.DType:
		return "torch.dtype"
	case *statedict.NDArray:
		return "numpy.ndarray"
	case *statedict.Dict:
		return "empty dict"
	case *statedict.List:
		return "empty list"
	case statedict.Tuple:
		return "empty tuple"
	}
	return fmt.Sprintf("%T", v)
}

func sameView(a, b *statedict.Tensor) bool {
	if a.DType != b.DType || a.Offset != b.Offset || len(a.Shape) != len(b.Shape) || a.Conj != b.Conj || a.Neg != b.Neg {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] || a.Strides[i] != b.Strides[i] {
			return false
		}
	}
	return true
}

// keepName picks the name a tied group is written under.
func keepName(group []statedict.NamedTensor) statedict.NamedTensor {
	best := group[0]
	rank := func(n string) int {
		if strings.HasPrefix(n, "lm_head.") || strings.Contains(n, ".lm_head.") {
			return 1
		}
		return 0
	}
	for _, nt := range group[1:] {
		if rank(nt.Name) < rank(best.Name) || rank(nt.Name) == rank(best.Name) && nt.Name < best.Name {
			best = nt
		}
	}
	return best
}

// WriteFile writes tensors as one safetensors file to w in the reference writer's order,
// feeding sum (if set) each tensor's bytes as they are written, and returns the bytes
// written.
func WriteFile(w io.Writer, tensors []statedict.NamedTensor, md map[string]string, sum func(any) hash.Hash) (int64, error) {
	infos := make([]TensorInfo, len(tensors))
	byName := make(map[string]*statedict.Tensor, len(tensors))
	for i, nt := range tensors {
		info, err := TensorInfoFor(nt.Name, nt.Tensor)
		if err != nil {
			return 0, err
		}
		infos[i] = info
		byName[nt.Name] = nt.Tensor
	}
	SortLikeReference(infos)
	cw := &statedict.Counter{W: w}
	sw, err := NewWriter(cw, infos, md)
	if err != nil {
		return 0, err
	}
	for i, info := range infos {
		if i+1 < len(infos) { // the next tensor's reads overlap this one's writes
			byName[infos[i+1].Name].Prefetch()
		}
		var src io.WriterTo = byName[info.Name]
		if sum != nil {
			if h := sum(byName[info.Name]); h != nil {
				src = teeTensor{byName[info.Name], h}
			}
		}
		if err := sw.WriteTensor(info.Name, src); err != nil {
			return cw.N, err
		}
	}
	return cw.N, sw.Close()
}

// teeTensor writes a tensor's bytes through a hash.
type teeTensor struct {
	t   *statedict.Tensor
	sum hash.Hash
}

// WriteTo writes the tensor, feeding the hash where the bytes are finally stored.
func (x teeTensor) WriteTo(w io.Writer) (int64, error) {
	return x.t.WriteTo(&statedict.Tee{W: w, Sum: x.sum})
}

// WriteCheckpoint is the statedict.Writer of single safetensors files: ck's tensors,
// flattened and de-duplicated (Flatten), into out's one file, with opts.Metadata in its
// __metadata__.
func WriteCheckpoint(out statedict.Output, ck *statedict.Checkpoint, opts statedict.WriteOptions) (*statedict.Written, error) {
	flat, err := Flatten(ck.Root)
	if err != nil {
		return nil, err
	}
	f, err := out.Create("")
	if err != nil {
		return nil, err
	}
	n, err := WriteFile(f, flat.Tensors, flat.Metadata(flat.Tensors, opts.Metadata), opts.Sum)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return &statedict.Written{Files: []string{path.Base(filepath.ToSlash(out.Name()))}, Bytes: n, Names: flat.Names(), Tied: flat.Tied, NotWritten: flat.NotWritten}, nil
}
