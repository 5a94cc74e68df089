package dcp

import (
	"errors"
	"fmt"
	"math/big"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Metadata is the decoded `.metadata` file of a DCP checkpoint: what each flattened
// state-dict key holds, where its bytes are, and how the keys nest.
type Metadata struct {
	// Items is state_dict_metadata in file order, one entry per flattened key. Rebuilding the
	// nested state dict in this order gives the order torch's dcp_to_torch_save produces.
	Items []Item
	// PlannerData maps flattened keys to their path in the nested state dict, as the
	// DefaultSavePlanner recorded it when it flattened the state dict; nil when the file has
	// none (then the flattened keys are the top-level keys).
	PlannerData map[string]Path
	// Storage locates every tensor chunk and bytes item, in file order.
	Storage []StorageEntry
	// StorageMeta is what the writer recorded about the save; nil when absent (torch 1.13
	// and custom writers).
	StorageMeta *StorageMeta
	// Version is the DCP version string ("1.0.0"); "" when absent (older files).
	Version string

	items   map[string]int     // FQN → index in Items
	storage map[storageKey]int // (FQN, chunk offsets) → index in Storage
}

// Item is one flattened state-dict key.
type Item struct {
	// FQN is the flattened key ("model.l1.weight", "optim.param_groups.0.lr").
	FQN string
	// Tensor describes a tensor item; nil for a bytes item (a torch.save'd Python object).
	Tensor *TensorMeta
}

// TensorMeta describes a (possibly sharded) tensor: its global shape and dtype and the
// chunks its elements were saved in.
type TensorMeta struct {
	DType statedict.DType
	// Size is the global shape; empty for a 0-dim tensor.
	Size []int64
	// Chunks tile Size exactly (checked by ReadMetadata).
	Chunks []ChunkMeta
	// RequiresGrad is recorded by torch but deprecated; kept for completeness.
	RequiresGrad bool
}

// ChunkMeta is one saved piece of a tensor, in global coordinates.
type ChunkMeta struct {
	Offsets []int64
	Sizes   []int64
}

// Path is an item's position in the nested state dict: each element is a string (a dict
// key) or an int64 (a list index).
type Path []any

// String renders the path as Python prints the tuple.
func (p Path) String() string {
	parts := make([]string, len(p))
	for i, e := range p {
		if s, ok := e.(string); ok {
			parts[i] = strconv.Quote(s)
		} else {
			parts[i] = fmt.Sprint(e)
		}
	}
	if len(parts) == 1 {
		return "(" + parts[0] + ",)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// StorageEntry says where one tensor chunk or bytes item is stored (a MetadataIndex key and
// its _StorageInfo value).
type StorageEntry struct {
	FQN string
	// Offsets are the chunk's offsets in the tensor; nil for a bytes item (whose
	// MetadataIndex has no offset) and empty but non-nil for a 0-dim tensor.
	Offsets []int64
	// RelativePath is the data file, relative to the checkpoint folder ("__0_0.distcp").
	RelativePath string
	// Offset and Length delimit the stored bytes within the file.
	Offset, Length int64
	// TransformDescriptors name stream transforms applied when writing ("stream.zstd/1"),
	// in reverse order of application; nil when none were used.
	TransformDescriptors []string
}

// StorageMeta is the StorageMeta record of torch ≥ 2.4 writers.
type StorageMeta struct {
	// CheckpointID is where the writer saved to (a path or URL).
	CheckpointID string
	SaveID       string
	LoadID       string
	Modules      []string
}

// Lookup returns the storage entry of a tensor chunk (offsets non-nil) or of a bytes item
// (offsets nil).
func (m *Metadata) Lookup(fqn string, offsets []int64) (*StorageEntry, bool) {
	i, ok := m.storage[keyOf(fqn, offsets)]
	if !ok {
		return nil, false
	}
	return &m.Storage[i], true
}

// Item returns the item stored under a flattened key.
func (m *Metadata) Item(fqn string) (*Item, bool) {
	i, ok := m.items[fqn]
	if !ok {
		return nil, false
	}
	return &m.Items[i], true
}

// storageKey is the (fqn, offsets) identity of a MetadataIndex; torch's MetadataIndex
// equality ignores the index hint.
type storageKey struct {
	fqn     string
	offsets string // "" for bytes items, else "t" + the offsets
}

func keyOf(fqn string, offsets []int64) storageKey {
	if offsets == nil {
		return storageKey{fqn: fqn}
	}
	var b strings.Builder
	b.WriteByte('t')
	for _, o := range offsets {
		b.WriteString(strconv.FormatInt(o, 10))
		b.WriteByte(',')
	}
	return storageKey{fqn, b.String()}
}

// Module paths of the DCP classes: torch ≥ 2.0 and the torch 1.13 prototype.
const (
	modMetadata    = "torch.distributed.checkpoint.metadata"
	modFilesystem  = "torch.distributed.checkpoint.filesystem"
	modMetadata113 = "torch.distributed._shard.checkpoint.metadata"
	modFS113       = "torch.distributed._shard.checkpoint.filesystem"
	modShardedMeta = "torch.distributed._shard.sharded_tensor.metadata"
)

// Class roles, independent of the module path a file uses.
const (
	clsMetadata  = "Metadata"
	clsTensor    = "TensorStorageMetadata"
	clsBytes     = "BytesStorageMetadata"
	clsChunk     = "ChunkStorageMetadata"
	clsIndex     = "MetadataIndex"
	clsProps     = "TensorProperties"
	clsMemFormat = "MEM_FORMAT_ENCODING"
	clsStorage   = "_StorageInfo"
	clsStoreMeta = "StorageMeta"
	clsPath      = "path"
)

// classes maps every global a DCP .metadata may name, beyond torch's weights_only
// allowlist (torch.Size, dtypes, _get_layout), to its role. It is the unpickler's
// allowlist: any other global is an error.
var classes = func() map[pickle.Global]string {
	m := map[pickle.Global]string{}
	for _, n := range []string{clsMetadata, clsTensor, clsBytes, clsChunk, clsIndex, clsProps, clsStoreMeta} {
		m[pickle.Global{Module: modMetadata, Name: n}] = n
	}
	m[pickle.Global{Module: modMetadata, Name: "_MEM_FORMAT_ENCODING"}] = clsMemFormat
	for _, n := range []string{clsMetadata, clsTensor, clsBytes, clsChunk, clsIndex} {
		m[pickle.Global{Module: modMetadata113, Name: n}] = n
	}
	m[pickle.Global{Module: modShardedMeta, Name: clsProps}] = clsProps
	m[pickle.Global{Module: modShardedMeta, Name: clsMemFormat}] = clsMemFormat
	m[pickle.Global{Module: modFilesystem, Name: clsStorage}] = clsStorage
	m[pickle.Global{Module: modFS113, Name: clsStorage}] = clsStorage
	// StorageMeta.checkpoint_id: pathlib objects, under Python 3.13's pathlib._local too.
	for _, mod := range []string{"pathlib", "pathlib._local"} {
		for _, n := range []string{"PurePath", "PurePosixPath", "PureWindowsPath", "Path", "PosixPath", "WindowsPath"} {
			m[pickle.Global{Module: mod, Name: n}] = clsPath
		}
	}
	return m
}()

// allow is the Options.Allow list for the .metadata unpickler.
var allow = func() []pickle.Global {
	out := make([]pickle.Global, 0, len(classes))
	for g := range classes {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b pickle.Global) int { return strings.Compare(a.String(), b.String()) })
	return out
}()

// MetadataGlobals returns the globals a DCP .metadata may name beyond torch's weights_only
// allowlist: the DCP metadata dataclasses under their torch ≥ 2.0 and torch 1.13 module
// paths, and the pathlib paths StorageMeta.checkpoint_id holds. They only build data; a
// scan's policy allows them.
func MetadataGlobals() []pickle.Global { return slices.Clone(allow) }

// ReadMetadata decodes and validates a DCP `.metadata` pickle; file names it in errors.
// The pickle is decoded with the restricted unpickler in strict mode, allowing only the
// DCP classes (under both their torch ≥ 2.0 and torch 1.13 module paths) and torch's
// weights_only globals: nothing is ever imported or called. Everything that can be checked
// without the data files is: field types, dtypes, that every tensor's chunks lie inside it
// and tile it exactly, that every chunk and bytes item has exactly one storage entry and
// every storage entry belongs to one, and that data file names stay inside the folder.
func ReadMetadata(data []byte, file string) (*Metadata, error) {
	dec := pickle.NewDecoder(data, pickle.Options{Strict: true, Allow: allow})
	v, err := dec.Decode()
	if err != nil {
		var pe *pickle.Error
		if errors.As(err, &pe) {
			op := " " + pe.Op
			var dis *pickle.DisallowedError
			if pe.Op == "" || errors.As(pe.Err, &dis) {
				op = "" // the cause names the opcode
			}
			return nil, &Error{File: file, Offset: pe.Offset, Err: fmt.Errorf("pickle%s: %w", op, pe.Err)}
		}
		return nil, &Error{File: file, Offset: -1, Err: err}
	}
	if rest := int64(len(data)) - dec.Offset(); rest != 0 {
		return nil, &Error{File: file, Offset: dec.Offset(), Err: fmt.Errorf("%d bytes after the end of the pickle", rest)}
	}
	p := parser{file: file}
	md, err := p.metadata(v)
	if err != nil {
		return nil, err
	}
	if err := md.validate(file); err != nil {
		return nil, err
	}
	return md, nil
}

// parser converts the decoded pickle into Metadata, reporting where in the structure a
// value is wrong.
type parser struct {
	file string
}

func (p *parser) fail(fqn string, chunk []int64, format string, args ...any) error {
	return &Error{File: p.file, FQN: fqn, Chunk: chunk, Offset: -1, Err: fmt.Errorf(format, args...)}
}

// describe names a pickle value's type for error messages.
func describe(v pickle.Value) string {
	switch x := v.(type) {
	case pickle.None:
		return "None"
	case string:
		return fmt.Sprintf("str %q", x)
	case int64:
		return fmt.Sprintf("int %d", x)
	case *big.Int:
		return "int " + x.String()
	case pickle.Global:
		return "global " + x.String()
	case *pickle.Object:
		return x.Class.String() + " object"
	case pickle.Tuple:
		return fmt.Sprintf("tuple of %d", len(x))
	case *pickle.List:
		return fmt.Sprintf("list of %d", len(x.Items))
	case *pickle.Dict:
		return fmt.Sprintf("dict of %d", x.Len())
	}
	return fmt.Sprintf("%T", v)
}

// dataclass checks that v is an instance of the class role (created by NEWOBJ, as pickle
// writes dataclasses) and returns its state dict, which may be empty.
func (p *parser) dataclass(v pickle.Value, role, fqn string, chunk []int64) (*pickle.Dict, error) {
	o, ok := v.(*pickle.Object)
	if !ok || classes[o.Class] != role || o.Kind != pickle.NewObj || len(o.Args) != 0 {
		return nil, p.fail(fqn, chunk, "expected a %s, found %s", role, describe(v))
	}
	switch st := o.State.(type) {
	case nil:
		return &pickle.Dict{}, nil
	case *pickle.Dict:
		return st, nil
	}
	return nil, p.fail(fqn, chunk, "%s state is %s, want a dict", role, describe(o.State))
}

// field returns a state field; absent and None are both reported as absent.
func field(st *pickle.Dict, name string) (pickle.Value, bool) {
	v, ok := st.Get(name)
	if _, none := v.(pickle.None); none {
		return nil, false
	}
	return v, ok
}

func (p *parser) metadata(v pickle.Value) (*Metadata, error) {
	st, err := p.dataclass(v, clsMetadata, "", nil)
	if err != nil {
		return nil, err
	}
	md := &Metadata{items: map[string]int{}, storage: map[storageKey]int{}}
	sdm, ok := field(st, "state_dict_metadata")
	if !ok {
		return nil, p.fail("", nil, "Metadata has no state_dict_metadata")
	}
	if err := p.stateDictMetadata(md, sdm); err != nil {
		return nil, err
	}
	if pd, ok := field(st, "planner_data"); ok {
		if err := p.plannerData(md, pd); err != nil {
			return nil, err
		}
	}
	sd, ok := field(st, "storage_data")
	if !ok {
		return nil, p.fail("", nil, "Metadata has no storage_data: the checkpoint was not written by a file-system writer")
	}
	if err := p.storageData(md, sd); err != nil {
		return nil, err
	}
	if sm, ok := field(st, "storage_meta"); ok {
		if md.StorageMeta, err = p.storageMeta(sm); err != nil {
			return nil, err
		}
	}
	if ver, ok := field(st, "version"); ok {
		s, isStr := ver.(string)
		if !isStr {
			return nil, p.fail("", nil, "Metadata version is %s, want a str", describe(ver))
		}
		md.Version = s
	}
	return md, nil
}

func (p *parser) stateDictMetadata(md *Metadata, v pickle.Value) error {
	d, ok := v.(*pickle.Dict)
	if !ok || d.Class != nil {
		return p.fail("", nil, "state_dict_metadata is %s, want a dict", describe(v))
	}
	keys, vals := d.Items()
	md.Items = make([]Item, 0, len(keys))
	for i, k := range keys {
		fqn, ok := k.(string)
		if !ok {
			return p.fail("", nil, "state_dict_metadata key is %s, want a str", describe(k))
		}
		item := Item{FQN: fqn}
		o, ok := vals[i].(*pickle.Object)
		if !ok {
			return p.fail(fqn, nil, "expected a TensorStorageMetadata or BytesStorageMetadata, found %s", describe(vals[i]))
		}
		switch classes[o.Class] {
		case clsBytes:
			st, err := p.dataclass(o, clsBytes, fqn, nil)
			if err != nil {
				return err
			}
			if st.Len() != 0 {
				return p.fail(fqn, nil, "BytesStorageMetadata has fields")
			}
		case clsTensor:
			t, err := p.tensor(o, fqn)
			if err != nil {
				return err
			}
			item.Tensor = t
		default:
			return p.fail(fqn, nil, "expected a TensorStorageMetadata or BytesStorageMetadata, found %s", describe(o))
		}
		md.items[fqn] = len(md.Items)
		md.Items = append(md.Items, item)
	}
	return nil
}

func (p *parser) tensor(o *pickle.Object, fqn string) (*TensorMeta, error) {
	st, err := p.dataclass(o, clsTensor, fqn, nil)
	if err != nil {
		return nil, err
	}
	t := &TensorMeta{}
	props, ok := field(st, "properties")
	if !ok {
		return nil, p.fail(fqn, nil, "TensorStorageMetadata has no properties")
	}
	if err := p.properties(t, props, fqn); err != nil {
		return nil, err
	}
	size, ok := field(st, "size")
	if !ok {
		return nil, p.fail(fqn, nil, "TensorStorageMetadata has no size")
	}
	if t.Size, ok = ints(size); !ok {
		return nil, p.fail(fqn, nil, "size is %s, want a torch.Size", describe(size))
	}
	cv, ok := field(st, "chunks")
	if !ok {
		return nil, p.fail(fqn, nil, "TensorStorageMetadata has no chunks")
	}
	l, ok := cv.(*pickle.List)
	if !ok {
		return nil, p.fail(fqn, nil, "chunks is %s, want a list", describe(cv))
	}
	t.Chunks = make([]ChunkMeta, len(l.Items))
	for i, c := range l.Items {
		cst, err := p.dataclass(c, clsChunk, fqn, nil)
		if err != nil {
			return nil, err
		}
		off, ok1 := cst.Get("offsets")
		sz, ok2 := cst.Get("sizes")
		if !ok1 || !ok2 {
			return nil, p.fail(fqn, nil, "chunk %d lacks offsets or sizes", i)
		}
		ch := &t.Chunks[i]
		if ch.Offsets, ok1 = ints(off); !ok1 {
			return nil, p.fail(fqn, nil, "chunk %d offsets are %s, want a torch.Size", i, describe(off))
		}
		if ch.Sizes, ok2 = ints(sz); !ok2 {
			return nil, p.fail(fqn, ch.Offsets, "chunk sizes are %s, want a torch.Size", describe(sz))
		}
	}
	return t, nil
}

// properties reads TensorProperties, pickled through its __getstate__ as the tuple
// (dtype, layout, requires_grad, memory-format enum, pin_memory).
func (p *parser) properties(t *TensorMeta, v pickle.Value, fqn string) error {
	o, ok := v.(*pickle.Object)
	if !ok || classes[o.Class] != clsProps || o.Kind != pickle.NewObj || len(o.Args) != 0 {
		return p.fail(fqn, nil, "expected a TensorProperties, found %s", describe(v))
	}
	st, ok := o.State.(pickle.Tuple)
	if !ok || len(st) != 5 {
		return p.fail(fqn, nil, "TensorProperties state is %s, want a 5-tuple", describe(o.State))
	}
	g, ok := st[0].(pickle.Global)
	if !ok || g.Module != "torch" {
		return p.fail(fqn, nil, "TensorProperties dtype is %s, want a torch dtype", describe(st[0]))
	}
	if t.DType, ok = statedict.ParseDType(g.Name); !ok {
		return p.fail(fqn, nil, "unknown dtype torch.%s", g.Name)
	}
	layout, ok := st[1].(*pickle.Object)
	if !ok || layout.Class != (pickle.Global{Module: "torch.serialization", Name: "_get_layout"}) ||
		layout.Kind != pickle.Reduce || len(layout.Args) != 1 {
		return p.fail(fqn, nil, "TensorProperties layout is %s, want torch.serialization._get_layout(name)", describe(st[1]))
	}
	if name, _ := layout.Args[0].(string); name != "torch.strided" {
		return p.fail(fqn, nil, "%w: layout %s (DCP saves strided tensors only)", ErrUnsupported, describe(layout.Args[0]))
	}
	if t.RequiresGrad, ok = st[2].(bool); !ok {
		return p.fail(fqn, nil, "TensorProperties requires_grad is %s, want a bool", describe(st[2]))
	}
	mf, ok := st[3].(*pickle.Object)
	if !ok || classes[mf.Class] != clsMemFormat || mf.Kind != pickle.Reduce || len(mf.Args) != 1 {
		return p.fail(fqn, nil, "TensorProperties memory format is %s, want a MEM_FORMAT_ENCODING", describe(st[3]))
	}
	if n, ok := mf.Args[0].(int64); !ok || n < 0 || n > 2 {
		return p.fail(fqn, nil, "memory format encoding is %s, want 0, 1 or 2", describe(mf.Args[0]))
	}
	if _, ok := st[4].(bool); !ok {
		return p.fail(fqn, nil, "TensorProperties pin_memory is %s, want a bool", describe(st[4]))
	}
	return nil
}

// ints reads a torch.Size (torch.Size REDUCE of a tuple) or a plain tuple of ints. The
// result is never nil, so an empty size stays distinguishable from an absent one.
func ints(v pickle.Value) ([]int64, bool) {
	if o, ok := v.(*pickle.Object); ok {
		if o.Class != (pickle.Global{Module: "torch", Name: "Size"}) || o.Kind != pickle.Reduce || len(o.Args) != 1 {
			return nil, false
		}
		v = o.Args[0]
	}
	t, ok := v.(pickle.Tuple)
	if !ok {
		return nil, false
	}
	out := make([]int64, len(t))
	for i, x := range t {
		if out[i], ok = x.(int64); !ok {
			return nil, false
		}
	}
	return out, true
}

func (p *parser) plannerData(md *Metadata, v pickle.Value) error {
	d, ok := v.(*pickle.Dict)
	if !ok || d.Class != nil {
		return p.fail("", nil, "planner_data is %s, want a dict", describe(v))
	}
	md.PlannerData = make(map[string]Path, d.Len())
	keys, vals := d.Items()
	for i, k := range keys {
		fqn, ok := k.(string)
		if !ok {
			return p.fail("", nil, "planner_data key is %s, want a str", describe(k))
		}
		var elems []pickle.Value
		switch x := vals[i].(type) {
		case pickle.Tuple:
			elems = x
		case *pickle.List:
			elems = x.Items
		default:
			return p.fail(fqn, nil, "planner_data path is %s, want a tuple", describe(vals[i]))
		}
		if len(elems) == 0 {
			return p.fail(fqn, nil, "planner_data path is empty")
		}
		path := make(Path, len(elems))
		for j, e := range elems {
			switch x := e.(type) {
			case string:
				path[j] = x
			case int64:
				if x < 0 {
					return p.fail(fqn, nil, "planner_data path has the negative list index %d", x)
				}
				path[j] = x
			default:
				return p.fail(fqn, nil, "planner_data path element %d is %s, want a str or an int", j, describe(e))
			}
		}
		md.PlannerData[fqn] = path
	}
	return nil
}

func (p *parser) storageData(md *Metadata, v pickle.Value) error {
	d, ok := v.(*pickle.Dict)
	if !ok || d.Class != nil {
		return p.fail("", nil, "storage_data is %s, want a dict", describe(v))
	}
	keys, vals := d.Items()
	md.Storage = make([]StorageEntry, 0, len(keys))
	for i, k := range keys {
		kst, err := p.dataclass(k, clsIndex, "", nil)
		if err != nil {
			return err
		}
		fv, _ := kst.Get("fqn")
		fqn, ok := fv.(string)
		if !ok {
			return p.fail("", nil, "MetadataIndex fqn is %s, want a str", describe(fv))
		}
		e := StorageEntry{FQN: fqn}
		// MetadataIndex.__init__ leaves offset unset for bytes items.
		if off, ok := field(kst, "offset"); ok {
			if e.Offsets, ok = ints(off); !ok {
				return p.fail(fqn, nil, "MetadataIndex offset is %s, want a torch.Size", describe(off))
			}
		}
		if ix, ok := field(kst, "index"); ok {
			if _, isInt := ix.(int64); !isInt {
				return p.fail(fqn, e.Offsets, "MetadataIndex index is %s, want an int", describe(ix))
			}
		}
		ist, err := p.dataclass(vals[i], clsStorage, fqn, e.Offsets)
		if err != nil {
			return err
		}
		if err := p.storageInfo(&e, ist); err != nil {
			return err
		}
		key := keyOf(fqn, e.Offsets)
		if _, dup := md.storage[key]; dup {
			return p.fail(fqn, e.Offsets, "two storage entries for the same item")
		}
		md.storage[key] = len(md.Storage)
		md.Storage = append(md.Storage, e)
	}
	return nil
}

func (p *parser) storageInfo(e *StorageEntry, st *pickle.Dict) error {
	rp, _ := st.Get("relative_path")
	var ok bool
	if e.RelativePath, ok = rp.(string); !ok {
		return p.fail(e.FQN, e.Offsets, "_StorageInfo relative_path is %s, want a str", describe(rp))
	}
	off, _ := st.Get("offset")
	length, _ := st.Get("length")
	e.Offset, ok = off.(int64)
	if !ok || e.Offset < 0 {
		return p.fail(e.FQN, e.Offsets, "_StorageInfo offset is %s, want a non-negative int", describe(off))
	}
	e.Length, ok = length.(int64)
	if !ok || e.Length < 0 || e.Length > 1<<62-e.Offset {
		return p.fail(e.FQN, e.Offsets, "_StorageInfo length is %s, want a non-negative int", describe(length))
	}
	if td, ok := field(st, "transform_descriptors"); ok {
		var elems []pickle.Value
		switch x := td.(type) {
		case *pickle.List:
			elems = x.Items
		case pickle.Tuple:
			elems = x
		default:
			return p.fail(e.FQN, e.Offsets, "_StorageInfo transform_descriptors is %s, want a list of str", describe(td))
		}
		e.TransformDescriptors = make([]string, len(elems))
		for i, x := range elems {
			if e.TransformDescriptors[i], ok = x.(string); !ok {
				return p.fail(e.FQN, e.Offsets, "transform descriptor is %s, want a str", describe(x))
			}
		}
	}
	return nil
}

func (p *parser) storageMeta(v pickle.Value) (*StorageMeta, error) {
	st, err := p.dataclass(v, clsStoreMeta, "", nil)
	if err != nil {
		return nil, err
	}
	sm := &StorageMeta{}
	str := func(name string, dst *string) error {
		x, ok := field(st, name)
		if !ok {
			return nil
		}
		if *dst, ok = x.(string); !ok {
			return p.fail("", nil, "StorageMeta %s is %s, want a str", name, describe(x))
		}
		return nil
	}
	if id, ok := field(st, "checkpoint_id"); ok {
		if sm.CheckpointID, ok = pathString(id); !ok {
			return nil, p.fail("", nil, "StorageMeta checkpoint_id is %s, want a str or a pathlib path", describe(id))
		}
	}
	if err := str("save_id", &sm.SaveID); err != nil {
		return nil, err
	}
	if err := str("load_id", &sm.LoadID); err != nil {
		return nil, err
	}
	if mods, ok := field(st, "modules"); ok {
		l, ok := mods.(*pickle.List)
		if !ok {
			return nil, p.fail("", nil, "StorageMeta modules is %s, want a list", describe(mods))
		}
		for _, m := range l.Items {
			s, ok := m.(string)
			if !ok {
				return nil, p.fail("", nil, "StorageMeta module is %s, want a str", describe(m))
			}
			sm.Modules = append(sm.Modules, s)
		}
	}
	return sm, nil
}

// pathString renders a checkpoint_id: a str, or a pathlib object pickled as
// PosixPath(*args) — one string on Python 3.14, the parts tuple on older Pythons.
func pathString(v pickle.Value) (string, bool) {
	if s, ok := v.(string); ok {
		return s, true
	}
	o, ok := v.(*pickle.Object)
	if !ok || classes[o.Class] != clsPath || o.Kind != pickle.Reduce {
		return "", false
	}
	sep := "/"
	if strings.Contains(o.Class.Name, "Windows") {
		sep = `\`
	}
	out := ""
	for _, a := range o.Args {
		s, ok := a.(string)
		if !ok {
			return "", false
		}
		switch {
		case out == "" || strings.HasPrefix(s, sep) || sep == `\` && len(s) > 1 && s[1] == ':':
			out = s
		case strings.HasSuffix(out, sep):
			out += s
		default:
			out += sep + s
		}
	}
	return out, true
}

// validate checks what does not need the data files: chunk geometry, the one-to-one match
// between items and storage entries, and data file names.
func (m *Metadata) validate(file string) error {
	fail := func(fqn string, chunk []int64, format string, args ...any) error {
		return &Error{File: file, FQN: fqn, Chunk: chunk, Offset: -1, Err: fmt.Errorf(format, args...)}
	}
	used := 0
	for _, it := range m.Items {
		if it.Tensor == nil {
			if _, ok := m.Lookup(it.FQN, nil); !ok {
				return fail(it.FQN, nil, "bytes item has no storage entry")
			}
			used++
			continue
		}
		t := it.Tensor
		if bad, err := checkTiling(t.DType, t.Size, t.Chunks); err != nil {
			var chunk []int64
			if bad >= 0 {
				chunk = t.Chunks[bad].Offsets
			}
			return fail(it.FQN, chunk, "%w", err)
		}
		for _, c := range t.Chunks {
			if _, ok := m.Lookup(it.FQN, c.Offsets); !ok {
				return fail(it.FQN, c.Offsets, "chunk has no storage entry")
			}
			used++
		}
	}
	if used != len(m.Storage) {
		// Some entry matches no chunk or item: find it for the message.
		for _, e := range m.Storage {
			it, ok := m.Item(e.FQN)
			switch {
			case !ok:
				return fail(e.FQN, e.Offsets, "storage entry for an item that state_dict_metadata does not list")
			case (it.Tensor == nil) != (e.Offsets == nil):
				return fail(e.FQN, e.Offsets, "storage entry kind (tensor chunk or bytes) does not match the item")
			case it.Tensor != nil && !slices.ContainsFunc(it.Tensor.Chunks, func(c ChunkMeta) bool { return slices.Equal(c.Offsets, e.Offsets) }):
				return fail(e.FQN, e.Offsets, "storage entry for a chunk the tensor does not list")
			}
		}
		return fail("", nil, "%d storage entries for %d chunks and bytes items", len(m.Storage), used)
	}
	for _, e := range m.Storage {
		if err := checkRelative(e.RelativePath); err != nil {
			return fail(e.FQN, e.Offsets, "data file %q: %w", e.RelativePath, err)
		}
	}
	return nil
}

// checkRelative accepts a data file name only if it stays inside the checkpoint folder:
// not empty, not absolute, no ".." element, no backslash or NUL.
func checkRelative(rel string) error {
	if strings.ContainsAny(rel, "\\\x00") {
		return fmt.Errorf("relative path contains a backslash or NUL")
	}
	if !filepath.IsLocal(filepath.FromSlash(rel)) {
		return fmt.Errorf("relative path escapes the checkpoint folder")
	}
	return nil
}
