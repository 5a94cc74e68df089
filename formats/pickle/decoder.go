package pickle

import (
	"errors"
	"fmt"
	"io"
)

// Options configures a [Decoder].
type Options struct {
	// PersistentLoad resolves persistent ids (BINPERSID, PERSID). It gets
	// the decoded pid (for torch zip checkpoints a Tuple such as
	// ("storage", Global torch.FloatStorage, "0", "cpu", int64(6)); for
	// PERSID a string) and returns the value to use in its place. If nil,
	// a persistent id is an error.
	PersistentLoad func(pid Value) (Value, error)
	// Reduce, if set, is offered every REDUCE of a global that is not one of the
	// pure-data constructors, with the arguments as they are at that point in the
	// stream (when Python would make the call). It returns the value to use and
	// true, or false to record the call as an inert *Object. A consumer that
	// interprets a call anyway (torch's tensor rebuild functions) can so build its
	// result at once and let the arguments be collected instead of holding a whole
	// decoded tree. The value is opaque to the decoder: BUILD on it is an error.
	Reduce func(g Global, args Tuple) (Value, bool, error)
	// Limits bounds the resources a pickle may claim; zero fields take the
	// values of DefaultLimits.
	Limits Limits
	// Strict makes any global outside Allowed and Allow an error
	// ([*DisallowedError]), like torch.load(weights_only=True). Globals of
	// the modules sys, os, posix and nt are refused even if listed in Allow.
	Strict bool
	// Allow lists extra globals accepted in Strict mode (for example the
	// DCP metadata dataclasses), given after Python 2→3 renaming.
	Allow []Global
	// ForgetUnfetched keeps in the memo only the entries a later GET fetches: before
	// decoding a pickle the decoder walks its opcodes once to find them. A pickle that
	// memoizes every value (as Python's pickler does) and fetches few of them is then
	// decoded without the memo holding the whole tree. Results and errors are the same.
	ForgetUnfetched bool
	// Build, if set, is offered every *Object a BUILD set the State of, when an opcode
	// takes it off the stack into a tuple, list, dict, set or object state (or STOP
	// returns it) and nothing else can refer to it: it was neither DUP'd nor put in the
	// memo at an index a GET fetches (with ForgetUnfetched unset every memoized object
	// counts as fetched). It returns the value to use in the object's place and true — a
	// consumer so reduces each record to its own compact form as the stream builds it —
	// or false to keep the object. Offered only then, a returned value is never on the
	// stack, in the memo or referred to twice, so a decode reads the same with and
	// without the hook: a later BUILD, DUP or PUT meets the object itself. A value Build
	// returns is a dict key that equals no other (see [Opaque]); a pointer of another
	// type is a key by identity.
	Build func(o *Object) (Value, bool, error)
	// SetItem, if set, is offered every item SETITEM, SETITEMS or DICT puts into a dict,
	// once the decoder has checked and charged it. It returns true to take the item: the
	// dict does not store it, and the consumer keeps it in its own form (and owes the
	// dict's semantics: a key put again replaces the value in place). A consumer so
	// collects a dict of hundreds of thousands of records without the dict's slots and
	// index; it can give the items back (Dict.TrySet) if the dict turns out to be
	// something else. It can keep what it took in d.Claim, so that the items of a dict
	// the pickle discards are collected with the dict.
	SetItem func(d *Dict, key, val Value) (bool, error)
}

// Limits bounds what a pickle may make the decoder allocate. Every limit is
// checked before the allocation it guards, so a length field of 2^62 costs
// nothing. Exceeding one is an [*ckpterr.FormatError] wrapping a [*LimitError].
type Limits struct {
	// MaxMemo is the number of memo entries per pickle.
	MaxMemo int
	// MaxStack is the number of values on the stack (all marks together).
	MaxStack int
	// MaxMarkDepth is the number of MARKs open at once.
	MaxMarkDepth int
	// MaxStringLen bounds one str (and one text-opcode line) in bytes.
	MaxStringLen int64
	// MaxBytesLen bounds one bytes or bytearray value.
	MaxBytesLen int64
	// MaxAlloc bounds the total charged across all Decode calls of a
	// Decoder: the bytes of every str, bytes, bytearray and big int, 16
	// per item held by a container, tuple, memo entry or dict key, 64 per
	// container or object, and the canonical encodings of non-str dict keys.
	MaxAlloc int64
	// MaxLongBytes bounds the two's-complement length of one LONG1/LONG4
	// integer; text INT/LONG literals may have up to 2.5 digits per byte.
	MaxLongBytes int
	// MaxContainerItems bounds the items of one tuple, list, dict or set.
	MaxContainerItems int64
	// MaxDepth bounds how deeply values nest (a tuple holding a tuple holding … is as
	// deep as its chain). Each value's depth is tracked as the pickle builds it, so a
	// value nested too deep is refused at the opcode that builds it, before the rest of a
	// deep chain exists — a chain built through the memo needs no MARK per level.
	MaxDepth int
}

// DefaultLimits returns limits generous enough for real checkpoints: total
// allocation 1 GiB, strings 256 MiB, bytes 1 GiB, memo 1<<24 entries, stack
// 1<<20 values, 10000 nested marks, values nested 10000 deep, 16 KiB integers
// and 1<<26 items per container.
func DefaultLimits() Limits {
	return Limits{
		MaxMemo:           1 << 24,
		MaxStack:          1 << 20,
		MaxMarkDepth:      10000,
		MaxStringLen:      256 << 20,
		MaxBytesLen:       1 << 30,
		MaxAlloc:          1 << 30,
		MaxLongBytes:      1 << 14,
		MaxContainerItems: 1 << 26,
		MaxDepth:          10000,
	}
}

// withDefaults replaces zero (or negative) fields by their defaults.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxMemo <= 0 {
		l.MaxMemo = d.MaxMemo
	}
	if l.MaxStack <= 0 {
		l.MaxStack = d.MaxStack
	}
	if l.MaxMarkDepth <= 0 {
		l.MaxMarkDepth = d.MaxMarkDepth
	}
	if l.MaxStringLen <= 0 {
		l.MaxStringLen = d.MaxStringLen
	}
	if l.MaxBytesLen <= 0 {
		l.MaxBytesLen = d.MaxBytesLen
	}
	if l.MaxAlloc <= 0 {
		l.MaxAlloc = d.MaxAlloc
	}
	if l.MaxLongBytes <= 0 {
		l.MaxLongBytes = d.MaxLongBytes
	}
	if l.MaxContainerItems <= 0 {
		l.MaxContainerItems = d.MaxContainerItems
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = d.MaxDepth
	}
	return l
}

// Allocation charges (see Limits.MaxAlloc).
const (
	itemCost   = 16
	objectCost = 64
	// takenCost is charged for an item a SetItem hook takes, on top of its itemCost: what
	// the consumer's typed record of it costs (a DCP storage entry is ~100 bytes).
	takenCost = 128
)

// Decoder decodes pickles from a byte slice. It is not safe for concurrent
// use.
type Decoder struct {
	r     reader
	opts  Options
	lim   Limits
	allow map[Global]bool
	alloc int64

	// State of the pickle being decoded.
	stack []Value
	marks []int
	memo  memo[Value]
	// depths[i] is how deeply stack[i] nests (0 for a scalar), memoDepths the same for
	// the memo's values; pending is 1 + the deepest value the current opcode popped,
	// the depth of what it builds from them (see Limits.MaxDepth).
	depths     []int32
	memoDepths memo[int32]
	// With Options.ForgetUnfetched: fetched numbers the memo indices GETs fetch (memo
	// and memoDepths hold only those, at their slots); skipped records the others put.
	fetched *fetchedSet
	skipped memo[struct{}]
	// shared holds the objects memoized at fetched indices or DUP'd, which Options.Build
	// is not offered.
	shared  map[*Object]bool
	pending int32
	proto   int
	// latin1 holds the Python 2 strs of this pickle that were not valid
	// UTF-8 and were decoded as latin-1, so that numpy raw data pickled as
	// a Python 2 str can be turned back into its bytes.
	latin1 map[string]struct{}
}

// NewDecoder returns a Decoder reading pickles from data, starting at offset 0.
func NewDecoder(data []byte, opts Options) *Decoder {
	return newDecoder(reader{data: data}, opts)
}

// NewDecoderAt returns a Decoder reading pickles from the size bytes of src, starting at
// offset 0. It reads src a window at a time: a pickle larger than the memory it may take
// is decoded without being held whole.
func NewDecoderAt(src io.ReaderAt, size int64, opts Options) *Decoder {
	return newDecoder(reader{src: src, size: size}, opts)
}

func newDecoder(r reader, opts Options) *Decoder {
	d := &Decoder{r: r, opts: opts, lim: opts.Limits.withDefaults()}
	if len(opts.Allow) > 0 {
		d.allow = make(map[Global]bool, len(opts.Allow))
		for _, g := range opts.Allow {
			d.allow[g] = true
		}
	}
	return d
}

// Offset returns the offset in data where the next Decode starts: just past
// the STOP of the last pickle decoded.
func (d *Decoder) Offset() int64 { return d.r.offset() }

// Decode decodes one pickle starting at the decoder's current offset and
// stops after its STOP opcode. Several pickles can follow each other in data
// (the legacy torch format); call Decode again for the next one. At the end
// of data Decode returns a *ckpterr.FormatError wrapping io.EOF. On error the offset is
// left at the failing opcode.
func (d *Decoder) Decode() (Value, error) {
	d.stack = d.stack[:0]
	d.depths = d.depths[:0]
	d.marks = d.marks[:0]
	d.memo.reset()
	d.memoDepths.reset()
	d.skipped.reset()
	d.shared = nil
	d.fetched = nil
	if d.opts.ForgetUnfetched {
		d.fetched = findFetched(d.r, d.lim)
	}
	d.proto = 0
	d.latin1 = nil
	start := d.r.offset()
	if d.r.remaining() == 0 {
		return nil, errorAt(start, noOp, io.EOF)
	}
	for {
		off := d.r.offset()
		if d.r.remaining() == 0 {
			return nil, errorAt(off, noOp, fmt.Errorf("pickle starting at offset %d has no STOP: %w", start, io.ErrUnexpectedEOF))
		}
		op, err := d.r.u1()
		if err != nil {
			return nil, errorAt(off, noOp, err)
		}
		if op == opStop {
			v, err := d.popN(1)
			if err == nil {
				err = d.build(v)
			}
			if err != nil {
				d.r.seek(off)
				return nil, errorAt(off, int(op), err)
			}
			return v[0], nil
		}
		d.pending = 0
		if err := d.step(op); err != nil {
			d.r.seek(off)
			return nil, errorAt(off, int(op), err)
		}
	}
}

// charge accounts n bytes against Limits.MaxAlloc.
func (d *Decoder) charge(n int64, what string) error {
	if n < 0 || n > d.lim.MaxAlloc-d.alloc {
		return &LimitError{Limit: "MaxAlloc", What: fmt.Sprintf("%s (total allocation %d + %d bytes)", what, d.alloc, n), Max: d.lim.MaxAlloc}
	}
	d.alloc += n
	return nil
}

// chargeItems checks a container growing to total items and charges n new items.
func (d *Decoder) chargeItems(total, n int, what string) error {
	if int64(total) > d.lim.MaxContainerItems {
		return &LimitError{Limit: "MaxContainerItems", What: fmt.Sprintf("%s of %d items", what, total), Max: d.lim.MaxContainerItems}
	}
	return d.charge(int64(n)*itemCost, what)
}

// fence is the lowest stack index the current opcode may pop: the position
// of the innermost MARK.
func (d *Decoder) fence() int {
	if n := len(d.marks); n > 0 {
		return d.marks[n-1]
	}
	return 0
}

func (d *Decoder) push(v Value) error {
	if len(d.stack) >= d.lim.MaxStack {
		return &LimitError{Limit: "MaxStack", What: fmt.Sprintf("stack of %d values", len(d.stack)+1), Max: int64(d.lim.MaxStack)}
	}
	if err := d.checkDepth(d.pending); err != nil {
		return err
	}
	d.stack = append(d.stack, v)
	d.depths = append(d.depths, d.pending)
	return nil
}

// checkDepth refuses a value nested depth levels deep beyond Limits.MaxDepth.
func (d *Decoder) checkDepth(depth int32) error {
	if int(depth) > d.lim.MaxDepth {
		return &LimitError{Limit: "MaxDepth", What: fmt.Sprintf("value nested deeper than %d levels", d.lim.MaxDepth), Max: int64(d.lim.MaxDepth)}
	}
	return nil
}

// popped notes the depths of values the current opcode popped: what it builds from
// them nests one level deeper than the deepest.
func (d *Decoder) popped(depths []int32) {
	for _, x := range depths {
		d.pending = max(d.pending, x+1)
	}
}

func (d *Decoder) pop() (Value, error) {
	n := len(d.stack)
	if n <= d.fence() {
		return nil, errUnderflow
	}
	v := d.stack[n-1]
	d.stack[n-1] = nil
	d.stack = d.stack[:n-1]
	d.popped(d.depths[n-1:])
	d.depths = d.depths[:n-1]
	return v, nil
}

// popN pops n values and returns them in stack order. The slice aliases the
// stack: use it before the next push.
func (d *Decoder) popN(n int) ([]Value, error) {
	l := len(d.stack)
	if l-n < d.fence() {
		return nil, errUnderflow
	}
	d.stack = d.stack[:l-n]
	d.popped(d.depths[l-n:])
	d.depths = d.depths[:l-n]
	return d.stack[l-n : l : l], nil
}

// top returns the value on top of the stack, which the current opcode may fill
// with the values it popped (APPEND, SETITEMS, BUILD, …): its depth grows to
// theirs plus one.
func (d *Decoder) top() (Value, error) {
	n := len(d.stack)
	if n <= d.fence() {
		return nil, errUnderflow
	}
	if d.pending > d.depths[n-1] {
		if err := d.checkDepth(d.pending); err != nil {
			return nil, err
		}
		d.depths[n-1] = d.pending
	}
	return d.stack[n-1], nil
}

// popMark pops everything above the innermost MARK, and the MARK. The slice
// aliases the stack: use it before the next push.
func (d *Decoder) popMark() ([]Value, error) {
	n := len(d.marks)
	if n == 0 {
		return nil, errors.New("could not find MARK")
	}
	m := d.marks[n-1]
	d.marks = d.marks[:n-1]
	items := d.stack[m:len(d.stack):len(d.stack)]
	d.stack = d.stack[:m]
	d.popped(d.depths[m:])
	d.depths = d.depths[:m]
	return items, nil
}

func (d *Decoder) pushMark() error {
	if len(d.marks) >= d.lim.MaxMarkDepth {
		return &LimitError{Limit: "MaxMarkDepth", What: fmt.Sprintf("%d nested marks", len(d.marks)+1), Max: int64(d.lim.MaxMarkDepth)}
	}
	d.marks = append(d.marks, len(d.stack))
	return nil
}

// memoPut stores v, which nests depth levels deep, at memo index i, enforcing
// MaxMemo and charging new entries.
func (d *Decoder) memoPut(i uint64, v Value, depth int32) error {
	slot, keep := i, true
	if d.fetched != nil {
		slot, keep = d.fetched.slot(i)
	}
	if keep && !d.memo.has(slot) || !keep && !d.skipped.has(i) {
		if n := d.memoLen(); n >= d.lim.MaxMemo {
			return &LimitError{Limit: "MaxMemo", What: fmt.Sprintf("memo of %d entries", n+1), Max: int64(d.lim.MaxMemo)}
		}
		if err := d.charge(itemCost, "memo entry"); err != nil {
			return err
		}
	}
	if !keep {
		d.skipped.put(i, struct{}{})
		return nil
	}
	d.memo.put(slot, v)
	d.memoDepths.put(slot, depth)
	d.share(v)
	return nil
}

// share notes that v, if an object, has a second reference (a fetched memo entry, a
// DUP): Options.Build is not offered it.
func (d *Decoder) share(v Value) {
	if o, ok := v.(*Object); ok && d.opts.Build != nil {
		if d.shared == nil {
			d.shared = map[*Object]bool{}
		}
		d.shared[o] = true
	}
}

// build offers Options.Build the objects among items, values an opcode takes off the
// stack into a container, that a BUILD completed and nothing else refers to, and puts
// what it returns in their place (items may alias the stack).
func (d *Decoder) build(items []Value) error {
	if d.opts.Build == nil {
		return nil
	}
	for i, v := range items {
		o, ok := v.(*Object)
		if !ok || o.State == nil || d.shared[o] {
			continue
		}
		r, ok, err := d.opts.Build(o)
		if err != nil {
			return err
		}
		if ok {
			items[i] = r
		}
	}
	return nil
}

// memoLen is the number of memo entries, kept or not: the index MEMOIZE uses.
func (d *Decoder) memoLen() int { return d.memo.len() + d.skipped.len() }

// memoGet returns the memo entry at index i and its depth.
func (d *Decoder) memoGet(i uint64) (Value, int32, bool) {
	if d.fetched != nil {
		var ok bool
		if i, ok = d.fetched.slot(i); !ok {
			return nil, 0, false
		}
	}
	v, ok := d.memo.get(i)
	depth, _ := d.memoDepths.get(i)
	return v, depth, ok
}

// allowed reports whether a global passes the Strict check.
func (d *Decoder) allowed(g Global) bool {
	if neverAllowed[g.Module] {
		return false
	}
	return Allowed(g) || d.allow[g]
}
