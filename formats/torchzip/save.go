package torchzip

import (
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math/big"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/statedict"
)

// SaveOptions control how a checkpoint tree is written as a torch.save archive.
type SaveOptions struct {
	// ArchiveName is the top folder inside the zip; torch uses the file name's stem and
	// "archive" for streams. Empty means "archive".
	ArchiveName string
	// Location returns the device tag recorded for a storage (the map_location remap);
	// nil keeps each storage's saved tag.
	Location func(*statedict.Storage) string
	// Sum, if set, returns a hash to be fed a storage's bytes as they are written (nil: none),
	// so callers can checksum what was written without reading it again.
	Sum func(*statedict.Storage) hash.Hash
	// Kept, if set, accepts Python objects outside torch's weights_only allowlist (a
	// Lightning hyper-parameter object, a config class): they are pickled as the source had
	// them and reported here by flattened name. Without it they are an error, and the
	// archive loads with torch.load(weights_only=True). Objects Python would run as known
	// code are never written.
	Kept func(name string, o *statedict.Object)
	// Data says the archive is loaded with torch.load(weights_only=False) (DCP's bytes
	// items): the pure-data classes ckpt models (pickle.IsModeled: argparse.Namespace,
	// io.BytesIO) then load without importing anything beyond the standard library, so they
	// are written as any value, neither reported nor refused.
	Data bool
}

// Write writes root as a torch.save zip archive that torch.load(weights_only=True) reads:
// a protocol-2 pickle using only the opcodes and globals torch allows, one `data/<key>`
// record per storage (so views and tied weights keep sharing), records 64-byte aligned in
// miniz's layout. Storage bytes stream from their source; only the pickle is held in
// memory. It returns the number of bytes written.
func Write(w io.Writer, root statedict.Value, opts SaveOptions) (int64, error) {
	s := states.Get().(*saveState)
	defer s.release()
	p := &s.p
	p.loc, p.kept, p.data = opts.Location, opts.Kept, opts.Data
	if err := p.value(root, ""); err != nil {
		return 0, err
	}
	if p.err != nil {
		return 0, p.err
	}
	pkl := p.enc.Finish()
	name := opts.ArchiveName
	if name == "" {
		name = "archive"
	}
	for _, st := range p.order {
		if st.BigEndian {
			return 0, fmt.Errorf("storage %q is big-endian: convert it to little-endian before writing", st.Key)
		}
	}
	s.cw = statedict.Counter{W: w}
	z := &s.z
	z.w = &s.cw
	names := recordNames(name)
	for i, data := range [][]byte{pkl, []byte("1"), alignment, []byte("little")} {
		if err := z.bytesRecord(names[i], data); err != nil {
			return s.cw.N, err
		}
	}
	for _, st := range p.order {
		var sum hash.Hash
		if opts.Sum != nil {
			sum = opts.Sum(st)
		}
		if err := z.record(name+"/data/"+p.keys[st], st.Size, sum, st.WriteTo); err != nil {
			return s.cw.N, err
		}
	}
	if err := z.bytesRecord(names[4], []byte("3\n")); err != nil {
		return s.cw.N, err
	}
	return s.cw.N, z.close()
}

// alignment is the .storage_alignment record.
var alignment = []byte(strconv.Itoa(Alignment))

// recordNames are the names of an archive's fixed records, in the order Write writes
// them: data.pkl, .format_version, .storage_alignment, byteorder, then version.
func recordNames(archive string) [5]string {
	if archive == "archive" {
		return archiveNames
	}
	return joinRecords(archive)
}

var archiveNames = joinRecords("archive")

func joinRecords(archive string) [5]string {
	var out [5]string
	for i, n := range [5]string{"data.pkl", ".format_version", ".storage_alignment", "byteorder", "version"} {
		out[i] = archive + "/" + n
	}
	return out
}

// saveState is what Write needs besides the tree, recycled between calls: a DCP output
// writes one archive per item, hundreds of thousands of them, and allocating the
// pickler's maps, the encoder and the zip writer's buffers afresh for each made the
// garbage collector the conversion's largest cost near a memory limit.
type saveState struct {
	p  pickler
	z  zipWriter
	cw statedict.Counter
}

var states = sync.Pool{New: func() any {
	return &saveState{p: pickler{enc: pickle.NewEncoder(), keys: map[*statedict.Storage]string{},
		dtypes: map[*statedict.Storage]statedict.DType{}, memo: map[any]uint32{}},
		z: zipWriter{crc: crc32.NewIEEE()}}
}}

// release forgets what the state refers to (the tree, the caller's functions and writer)
// and returns it to the pool.
func (s *saveState) release() {
	p := &s.p
	p.enc.Reset()
	clear(p.keys)
	clear(p.dtypes)
	clear(p.memo)
	clear(p.order)
	p.order = p.order[:0]
	p.loc, p.kept, p.data, p.err = nil, nil, false, nil
	s.z.reset()
	s.cw = statedict.Counter{}
	states.Put(s)
}

// pickler turns a statedict tree into torch.save's pickle.
type pickler struct {
	enc    *pickle.Encoder
	keys   map[*statedict.Storage]string
	dtypes map[*statedict.Storage]statedict.DType
	order  []*statedict.Storage
	memo   map[any]uint32
	loc    func(*statedict.Storage) string
	err    error // first error raised while emitting argument tuples
	// kept is told each object written that torch.load(weights_only=True) refuses; nil
	// makes such an object an error.
	kept func(name string, o *statedict.Object)
	data bool // SaveOptions.Data
}

var (
	gOrderedDict   = pickle.Global{Module: "collections", Name: "OrderedDict"}
	gCounter       = pickle.Global{Module: "collections", Name: "Counter"}
	gRebuildV2     = pickle.Global{Module: "torch._utils", Name: "_rebuild_tensor_v2"}
	gRebuildV3     = pickle.Global{Module: "torch._utils", Name: "_rebuild_tensor_v3"}
	gRebuildParam  = pickle.Global{Module: "torch._utils", Name: "_rebuild_parameter"}
	gRebuildParamS = pickle.Global{Module: "torch._utils", Name: "_rebuild_parameter_with_state"}
	gRebuildQ      = pickle.Global{Module: "torch._utils", Name: "_rebuild_qtensor"}
	gFromType      = pickle.Global{Module: "torch._tensor", Name: "_rebuild_from_type_v2"}
	gUntyped       = pickle.Global{Module: "torch.storage", Name: "UntypedStorage"}
)

// splitGlobal turns "module.name" into a Global (the name is the last component).
func splitGlobal(class string) pickle.Global {
	i := strings.LastIndexByte(class, '.')
	if i < 0 {
		return pickle.Global{Module: "builtins", Name: class}
	}
	return pickle.Global{Module: class[:i], Name: class[i+1:]}
}

func (p *pickler) memoized(v any) bool {
	if i, ok := p.memo[v]; ok {
		p.enc.Get(i)
		return true
	}
	return false
}

func (p *pickler) put(v any) { p.memo[v] = p.enc.Put() }

func (p *pickler) emptyOrderedDict() {
	p.enc.Global(gOrderedDict)
	p.enc.Op(pickle.OpEmptyTuple)
	p.enc.Op(pickle.OpReduce)
}

func (p *pickler) value(v statedict.Value, name string) error {
	e := p.enc
	switch x := v.(type) {
	case nil:
		e.None()
	case bool:
		e.Bool(x)
	case int64:
		e.Int(x)
	case *big.Int:
		e.BigInt(x)
	case float64:
		e.Float(x)
	case string:
		e.String(x)
	case []byte:
		e.PyBytes(x)
	case complex128:
		e.Global(pickle.Global{Module: "builtins", Name: "complex"})
		e.Float(real(x))
		e.Float(imag(x))
		e.Op(pickle.OpTuple2)
		e.Op(pickle.OpReduce)
	case statedict.DType:
		e.Global(pickle.Global{Module: "torch", Name: x.String()})
	case statedict.Tuple:
		return p.tuple(x, name)
	case *statedict.List:
		if p.memoized(x) {
			return nil
		}
		e.Op(pickle.OpEmptyList)
		p.put(x)
		return p.batch(len(x.Items), pickle.OpAppend, pickle.OpAppends, func(i int) error {
			return p.value(x.Items[i], statedict.JoinName(name, strconv.Itoa(i)))
		})
	case *statedict.Dict:
		return p.dict(x, name)
	case *statedict.Tensor:
		if p.memoized(x) {
			return nil
		}
		if err := p.tensor(x, name); err != nil {
			return err
		}
		p.put(x)
	case *statedict.Object:
		return p.object(x, name)
	case *statedict.NDArray:
		return fmt.Errorf("%sa numpy array cannot be loaded by torch.load(weights_only=True); drop it or convert it to a tensor", label(name))
	default:
		return fmt.Errorf("%scannot pickle %T", label(name), v)
	}
	return nil
}

func (p *pickler) tuple(x statedict.Tuple, name string) error {
	e := p.enc
	if len(x) == 0 {
		e.Op(pickle.OpEmptyTuple)
		return nil
	}
	if len(x) > 3 {
		e.Op(pickle.OpMark)
	}
	for i, it := range x {
		if err := p.value(it, statedict.JoinName(name, strconv.Itoa(i))); err != nil {
			return err
		}
	}
	e.Op([]byte{pickle.OpTuple, pickle.OpTuple1, pickle.OpTuple2, pickle.OpTuple3}[min(len(x), 4)%4])
	return nil
}

// batch emits n items with MARK … multi-op in batches of 1000, or single-op for a batch
// of one, as Python's pickler does.
func (p *pickler) batch(n int, single, multi byte, item func(int) error) error {
	for start := 0; start < n; start += 1000 {
		end := min(start+1000, n)
		if end-start > 1 {
			p.enc.Op(pickle.OpMark)
		}
		for i := start; i < end; i++ {
			if err := item(i); err != nil {
				return err
			}
		}
		if end-start > 1 {
			p.enc.Op(multi)
		} else {
			p.enc.Op(single)
		}
	}
	return nil
}

func (p *pickler) dict(x *statedict.Dict, name string) error {
	if p.memoized(x) {
		return nil
	}
	e := p.enc
	switch x.Class {
	case "":
		e.Op(pickle.OpEmptyDict)
	case "collections.OrderedDict":
		p.emptyOrderedDict()
	case "collections.Counter": // Counter(), then SETITEMS, which torch allows on a Counter
		e.Global(gCounter)
		e.Op(pickle.OpEmptyTuple)
		e.Op(pickle.OpReduce)
	default:
		return fmt.Errorf("%sa %s cannot be loaded by torch.load(weights_only=True)", label(name), x.Class)
	}
	p.put(x)
	if err := p.setItems(x.Entries(), name); err != nil {
		return err
	}
	return p.build(x.Attrs, name)
}

// setItems writes the entries of the dict on the stack (SETITEM, or SETITEMS in batches),
// each value named under name by its key.
func (p *pickler) setItems(ents []statedict.Entry, name string) error {
	return p.batch(len(ents), pickle.OpSetItem, pickle.OpSetItems, func(i int) error {
		if err := p.value(ents[i].Key, name); err != nil {
			return err
		}
		return p.value(ents[i].Value, statedict.JoinName(name, statedict.KeyString(ents[i].Key)))
	})
}

// build sets the state of the object on the stack (BUILD) when it has one.
func (p *pickler) build(state statedict.Value, name string) error {
	if state == nil {
		return nil
	}
	if err := p.value(state, name); err != nil {
		return err
	}
	p.enc.Op(pickle.OpBuild)
	return nil
}

// object pickles x as the source pickle made it: its class, the call (REDUCE, NEWOBJ,
// NEWOBJ_EX, or none for a class used as a value), the arguments, the items added to it and
// its state, memoised so a shared object stays shared. Objects outside torch's weights_only
// allowlist are written only when the caller accepts them (they are reported through Kept),
// never one Python's pickle would run as known code (pickle.Dangerous).
func (p *pickler) object(x *statedict.Object, name string) error {
	if p.memoized(x) {
		return nil
	}
	g := objectGlobal(x)
	if !pickle.Allowed(g) {
		if why, bad := pickle.Dangerous(g); bad {
			return fmt.Errorf("%s%w: %s is code Python would run (%s); it is never written", label(name), ckpterr.ErrDangerous, x.Class, why)
		}
		if strings.Contains(g.Name, ".") {
			return fmt.Errorf("%s%w: %s is a nested class, which a protocol-2 pickle cannot name", label(name), ckpterr.ErrUnsupported, x.Class)
		}
		switch {
		case p.data && pickle.IsModeled(g):
		case p.kept == nil:
			return fmt.Errorf("%s%s cannot be loaded by torch.load(weights_only=True)", label(name), x.Class)
		default:
			p.kept(name, x)
		}
	}
	e := p.enc
	e.Global(g)
	switch x.Call {
	case statedict.CallRef:
		return nil
	case statedict.CallBuild:
		if err := p.value(x.State, name); err != nil {
			return err
		}
		e.Op(pickle.OpBuild)
		p.put(x)
		return nil
	}
	if err := p.tuple(statedict.Tuple(x.Args), name); err != nil {
		return err
	}
	switch x.Call {
	case statedict.CallNew:
		e.Op(pickle.OpNewObj)
	case statedict.CallNewEx:
		kw := x.Kwargs
		if kw == nil {
			kw = statedict.NewDict("")
		}
		if err := p.dict(kw, name); err != nil {
			return err
		}
		e.Op(pickle.OpNewObjEx)
	default:
		e.Op(pickle.OpReduce)
	}
	p.put(x)
	if len(x.ListItems) > 0 {
		err := p.batch(len(x.ListItems), pickle.OpAppend, pickle.OpAppends, func(i int) error {
			return p.value(x.ListItems[i], statedict.JoinName(name, strconv.Itoa(i)))
		})
		if err != nil {
			return err
		}
	}
	if x.DictItems != nil && x.DictItems.Len() > 0 {
		if err := p.setItems(x.DictItems.Entries(), name); err != nil {
			return err
		}
	}
	return p.build(x.State, name)
}

// objectGlobal is the global naming x's class, as its pickle named it when known.
func objectGlobal(x *statedict.Object) pickle.Global {
	if x.Module != "" && strings.HasPrefix(x.Class, x.Module+".") {
		return pickle.Global{Module: x.Module, Name: x.Class[len(x.Module)+1:]}
	}
	return splitGlobal(x.Class)
}

// label prefixes a message with the value's flattened name, if it has one.
func label(name string) string {
	if name == "" {
		return ""
	}
	return name + ": "
}

// tensor emits the rebuild call for t, wrapped for parameters and subclasses.
func (p *pickler) tensor(t *statedict.Tensor, name string) error {
	e := p.enc
	if t.Foreign != "" {
		return fmt.Errorf("%sdtype %s has no torch equivalent", label(name), t.Foreign)
	}
	switch {
	case t.Class != "" || (t.Attrs != nil && !t.Parameter):
		cls := "torch.Tensor"
		if t.Class != "" {
			cls = t.Class
		}
		if t.Parameter && t.Class == "" {
			cls = "torch.nn.parameter.Parameter"
		}
		g := splitGlobal(cls)
		if !pickle.Allowed(g) {
			return fmt.Errorf("%stensor subclass %s cannot be loaded by torch.load(weights_only=True)", label(name), cls)
		}
		inner := *t
		inner.Class, inner.Attrs, inner.Parameter = "", nil, false
		e.Global(gFromType)
		e.Op(pickle.OpMark)
		fn, args, err := p.rebuildArgs(&inner, name)
		if err != nil {
			return err
		}
		e.Global(fn)
		e.Global(g)
		args()
		if t.Attrs != nil {
			if err := p.value(t.Attrs, name); err != nil {
				return err
			}
		} else {
			e.Op(pickle.OpEmptyDict)
		}
		e.Op(pickle.OpTuple)
		e.Op(pickle.OpReduce)
		return nil
	case t.Parameter:
		inner := *t
		inner.Parameter, inner.Attrs = false, nil
		if t.Attrs != nil {
			e.Global(gRebuildParamS)
		} else {
			e.Global(gRebuildParam)
		}
		e.Op(pickle.OpMark)
		if err := p.plain(&inner, name); err != nil {
			return err
		}
		e.Bool(t.RequiresGrad)
		p.emptyOrderedDict()
		if t.Attrs != nil {
			if err := p.value(t.Attrs, name); err != nil {
				return err
			}
		}
		e.Op(pickle.OpTuple)
		e.Op(pickle.OpReduce)
		return nil
	}
	return p.plain(t, name)
}

// plain emits fn(*args) REDUCE for a tensor without wrappers.
func (p *pickler) plain(t *statedict.Tensor, name string) error {
	fn, args, err := p.rebuildArgs(t, name)
	if err != nil {
		return err
	}
	p.enc.Global(fn)
	args()
	p.enc.Op(pickle.OpReduce)
	return nil
}

// rebuildArgs chooses the rebuild function for t and returns it with a function that emits
// its argument tuple.
func (p *pickler) rebuildArgs(t *statedict.Tensor, name string) (pickle.Global, func(), error) {
	if t.Storage == nil {
		return pickle.Global{}, nil, fmt.Errorf("%stensor has no storage", label(name))
	}
	if prev, ok := p.dtypes[t.Storage]; ok && prev != t.DType {
		return pickle.Global{}, nil, fmt.Errorf("%sviews its storage as %s while another tensor views it as %s; torch cannot save that", label(name), t.DType, prev)
	}
	if err := t.Validate(); err != nil {
		return pickle.Global{}, nil, fmt.Errorf("%s%w", label(name), err)
	}
	if t.DType.Kind() == statedict.KindQuantized {
		return p.qtensorArgs(t, name)
	}
	e := p.enc
	v3 := t.DType.StorageClass() == ""
	fn := gRebuildV2
	if v3 {
		fn = gRebuildV3
	}
	return fn, func() {
		e.Op(pickle.OpMark)
		p.persistentID(t)
		p.view(t)
		e.Bool(t.RequiresGrad)
		p.emptyOrderedDict()
		if v3 {
			e.Global(pickle.Global{Module: "torch", Name: t.DType.String()})
		}
		if t.Conj || t.Neg {
			e.Op(pickle.OpEmptyDict)
			e.Op(pickle.OpMark)
			if t.Conj {
				e.String("conj")
				e.Bool(true)
			}
			if t.Neg {
				e.String("neg")
				e.Bool(true)
			}
			e.Op(pickle.OpSetItems)
		}
		e.Op(pickle.OpTuple)
	}, nil
}

func (p *pickler) view(t *statedict.Tensor) {
	e := p.enc
	e.Int(t.Offset)
	for _, dims := range [][]int64{t.Shape, t.Strides} {
		tup := make(statedict.Tuple, len(dims))
		for i, d := range dims {
			tup[i] = d
		}
		_ = p.tuple(tup, "")
	}
}

// persistentID emits ('storage', class, key, location, numel) BINPERSID, assigning keys in
// first-use order as torch does.
func (p *pickler) persistentID(t *statedict.Tensor) {
	e := p.enc
	st := t.Storage
	key, ok := p.keys[st]
	if !ok {
		key = strconv.Itoa(len(p.order))
		p.keys[st] = key
		p.order = append(p.order, st)
		p.dtypes[st] = t.DType
	}
	loc := st.Location
	if p.loc != nil {
		loc = p.loc(st)
	}
	e.Op(pickle.OpMark)
	e.String("storage")
	numel := st.Size
	if class := t.DType.StorageClass(); class != "" {
		e.Global(pickle.Global{Module: "torch", Name: class})
		if t.DType.ValuesPerByte() == 1 {
			numel = st.Size / int64(t.DType.Size())
		}
	} else {
		e.Global(gUntyped)
	}
	e.String(key)
	e.String(loc)
	e.Int(numel)
	e.Op(pickle.OpTuple)
	e.Op(pickle.OpBinPersID)
}

// qtensorArgs emits _rebuild_qtensor(storage, offset, size, stride, qparams, requires_grad,
// OrderedDict()).
func (p *pickler) qtensorArgs(t *statedict.Tensor, name string) (pickle.Global, func(), error) {
	q := t.Quantizer
	if q == nil {
		return pickle.Global{}, nil, fmt.Errorf("%squantized %s tensor without quantizer", label(name), t.DType)
	}
	var qerr error
	emit := func() {
		e := p.enc
		e.Op(pickle.OpMark)
		p.persistentID(t)
		p.view(t)
		switch q.Scheme {
		case "per_tensor_affine", "per_tensor_symmetric":
			e.Global(pickle.Global{Module: "torch", Name: q.Scheme})
			e.Float(q.Scale)
			e.Int(q.ZeroPoint)
			e.Op(pickle.OpTuple3)
		case "per_channel_affine", "per_channel_symmetric", "per_channel_affine_float_qparams":
			scheme := q.Scheme
			if scheme == "per_channel_affine_float_qparams" {
				scheme = "per_channel_affine" // as torch writes it; zero-point dtype tells
			}
			e.Op(pickle.OpMark)
			e.Global(pickle.Global{Module: "torch", Name: scheme})
			if err := p.value(q.Scales, name+".q_scales"); err != nil {
				qerr = err
			}
			if err := p.value(q.ZeroPoints, name+".q_zero_points"); err != nil {
				qerr = err
			}
			e.Int(q.Axis)
			e.Op(pickle.OpTuple)
		default:
			qerr = fmt.Errorf("%sunknown qscheme %s", label(name), q.Scheme)
		}
		e.Bool(t.RequiresGrad)
		p.emptyOrderedDict()
		e.Op(pickle.OpTuple)
	}
	return gRebuildQ, func() {
		emit()
		if qerr != nil && p.err == nil {
			p.err = qerr
		}
	}, nil
}

// WriteCheckpoint is the statedict.Writer of torch.save files: ck's tree as one zip
// archive (Write), in out's one file, whose name gives the archive's folder as torch.save
// names it.
func WriteCheckpoint(out statedict.Output, ck *statedict.Checkpoint, opts statedict.WriteOptions) (*statedict.Written, error) {
	f, err := out.Create("")
	if err != nil {
		return nil, err
	}
	so := SaveOptions{ArchiveName: ArchiveName(out.Name())}
	if opts.Sum != nil {
		so.Sum = func(st *statedict.Storage) hash.Hash { return opts.Sum(st) }
	}
	w := &statedict.Written{Files: []string{filepath.Base(out.Name())}}
	if !opts.WeightsOnly {
		so.Kept = KeptInto(&w.Kept)
	}
	n, err := Write(f, ck.Root, so)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	w.Bytes = n
	return w, nil
}

// KeptInto returns a SaveOptions.Kept that lists each object kept in *list as
// "name: class", once per name.
func KeptInto(list *[]string) func(string, *statedict.Object) {
	seen := map[string]bool{}
	return func(name string, o *statedict.Object) {
		if name == "" {
			name = "(root)"
		}
		if !seen[name] {
			seen[name] = true
			*list = append(*list, name+": "+o.Class)
		}
	}
}

// ArchiveName is the folder torch.save uses inside a zip written to path: the file name
// without its last extension, or "archive" when that is empty or not ASCII.
func ArchiveName(path string) string {
	base := filepath.Base(path)
	if ext := filepath.Ext(base); ext != "" && ext != base {
		base = strings.TrimSuffix(base, ext)
	}
	if base == "" || !isASCII(base) {
		return "archive"
	}
	return base
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
