package dcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"weak"

	"github.com/ckpt-dev/ckpt/ckpterr"
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
	// DefaultSavePlanner recorded it when it flattened the state dict. A key whose path is
	// the key itself ((fqn,), every key of a flat state dict) is left out, as is every key
	// when the file has none: such keys are top-level keys.
	PlannerData map[string]Path
	// Storage locates every tensor chunk and bytes item, in file order.
	Storage []StorageEntry
	// StorageMeta is what the writer recorded about the save; nil when absent (torch 1.13
	// and custom writers).
	StorageMeta *StorageMeta
	// Version is the DCP version string ("1.0.0"); "" when absent (older files).
	Version string

	// items maps FQN → index in Items: built while parsing, let go after, and built again
	// on the first Item or Lookup.
	items     map[string]int32
	itemsOnce sync.Once
	// entries[first[i]+j] is the index in Storage of chunk j of Items[i], or -1 when no
	// entry holds it; a bytes item has one slot.
	first   []int32
	entries []int32
	// matched counts the entries that hold a chunk or bytes item.
	matched int
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
// (offsets nil). Torch's MetadataIndex equality ignores the index hint; so does Lookup.
func (m *Metadata) Lookup(fqn string, offsets []int64) (*StorageEntry, bool) {
	i, ok := m.index()[fqn]
	if !ok {
		return nil, false
	}
	t := m.Items[i].Tensor
	switch {
	case t == nil && offsets == nil:
		return m.entry(int(i), 0)
	case t != nil && offsets != nil:
		for j, c := range t.Chunks {
			if slices.Equal(c.Offsets, offsets) {
				return m.entry(int(i), j)
			}
		}
	}
	return nil, false
}

// ChunkEntry returns the storage entry of chunk j of Items[i] (j 0 for a bytes item).
func (m *Metadata) ChunkEntry(i, j int) (*StorageEntry, bool) { return m.entry(i, j) }

func (m *Metadata) entry(i, j int) (*StorageEntry, bool) {
	k := m.entries[int(m.first[i])+j]
	if k < 0 {
		return nil, false
	}
	return &m.Storage[k], true
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

// Item returns the item stored under a flattened key.
func (m *Metadata) Item(fqn string) (*Item, bool) {
	i, ok := m.index()[fqn]
	if !ok {
		return nil, false
	}
	return &m.Items[i], true
}

// index returns the items by name.
func (m *Metadata) index() map[string]int32 {
	m.itemsOnce.Do(func() {
		if m.items == nil {
			m.items = make(map[string]int32, len(m.Items))
			for i, it := range m.Items {
				m.items[it.FQN] = int32(i)
			}
		}
	})
	return m.items
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
//
// The decoding streams: the unpickler keeps in its memo only what the pickle fetches again
// (pickle.Options.ForgetUnfetched), and each DCP record BUILD completed is reduced to its
// typed form as soon as the pickle puts it in a container (pickle.Options.Build), so that
// a `.metadata` of hundreds of thousands of items never exists as a general value tree. A
// record the reduction does not take (an unusual layout, a wrong field, an object the
// pickle refers to twice) stays an inert object and is read by the same code afterwards,
// where an error can name its item.
func ReadMetadata(data []byte, file string) (*Metadata, error) {
	return readMetadata(bytes.NewReader(data), int64(len(data)), file, true)
}

// ReadMetadataFrom is ReadMetadata of the size bytes of r, read a window at a time: the
// file is never held whole.
func ReadMetadataFrom(r io.ReaderAt, size int64, file string) (*Metadata, error) {
	return readMetadata(r, size, file, true)
}

// readMetadata decodes with the streaming reduction or, without it, into a general value
// tree first (the reference the fuzz tests compare the streaming path with).
func readMetadata(r io.ReaderAt, size int64, file string, stream bool) (*Metadata, error) {
	p := &parser{file: file, ints: map[string][]int64{}}
	opts := pickle.Options{Strict: true, Allow: allow}
	var dec *pickle.Decoder
	if stream {
		dec = pickle.NewDecoderAt(r, size, p.streamOptions())
	} else {
		data := make([]byte, size)
		if _, err := r.ReadAt(data, 0); err != nil && err != io.EOF {
			return nil, errorAt(file, "", nil, -1, err)
		}
		dec = pickle.NewDecoder(data, opts)
	}
	v, err := dec.Decode()
	if err != nil {
		if pe := (*ckpterr.FormatError)(nil); errors.As(err, &pe) && pe.Format == pickle.Format {
			op := " " + pe.Item
			var dis *pickle.DisallowedError
			if pe.Item == "" || errors.As(pe.Err, &dis) {
				op = "" // the cause names the opcode
			}
			return nil, errorAt(file, "", nil, pe.Offset, fmt.Errorf("pickle%s: %w", op, pe.Err))
		}
		return nil, errorAt(file, "", nil, -1, err)
	}
	if rest := size - dec.Offset(); rest != 0 {
		return nil, errorAt(file, "", nil, dec.Offset(), fmt.Errorf("%d bytes after the end of the pickle", rest))
	}
	md, err := p.metadata(v)
	if err != nil {
		return nil, err
	}
	if err := md.validate(file); err != nil {
		return nil, err
	}
	md.items, md.itemsOnce = nil, sync.Once{} // the name index is held only while needed (Metadata.index)
	return md, nil
}

// parser converts the decoded pickle into Metadata, reporting where in the structure a
// value is wrong.
type parser struct {
	file string
	// ints interns the int lists read (shapes, offsets): tensors of a model share a few.
	ints map[string][]int64
	// props are the TensorProperties read, one per dtype and requires_grad.
	props map[props]*props
	// items is the claim collecting state_dict_metadata, once found (see claim), held
	// weakly: a dict the pickle discards is collected with its claim.
	items weak.Pointer[claim]
	// class is the global each role's records were reduced from: one per role and file
	// (a record of the role under another module path stays an object), so that an error
	// names a reduced record's class as it names an object's.
	class map[string]pickle.Global
}

// streamOptions are the unpickler's options for the streaming decode: the memo holds what
// is fetched again, records are reduced as they are completed (build), and the large
// dicts' items are claimed as they are put (setItem).
func (p *parser) streamOptions() pickle.Options {
	return pickle.Options{Strict: true, Allow: allow, ForgetUnfetched: true, Build: p.build, SetItem: p.setItem}
}

// maxInterned bounds the distinct int lists parser.ints keeps.
const maxInterned = 1 << 12

func (p *parser) fail(fqn string, chunk []int64, format string, args ...any) error {
	return errorAt(p.file, fqn, chunk, -1, fmt.Errorf(format, args...))
}

// The typed forms the records are reduced to (by parser.build as the pickle is decoded,
// or by the parser afterwards).
type (
	// props is a TensorProperties.
	props struct {
		dtype        statedict.DType
		requiresGrad bool
	}
	// bytesMeta is a BytesStorageMetadata.
	bytesMeta struct{}
	// index is a MetadataIndex: which item (and chunk) a storage entry holds.
	index struct {
		fqn     string
		offsets []int64 // nil for a bytes item
	}
	// storageInfo is a _StorageInfo: where the entry's bytes are.
	storageInfo struct {
		rel            string
		offset, length int64
		transforms     []string
	}
)

// PickleOpaque makes an index a dict key (storage_data's) that equals no other.
func (*index) PickleOpaque() {}

var theBytesMeta = &bytesMeta{}

// build is the unpickler's Options.Build hook: it reduces a completed DCP record to
// its typed form, or leaves it (false) when it is not exactly what the parser accepts, for
// the parser to report with the item's name.
func (p *parser) build(o *pickle.Object) (pickle.Value, bool, error) {
	role := classes[o.Class]
	if g, ok := p.class[role]; ok && g != o.Class {
		return nil, false, nil
	}
	var v pickle.Value
	var err error
	switch role {
	case clsChunk:
		var c ChunkMeta
		c, err = p.chunk(o, "", 0)
		v = &c
	case clsProps:
		v, err = p.properties(o, "")
	case clsTensor:
		v, err = p.tensor(o, "")
	case clsBytes:
		v, err = p.bytesItem(o, "")
	case clsIndex:
		v, err = p.index(o)
	case clsStorage:
		v, err = p.storageInfo(o, "", nil)
	default:
		return nil, false, nil
	}
	if err != nil {
		return nil, false, nil
	}
	if p.class == nil {
		p.class = map[string]pickle.Global{}
	}
	p.class[role] = o.Class
	return v, true, nil
}

// describe names a value's type for error messages, giving a claimed dict its items back
// first.
func (p *parser) describe(v pickle.Value) string {
	p.releaseAny(v)
	role := ""
	switch v.(type) {
	case *ChunkMeta:
		role = clsChunk
	case *props:
		role = clsProps
	case *TensorMeta:
		role = clsTensor
	case *bytesMeta:
		role = clsBytes
	case *index:
		role = clsIndex
	case *storageInfo:
		role = clsStorage
	}
	if g, ok := p.class[role]; ok {
		return g.String() + " object"
	}
	return describe(v)
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
	case *ChunkMeta:
		return "ChunkStorageMetadata object"
	case *props:
		return "TensorProperties object"
	case *TensorMeta:
		return "TensorStorageMetadata object"
	case *bytesMeta:
		return "BytesStorageMetadata object"
	case *index:
		return "MetadataIndex object"
	case *storageInfo:
		return "_StorageInfo object"
	}
	return fmt.Sprintf("%T", v)
}

// dataclass checks that v is an instance of the class role (created by NEWOBJ, as pickle
// writes dataclasses) and returns its state dict, which may be empty.
func (p *parser) dataclass(v pickle.Value, role, fqn string, chunk []int64) (*pickle.Dict, error) {
	o, ok := v.(*pickle.Object)
	if !ok || classes[o.Class] != role || o.Kind != pickle.NewObj || len(o.Args) != 0 {
		return nil, p.fail(fqn, chunk, "expected a %s, found %s", role, p.describe(v))
	}
	switch st := o.State.(type) {
	case nil:
		return &pickle.Dict{}, nil
	case *pickle.Dict:
		if err := p.release(st); err != nil {
			return nil, p.fail(fqn, chunk, "%s state: %v", role, err)
		}
		return st, nil
	}
	return nil, p.fail(fqn, chunk, "%s state is %s, want a dict", role, p.describe(o.State))
}

// field returns a state field; absent and None are both reported as absent.
func field(st *pickle.Dict, name string) (pickle.Value, bool) {
	v, ok := st.Get(name)
	if _, none := v.(pickle.None); none {
		return nil, false
	}
	return v, ok
}

// drop replaces a field read already with None, so that the garbage collector may take
// what it held.
func drop(st *pickle.Dict, name string) { st.Set(name, pickle.None{}) }

func (p *parser) metadata(v pickle.Value) (*Metadata, error) {
	st, err := p.dataclass(v, clsMetadata, "", nil)
	if err != nil {
		return nil, err
	}
	md := &Metadata{items: map[string]int32{}}
	sdm, ok := field(st, "state_dict_metadata")
	if !ok {
		return nil, p.fail("", nil, "Metadata has no state_dict_metadata")
	}
	// Each decoded dict is let go once read (the memo does not hold it, see
	// pickle.Options.ForgetUnfetched): the decoded file and Metadata coexist one dict at a
	// time.
	if err := p.stateDictMetadata(md, sdm); err != nil {
		return nil, err
	}
	drop(st, "state_dict_metadata")
	if pd, ok := field(st, "planner_data"); ok {
		if err := p.plannerData(md, pd); err != nil {
			return nil, err
		}
		drop(st, "planner_data")
	}
	sd, ok := field(st, "storage_data")
	if !ok {
		return nil, p.fail("", nil, "Metadata has no storage_data: the checkpoint was not written by a file-system writer")
	}
	if err := p.storageData(md, sd); err != nil {
		return nil, err
	}
	drop(st, "storage_data")
	if sm, ok := field(st, "storage_meta"); ok {
		if md.StorageMeta, err = p.storageMeta(sm); err != nil {
			return nil, err
		}
	}
	if ver, ok := field(st, "version"); ok {
		s, isStr := ver.(string)
		if !isStr {
			return nil, p.fail("", nil, "Metadata version is %s, want a str", p.describe(ver))
		}
		md.Version = s
	}
	return md, nil
}

func (p *parser) stateDictMetadata(md *Metadata, v pickle.Value) error {
	c, err := p.claimed(v, claimItems)
	if err != nil {
		return p.fail("", nil, "state_dict_metadata: %v", err)
	}
	if c != nil {
		md.Items, md.items = c.items, c.index
		return p.slots(md)
	}
	d, ok := v.(*pickle.Dict)
	if !ok || d.Class != nil {
		return p.fail("", nil, "state_dict_metadata is %s, want a dict", p.describe(v))
	}
	md.Items = make([]Item, 0, d.Len())
	for k, val := range d.All() {
		fqn, ok := k.(string)
		if !ok {
			return p.fail("", nil, "state_dict_metadata key is %s, want a str", p.describe(k))
		}
		item := Item{FQN: fqn}
		switch x := val.(type) {
		case *TensorMeta:
			item.Tensor = x
		case *bytesMeta:
		case *pickle.Object:
			switch classes[x.Class] {
			case clsBytes:
				if _, err := p.bytesItem(x, fqn); err != nil {
					return err
				}
			case clsTensor:
				t, err := p.tensor(x, fqn)
				if err != nil {
					return err
				}
				item.Tensor = t
			default:
				return p.fail(fqn, nil, "expected a TensorStorageMetadata or BytesStorageMetadata, found %s", p.describe(x))
			}
		default:
			return p.fail(fqn, nil, "expected a TensorStorageMetadata or BytesStorageMetadata, found %s", p.describe(val))
		}
		if len(md.Items) >= math.MaxInt32 {
			return p.fail(fqn, nil, "too many items")
		}
		md.items[fqn] = int32(len(md.Items))
		md.Items = append(md.Items, item)
	}
	return p.slots(md)
}

// slots numbers the storage entry slots of the items: one per chunk, one per bytes item.
func (p *parser) slots(md *Metadata) error {
	md.first = make([]int32, len(md.Items))
	n := 0
	for i, it := range md.Items {
		k := 1
		if it.Tensor != nil {
			k = len(it.Tensor.Chunks)
		}
		if n > math.MaxInt32-k {
			return p.fail(it.FQN, nil, "too many chunks")
		}
		md.first[i] = int32(n)
		n += k
	}
	md.entries = make([]int32, n)
	for i := range md.entries {
		md.entries[i] = -1
	}
	return nil
}

func (p *parser) bytesItem(v pickle.Value, fqn string) (*bytesMeta, error) {
	st, err := p.dataclass(v, clsBytes, fqn, nil)
	if err != nil {
		return nil, err
	}
	if st.Len() != 0 {
		return nil, p.fail(fqn, nil, "BytesStorageMetadata has fields")
	}
	return theBytesMeta, nil
}

func (p *parser) tensor(v pickle.Value, fqn string) (*TensorMeta, error) {
	if t, ok := v.(*TensorMeta); ok {
		return t, nil
	}
	st, err := p.dataclass(v, clsTensor, fqn, nil)
	if err != nil {
		return nil, err
	}
	t := &TensorMeta{}
	pv, ok := field(st, "properties")
	if !ok {
		return nil, p.fail(fqn, nil, "TensorStorageMetadata has no properties")
	}
	pr, err := p.properties(pv, fqn)
	if err != nil {
		return nil, err
	}
	t.DType, t.RequiresGrad = pr.dtype, pr.requiresGrad
	size, ok := field(st, "size")
	if !ok {
		return nil, p.fail(fqn, nil, "TensorStorageMetadata has no size")
	}
	if t.Size, ok = p.intList(size); !ok {
		return nil, p.fail(fqn, nil, "size is %s, want a torch.Size", p.describe(size))
	}
	cv, ok := field(st, "chunks")
	if !ok {
		return nil, p.fail(fqn, nil, "TensorStorageMetadata has no chunks")
	}
	l, ok := cv.(*pickle.List)
	if !ok {
		return nil, p.fail(fqn, nil, "chunks is %s, want a list", p.describe(cv))
	}
	t.Chunks = make([]ChunkMeta, len(l.Items))
	for i, c := range l.Items {
		if t.Chunks[i], err = p.chunk(c, fqn, i); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func (p *parser) chunk(v pickle.Value, fqn string, i int) (ChunkMeta, error) {
	if c, ok := v.(*ChunkMeta); ok {
		return *c, nil
	}
	cst, err := p.dataclass(v, clsChunk, fqn, nil)
	if err != nil {
		return ChunkMeta{}, err
	}
	off, ok1 := cst.Get("offsets")
	sz, ok2 := cst.Get("sizes")
	if !ok1 || !ok2 {
		return ChunkMeta{}, p.fail(fqn, nil, "chunk %d lacks offsets or sizes", i)
	}
	var ch ChunkMeta
	if ch.Offsets, ok1 = p.intList(off); !ok1 {
		return ChunkMeta{}, p.fail(fqn, nil, "chunk %d offsets are %s, want a torch.Size", i, p.describe(off))
	}
	if ch.Sizes, ok2 = p.intList(sz); !ok2 {
		return ChunkMeta{}, p.fail(fqn, ch.Offsets, "chunk sizes are %s, want a torch.Size", p.describe(sz))
	}
	return ch, nil
}

// properties reads TensorProperties, pickled through its __getstate__ as the tuple
// (dtype, layout, requires_grad, memory-format enum, pin_memory).
func (p *parser) properties(v pickle.Value, fqn string) (*props, error) {
	if pr, ok := v.(*props); ok {
		return pr, nil
	}
	o, ok := v.(*pickle.Object)
	if !ok || classes[o.Class] != clsProps || o.Kind != pickle.NewObj || len(o.Args) != 0 {
		return nil, p.fail(fqn, nil, "expected a TensorProperties, found %s", p.describe(v))
	}
	st, ok := o.State.(pickle.Tuple)
	if !ok || len(st) != 5 {
		return nil, p.fail(fqn, nil, "TensorProperties state is %s, want a 5-tuple", p.describe(o.State))
	}
	var pr props
	g, ok := st[0].(pickle.Global)
	if !ok || g.Module != "torch" {
		return nil, p.fail(fqn, nil, "TensorProperties dtype is %s, want a torch dtype", p.describe(st[0]))
	}
	if pr.dtype, ok = statedict.ParseDType(g.Name); !ok {
		return nil, p.fail(fqn, nil, "unknown dtype torch.%s", g.Name)
	}
	layout, ok := st[1].(*pickle.Object)
	if !ok || layout.Class != (pickle.Global{Module: "torch.serialization", Name: "_get_layout"}) ||
		layout.Kind != pickle.Reduce || len(layout.Args) != 1 {
		return nil, p.fail(fqn, nil, "TensorProperties layout is %s, want torch.serialization._get_layout(name)", p.describe(st[1]))
	}
	if name, _ := layout.Args[0].(string); name != "torch.strided" {
		return nil, p.fail(fqn, nil, "%w: layout %s (DCP saves strided tensors only)", ckpterr.ErrUnsupported, p.describe(layout.Args[0]))
	}
	if pr.requiresGrad, ok = st[2].(bool); !ok {
		return nil, p.fail(fqn, nil, "TensorProperties requires_grad is %s, want a bool", p.describe(st[2]))
	}
	mf, ok := st[3].(*pickle.Object)
	if !ok || classes[mf.Class] != clsMemFormat || mf.Kind != pickle.Reduce || len(mf.Args) != 1 {
		return nil, p.fail(fqn, nil, "TensorProperties memory format is %s, want a MEM_FORMAT_ENCODING", p.describe(st[3]))
	}
	if n, ok := mf.Args[0].(int64); !ok || n < 0 || n > 2 {
		return nil, p.fail(fqn, nil, "memory format encoding is %s, want 0, 1 or 2", p.describe(mf.Args[0]))
	}
	if _, ok := st[4].(bool); !ok {
		return nil, p.fail(fqn, nil, "TensorProperties pin_memory is %s, want a bool", p.describe(st[4]))
	}
	if shared, ok := p.props[pr]; ok {
		return shared, nil
	}
	if p.props == nil {
		p.props = map[props]*props{}
	}
	p.props[pr] = &pr
	return &pr, nil
}

// intList reads a torch.Size (torch.Size REDUCE of a tuple) or a plain tuple of ints. The
// result is never nil, so an empty size stays distinguishable from an absent one. Lists
// are interned: callers must not modify them.
func (p *parser) intList(v pickle.Value) ([]int64, bool) {
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
	var buf [8 * 8]byte
	key := buf[:0]
	for _, x := range t {
		n, ok := x.(int64)
		if !ok {
			return nil, false
		}
		key = binary.LittleEndian.AppendUint64(key, uint64(n))
	}
	if out, ok := p.ints[string(key)]; ok {
		return out, true
	}
	out := make([]int64, len(t))
	for i, x := range t {
		out[i] = x.(int64)
	}
	if len(p.ints) < maxInterned && len(t) <= 8 {
		p.ints[string(key)] = out
	}
	return out, true
}

func (p *parser) plannerData(md *Metadata, v pickle.Value) error {
	c, err := p.claimed(v, claimPlanner)
	if err != nil {
		return p.fail("", nil, "planner_data: %v", err)
	}
	if c != nil {
		for i, fqn := range c.planner {
			path, ok := c.paths[i]
			if !ok {
				delete(md.PlannerData, fqn)
				continue
			}
			if md.PlannerData == nil {
				md.PlannerData = map[string]Path{}
			}
			md.PlannerData[fqn] = path
		}
		return nil
	}
	d, ok := v.(*pickle.Dict)
	if !ok || d.Class != nil {
		return p.fail("", nil, "planner_data is %s, want a dict", p.describe(v))
	}
	for k, val := range d.All() {
		fqn, ok := k.(string)
		if !ok {
			return p.fail("", nil, "planner_data key is %s, want a str", p.describe(k))
		}
		var elems []pickle.Value
		switch x := val.(type) {
		case pickle.Tuple:
			elems = x
		case *pickle.List:
			elems = x.Items
		default:
			return p.fail(fqn, nil, "planner_data path is %s, want a tuple", p.describe(val))
		}
		if len(elems) == 0 {
			return p.fail(fqn, nil, "planner_data path is empty")
		}
		if s, ok := elems[0].(string); ok && len(elems) == 1 && s == fqn {
			delete(md.PlannerData, fqn) // the key itself: a top-level key (a later duplicate wins)
			continue
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
				return p.fail(fqn, nil, "planner_data path element %d is %s, want a str or an int", j, p.describe(e))
			}
		}
		if md.PlannerData == nil {
			md.PlannerData = map[string]Path{}
		}
		md.PlannerData[fqn] = path
	}
	return nil
}

func (p *parser) index(v pickle.Value) (*index, error) {
	if ix, ok := v.(*index); ok {
		return ix, nil
	}
	kst, err := p.dataclass(v, clsIndex, "", nil)
	if err != nil {
		return nil, err
	}
	fv, _ := kst.Get("fqn")
	fqn, ok := fv.(string)
	if !ok {
		return nil, p.fail("", nil, "MetadataIndex fqn is %s, want a str", p.describe(fv))
	}
	ix := &index{fqn: fqn}
	// MetadataIndex.__init__ leaves offset unset for bytes items.
	if off, ok := field(kst, "offset"); ok {
		if ix.offsets, ok = p.intList(off); !ok {
			return nil, p.fail(fqn, nil, "MetadataIndex offset is %s, want a torch.Size", p.describe(off))
		}
	}
	if hint, ok := field(kst, "index"); ok {
		if _, isInt := hint.(int64); !isInt {
			return nil, p.fail(fqn, ix.offsets, "MetadataIndex index is %s, want an int", p.describe(hint))
		}
	}
	return ix, nil
}

func (p *parser) storageData(md *Metadata, v pickle.Value) error {
	c, err := p.claimed(v, claimStorage)
	if err != nil {
		return p.fail("", nil, "storage_data: %v", err)
	}
	// Tensors of many chunks find an entry's chunk through a map of their offsets.
	var many map[int32]map[string]int
	if c != nil {
		md.Storage = c.storage
		for k := range md.Storage {
			if err := p.match(md, k, &many); err != nil {
				return err
			}
		}
		return nil
	}
	d, ok := v.(*pickle.Dict)
	if !ok || d.Class != nil {
		return p.fail("", nil, "storage_data is %s, want a dict", p.describe(v))
	}
	md.Storage = make([]StorageEntry, 0, d.Len())
	for k, val := range d.All() {
		ix, err := p.index(k)
		if err != nil {
			return err
		}
		si, err := p.storageInfo(val, ix.fqn, ix.offsets)
		if err != nil {
			return err
		}
		md.Storage = append(md.Storage, StorageEntry{FQN: ix.fqn, Offsets: ix.offsets, RelativePath: si.rel,
			Offset: si.offset, Length: si.length, TransformDescriptors: si.transforms})
		if err := p.match(md, len(md.Storage)-1, &many); err != nil {
			return err
		}
	}
	return nil
}

// match records storage entry k as its chunk's or bytes item's; validate reports entries
// that match none. The entry takes the item's name string, so that the name is held once.
func (p *parser) match(md *Metadata, k int, many *map[int32]map[string]int) error {
	e := &md.Storage[k]
	i, ok := md.items[e.FQN]
	if !ok {
		return nil
	}
	e.FQN = md.Items[i].FQN
	slot := -1
	switch t := md.Items[i].Tensor; {
	case t == nil && e.Offsets == nil:
		slot = 0
	case t != nil && e.Offsets != nil && len(t.Chunks) <= 16:
		slot = slices.IndexFunc(t.Chunks, func(c ChunkMeta) bool { return slices.Equal(c.Offsets, e.Offsets) })
	case t != nil && e.Offsets != nil:
		if (*many)[i] == nil {
			if *many == nil {
				*many = map[int32]map[string]int{}
			}
			m := make(map[string]int, len(t.Chunks))
			for j := len(t.Chunks) - 1; j >= 0; j-- { // the first of equal offsets wins
				m[offsetsKey(t.Chunks[j].Offsets)] = j
			}
			(*many)[i] = m
		}
		if j, ok := (*many)[i][offsetsKey(e.Offsets)]; ok {
			slot = j
		}
	}
	if slot < 0 {
		return nil
	}
	s := &md.entries[int(md.first[i])+slot]
	if *s >= 0 {
		return p.fail(e.FQN, e.Offsets, "two storage entries for the same item")
	}
	*s = int32(k)
	md.matched++
	return nil
}

// offsetsKey is a chunk's offsets as a map key.
func offsetsKey(offsets []int64) string {
	b := make([]byte, 0, 8*len(offsets))
	for _, o := range offsets {
		b = binary.LittleEndian.AppendUint64(b, uint64(o))
	}
	return string(b)
}

func (p *parser) storageInfo(v pickle.Value, fqn string, chunk []int64) (*storageInfo, error) {
	if si, ok := v.(*storageInfo); ok {
		return si, nil
	}
	st, err := p.dataclass(v, clsStorage, fqn, chunk)
	if err != nil {
		return nil, err
	}
	si := &storageInfo{}
	rp, _ := st.Get("relative_path")
	var ok bool
	if si.rel, ok = rp.(string); !ok {
		return nil, p.fail(fqn, chunk, "_StorageInfo relative_path is %s, want a str", p.describe(rp))
	}
	off, _ := st.Get("offset")
	length, _ := st.Get("length")
	si.offset, ok = off.(int64)
	if !ok || si.offset < 0 {
		return nil, p.fail(fqn, chunk, "_StorageInfo offset is %s, want a non-negative int", p.describe(off))
	}
	si.length, ok = length.(int64)
	if !ok || si.length < 0 || si.length > 1<<62-si.offset {
		return nil, p.fail(fqn, chunk, "_StorageInfo length is %s, want a non-negative int", p.describe(length))
	}
	if td, ok := field(st, "transform_descriptors"); ok {
		var elems []pickle.Value
		switch x := td.(type) {
		case *pickle.List:
			elems = x.Items
		case pickle.Tuple:
			elems = x
		default:
			return nil, p.fail(fqn, chunk, "_StorageInfo transform_descriptors is %s, want a list of str", p.describe(td))
		}
		si.transforms = make([]string, len(elems))
		for i, x := range elems {
			if si.transforms[i], ok = x.(string); !ok {
				return nil, p.fail(fqn, chunk, "transform descriptor is %s, want a str", p.describe(x))
			}
		}
	}
	return si, nil
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
			return p.fail("", nil, "StorageMeta %s is %s, want a str", name, p.describe(x))
		}
		return nil
	}
	if id, ok := field(st, "checkpoint_id"); ok {
		if sm.CheckpointID, ok = pathString(id); !ok {
			return nil, p.fail("", nil, "StorageMeta checkpoint_id is %s, want a str or a pathlib path", p.describe(id))
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
			return nil, p.fail("", nil, "StorageMeta modules is %s, want a list", p.describe(mods))
		}
		for _, m := range l.Items {
			s, ok := m.(string)
			if !ok {
				return nil, p.fail("", nil, "StorageMeta module is %s, want a str", p.describe(m))
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
		return errorAt(file, fqn, chunk, -1, fmt.Errorf(format, args...))
	}
	for i, it := range m.Items {
		if it.Tensor == nil {
			if _, ok := m.entry(i, 0); !ok {
				return fail(it.FQN, nil, "bytes item has no storage entry")
			}
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
		for j, c := range t.Chunks {
			if _, ok := m.entry(i, j); !ok {
				return fail(it.FQN, c.Offsets, "chunk has no storage entry")
			}
		}
	}
	if m.matched != len(m.Storage) {
		// Some entry matches no chunk or item: find it for the message.
		held := make([]bool, len(m.Storage))
		for _, k := range m.entries {
			if k >= 0 {
				held[k] = true
			}
		}
		for k, e := range m.Storage {
			if held[k] {
				continue
			}
			it, ok := m.Item(e.FQN)
			switch {
			case !ok:
				return fail(e.FQN, e.Offsets, "storage entry for an item that state_dict_metadata does not list")
			case (it.Tensor == nil) != (e.Offsets == nil):
				return fail(e.FQN, e.Offsets, "storage entry kind (tensor chunk or bytes) does not match the item")
			case it.Tensor != nil && !slices.ContainsFunc(it.Tensor.Chunks, func(c ChunkMeta) bool { return slices.Equal(c.Offsets, e.Offsets) }):
				return fail(e.FQN, e.Offsets, "storage entry for a chunk the tensor does not list")
			}
			return fail(e.FQN, e.Offsets, "two storage entries for the same item")
		}
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
