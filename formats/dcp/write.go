package dcp

import (
	"bytes"
	"fmt"
	"hash"
	"io"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/klauspost/compress/zstd"
)

// DataFile is the single data file Write produces (rank 0, file 0).
const DataFile = "__0_0.distcp"

// leaf is one flattened item of a DCP save plan.
type leaf struct {
	fqn  string
	path []statedict.Value // str keys and int list positions, as planner_data records them
	val  statedict.Value
}

// Flatten flattens a state dict the way torch.distributed.checkpoint's flatten_state_dict
// does (torch ≥ 2.4): mappings are traversed with str(key); a list is traversed by index
// only if it holds a tensor or a container that must be traversed; tuples and other values
// are leaves; an empty mapping contributes nothing.
func flatten(root statedict.Value) ([]leaf, error) {
	var out []leaf
	seen := map[string]bool{}
	var walk func(path []statedict.Value, v statedict.Value) error
	walk = func(path []statedict.Value, v statedict.Value) error {
		switch c := v.(type) {
		case *statedict.Dict:
			for _, e := range c.Entries() {
				if err := walk(append(path[:len(path):len(path)], statedict.KeyString(e.Key)), e.Value); err != nil {
					return err
				}
			}
			return nil
		case *statedict.List:
			if !terminal(c) {
				for i, it := range c.Items {
					if err := walk(append(path[:len(path):len(path)], int64(i)), it); err != nil {
						return err
					}
				}
				return nil
			}
		}
		parts := make([]string, len(path))
		for i, p := range path {
			parts[i] = statedict.KeyString(p)
		}
		fqn := strings.Join(parts, ".")
		if seen[fqn] {
			return fmt.Errorf("two entries flatten to the same name %q", fqn)
		}
		seen[fqn] = true
		out = append(out, leaf{fqn, path, v})
		return nil
	}
	return out, walk(nil, root)
}

// terminal is DCP's _is_terminal for lists: a list is a leaf unless it holds a tensor or a
// mapping/list that is not itself terminal.
func terminal(l *statedict.List) bool {
	for _, it := range l.Items {
		switch c := it.(type) {
		case *statedict.Tensor:
			return false
		case *statedict.Dict:
			return false
		case *statedict.List:
			if !terminal(c) {
				return false
			}
		}
	}
	return true
}

// Write is the statedict.Writer of torch.distributed.checkpoint directories: a folder
// that torch.distributed.checkpoint.load reads in a single process, every tensor one chunk
// stored in __0_0.distcp as an embedded torch.save archive, every other leaf a bytes item
// (a torch.save of the value), and a .metadata pickle naming only the classes DCP needs.
// The embedded archives are tagged "cpu", as torch's own DCP writer saves CPU copies: DCP
// loads bytes items with a plain torch.load and copies tensor chunks into the caller's
// tensors, wherever those live, so a device tag in the file could only make loading fail.
func Write(out statedict.Output, ck *statedict.Checkpoint, opts statedict.WriteOptions) (*statedict.Written, error) {
	leaves, err := flatten(ck.Root)
	if err != nil {
		return nil, err
	}
	w, err := out.Create(DataFile)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	var items []item
	var off int64
	cpu := func(*statedict.Storage) string { return "cpu" }
	var kept []string
	var descs []string
	var zw *zstd.Encoder
	switch opts.Compress {
	case "":
	case "zstd":
		// torch's ZStandard extension: each item one zstd stream (zstandard's default level).
		descs = []string{ZStandard}
		if zw, err = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1)); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: %s compression (DCP items are compressed with zstd)", statedict.ErrUnsupported, opts.Compress)
	}
	save := func(l leaf, v statedict.Value, t *statedict.Tensor) error {
		so := torchzip.SaveOptions{Location: cpu, Data: true}
		if !opts.WeightsOnly {
			// DCP's loader unpickles bytes items with torch.load(weights_only=False).
			keep := torchzip.KeptInto(&kept)
			so.Kept = func(name string, o *statedict.Object) {
				if name == "" {
					name = l.fqn
				} else {
					name = statedict.JoinName(l.fqn, name)
				}
				keep(name, o)
			}
		}
		if t != nil && opts.Sum != nil {
			so.Sum = func(*statedict.Storage) hash.Hash { return opts.Sum(t) }
		}
		var n int64
		if zw != nil {
			cw := &statedict.Counter{W: w}
			zw.Reset(cw)
			if _, err = torchzip.Write(zw, v, so); err == nil {
				err = zw.Close()
			}
			n = cw.N
		} else {
			n, err = torchzip.Write(w, v, so)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", l.fqn, err)
		}
		items = append(items, item{leaf: l, tensor: t, offset: off, length: n, transforms: descs})
		off += n
		return nil
	}
	// Bytes items first, then tensors, as DCP's writer orders them.
	for _, l := range leaves {
		if _, ok := l.val.(*statedict.Tensor); !ok {
			if err := save(l, l.val, nil); err != nil {
				return nil, err
			}
		}
	}
	for _, l := range leaves {
		if t, ok := l.val.(*statedict.Tensor); ok {
			if t.DType.Kind() == statedict.KindQuantized {
				return nil, fmt.Errorf("%s: %w: torch.distributed.checkpoint cannot load quantized %s tensors (its loader copies into torch.empty)", l.fqn, statedict.ErrUnsupported, t.DType)
			}
			st, err := standalone(t)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", l.fqn, err)
			}
			if err := save(l, st, t); err != nil {
				return nil, err
			}
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	mw, err := out.Create(MetadataFile)
	if err != nil {
		return nil, err
	}
	err = encodeMetadata(mw, items)
	if cerr := mw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	extras, err := statedict.CopyFiles(out, ck, opts.Rewrite)
	if err != nil {
		return nil, err
	}
	return &statedict.Written{Files: append([]string{DataFile, MetadataFile}, extras...), Bytes: off, Kept: kept}, nil
}

// item is one written entry with its place in the data file.
type item struct {
	leaf
	tensor         *statedict.Tensor // nil for bytes items
	offset, length int64
	transforms     []string // the item's stream transforms (compression)
}

// standalone returns t as DCP saves it: a contiguous tensor owning exactly its bytes.
// Contiguous views read their range of the source storage; other views are gathered once
// (bounded by the tensor's own size).
func standalone(t *statedict.Tensor) (*statedict.Tensor, error) {
	nb := t.NBytes()
	es := int64(t.DType.Size())
	var st *statedict.Storage
	if d, mapped := t.Storage.Mapped(); mapped && t.IsContiguous() && !t.Conj && !t.Neg && !t.Storage.BigEndian && t.DType.ValuesPerByte() == 1 {
		// A slice of the mapped source: stays zero-copy, and a file range for the output
		// writer when the source storage is file-backed.
		st = statedict.NewMappedStorage(t.Storage.Key, t.Storage.Location, t.DType, d[t.Offset*es:t.Offset*es+nb])
		st.File, st.Offset, st.FileBacked = t.Storage.File, t.Storage.Offset+t.Offset*es, t.Storage.FileBacked
	} else if t.IsContiguous() && !t.Conj && !t.Neg && !t.Storage.BigEndian && t.DType.ValuesPerByte() == 1 {
		st = statedict.NewReaderStorage(t.Storage.Key, t.Storage.Location, t.DType, t.Storage, t.Offset*es, nb)
	} else {
		if err := t.CheckView(); err != nil {
			return nil, err
		}
		var buf bytes.Buffer
		buf.Grow(int(nb))
		if _, err := t.WriteTo(&buf); err != nil {
			return nil, err
		}
		st = statedict.NewMappedStorage(t.Storage.Key, t.Storage.Location, t.DType, buf.Bytes())
	}
	out := &statedict.Tensor{DType: t.DType, Shape: t.Shape, Strides: statedict.ContiguousStrides(t.Shape), Storage: st,
		RequiresGrad: t.RequiresGrad, Quantizer: t.Quantizer}
	return out, nil
}

const (
	mdModule = "torch.distributed.checkpoint.metadata"
	fsModule = "torch.distributed.checkpoint.filesystem"
	opNewObj = 0x81
)

// metadataBatch is how many dict entries one MARK … SETITEMS holds, as Python's pickler
// batches them: the unpickler's stack then never holds more than one batch.
const metadataBatch = 1000

// encodeMetadata pickles the Metadata dataclass for items to w, streaming: the encoder's
// buffer is flushed as it fills, so memory does not grow with the number of items.
func encodeMetadata(w io.Writer, items []item) error {
	e := pickle.NewEncoder()
	var werr error
	// next ends a batch of dict entries every metadataBatch items and flushes.
	next := func(i int) {
		if (i+1)%metadataBatch == 0 && i+1 < len(items) {
			e.Op(pickle.OpSetItems)
			e.Op(pickle.OpMark)
		}
		if e.Len() >= 1<<20 && werr == nil {
			werr = e.Flush(w)
		}
	}
	obj := func(module, class string) {
		e.Global(pickle.Global{Module: module, Name: class})
		e.Op(pickle.OpEmptyTuple)
		e.Op(opNewObj)
	}
	size := func(dims []int64) {
		e.Global(pickle.Global{Module: "torch", Name: "Size"})
		tuple(e, dims)
		e.Op(pickle.OpTuple1)
		e.Op(pickle.OpReduce)
	}
	zeros := func(n int) []int64 { return make([]int64, n) }
	obj(mdModule, "Metadata")
	e.Op(pickle.OpEmptyDict)
	e.Op(pickle.OpMark)

	e.String("state_dict_metadata")
	e.Op(pickle.OpEmptyDict)
	e.Op(pickle.OpMark)
	for i, it := range items {
		e.String(it.fqn)
		if it.tensor == nil {
			obj(mdModule, "BytesStorageMetadata")
			next(i)
			continue
		}
		t := it.tensor
		obj(mdModule, "TensorStorageMetadata")
		e.Op(pickle.OpEmptyDict)
		e.Op(pickle.OpMark)
		e.String("properties")
		obj(mdModule, "TensorProperties")
		e.Op(pickle.OpMark)
		e.Global(pickle.Global{Module: "torch", Name: t.DType.String()})
		e.Global(pickle.Global{Module: "torch.serialization", Name: "_get_layout"})
		e.String("torch.strided")
		e.Op(pickle.OpTuple1)
		e.Op(pickle.OpReduce)
		e.Bool(t.RequiresGrad)
		e.Global(pickle.Global{Module: mdModule, Name: "_MEM_FORMAT_ENCODING"})
		e.Int(0)
		e.Op(pickle.OpTuple1)
		e.Op(pickle.OpReduce)
		e.Bool(false)
		e.Op(pickle.OpTuple)
		e.Op(pickle.OpBuild)
		e.String("size")
		size(t.Shape)
		e.String("chunks")
		e.Op(pickle.OpEmptyList)
		obj(mdModule, "ChunkStorageMetadata")
		e.Op(pickle.OpEmptyDict)
		e.Op(pickle.OpMark)
		e.String("offsets")
		size(zeros(len(t.Shape)))
		e.String("sizes")
		size(t.Shape)
		e.Op(pickle.OpSetItems)
		e.Op(pickle.OpBuild)
		e.Op(pickle.OpAppend)
		e.Op(pickle.OpSetItems)
		e.Op(pickle.OpBuild)
		next(i)
	}
	e.Op(pickle.OpSetItems)

	e.String("planner_data")
	e.Op(pickle.OpEmptyDict)
	e.Op(pickle.OpMark)
	for i, it := range items {
		e.String(it.fqn)
		e.Op(pickle.OpMark)
		for _, p := range it.path {
			switch p := p.(type) {
			case string:
				e.String(p)
			case int64:
				e.Int(p)
			}
		}
		e.Op(pickle.OpTuple)
		next(i)
	}
	e.Op(pickle.OpSetItems)

	e.String("storage_data")
	e.Op(pickle.OpEmptyDict)
	e.Op(pickle.OpMark)
	for i, it := range items {
		obj(mdModule, "MetadataIndex")
		e.Op(pickle.OpEmptyDict)
		e.Op(pickle.OpMark)
		e.String("fqn")
		e.String(it.fqn)
		if it.tensor != nil {
			e.String("offset")
			size(zeros(len(it.tensor.Shape)))
			e.String("index")
			e.Int(0)
		} else {
			e.String("index")
			e.None()
		}
		e.Op(pickle.OpSetItems)
		e.Op(pickle.OpBuild)
		obj(fsModule, "_StorageInfo")
		e.Op(pickle.OpEmptyDict)
		e.Op(pickle.OpMark)
		e.String("relative_path")
		e.String(DataFile)
		e.String("offset")
		e.Int(it.offset)
		e.String("length")
		e.Int(it.length)
		if len(it.transforms) > 0 {
			e.String("transform_descriptors")
			e.Op(pickle.OpEmptyList)
			for _, d := range it.transforms {
				e.String(d)
				e.Op(pickle.OpAppend)
			}
		}
		e.Op(pickle.OpSetItems)
		e.Op(pickle.OpBuild)
		next(i)
	}
	e.Op(pickle.OpSetItems)

	e.String("storage_meta")
	e.None()
	e.String("version")
	e.String("1.0.0")
	e.Op(pickle.OpSetItems)
	e.Op(pickle.OpBuild)
	if werr != nil {
		return werr
	}
	_, err := w.Write(e.Finish())
	return err
}

// tuple emits a tuple of ints.
func tuple(e *pickle.Encoder, v []int64) {
	e.Op(pickle.OpMark)
	for _, x := range v {
		e.Int(x)
	}
	e.Op(pickle.OpTuple)
}
