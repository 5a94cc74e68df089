package statedict

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"strconv"
	"unsafe"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/storage"
)

// Storage is a flat run of bytes that one or more tensors view, as torch's UntypedStorage.
// Tensors that share a *Storage share memory in torch (tied weights, views).
type Storage struct {
	// Key identifies the storage within its checkpoint (the `data/<key>` record of a
	// torch.save file, or a name derived from the tensor for formats without sharing).
	Key string
	// Location is the device tag the storage was saved with ("cpu", "cuda:0", "tpu").
	Location string
	// Size is the length in bytes.
	Size int64
	// File names where the bytes live, for error messages.
	File string
	// Offset is the byte offset of the storage within File, for error messages.
	Offset int64
	// DType is the element type the storage was saved as: the typed storage class of the
	// persistent id (FloatStorage → Float32), or Uint8 for torch.storage.UntypedStorage.
	// (The small fields sit together so that the struct packs into fewer bytes.)
	DType DType
	// BigEndian is set when the saver recorded big-endian element order; reading converts.
	BigEndian bool
	// FileBacked says the storage's bytes are exactly File[Offset:Offset+Size], as stored
	// (not decompressed or computed), so writers may read them from the file (fastcopy's
	// pread) instead of faulting the mapping in.
	FileBacked bool

	// data points at Size zero-copy bytes (a slice of an mmap'd file: a pointer, not a
	// slice, so that the struct packs into 96 bytes — a checkpoint may hold hundreds of
	// thousands of storages), or
	data unsafe.Pointer
	ra   io.ReaderAt // a reader with the bytes at [Offset, Offset+Size)
}

// NewMappedStorage returns a storage over bytes already in memory, typically a slice of an
// mmap'd file; reading it copies nothing.
func NewMappedStorage(key, location string, dtype DType, data []byte) *Storage {
	return &Storage{Key: key, Location: location, DType: dtype, Size: int64(len(data)), data: unsafe.Pointer(unsafe.SliceData(data))}
}

// NewReaderStorage returns a storage whose bytes are read on demand from r at
// [offset, offset+size). When r is a Windower the storage reads through r's window on that
// range.
func NewReaderStorage(key, location string, dtype DType, r io.ReaderAt, offset, size int64) *Storage {
	if w, ok := storage.As[Windower](r); ok {
		r = w.Window(offset, size)
	}
	return &Storage{Key: key, Location: location, DType: dtype, Size: size, ra: r, Offset: offset}
}

// Windower is an io.ReaderAt (a remote object) that can serve a reader who will read the
// range [off, off+n) and nothing else: the window it returns takes the same offsets, and
// may fetch ahead of a reader streaming through the range but never past its end, so
// reading one storage does not fetch the bytes of the next.
type Windower interface {
	Window(off, n int64) io.ReaderAt
}

// Prefetcher is a storage's reader (a remote object's window) that can start fetching
// the storage's first bytes before they are read.
type Prefetcher interface {
	Prefetch()
}

// Prefetch asks the reader of the tensor's storage to start fetching its first bytes,
// when it can (a window of a remote object): a writer going from tensor to tensor calls
// it for the next tensor while it writes the current one, so that the next one's first
// read finds its bytes on the way instead of waiting a round trip with the disk idle.
func (t *Tensor) Prefetch() {
	if t.Storage == nil {
		return
	}
	if p, ok := storage.As[Prefetcher](t.Storage.ra); ok {
		p.Prefetch()
	}
}

// A ReadPlanner is a storage's reader (a remote object's window) that can be told which
// bytes its reader is about to read whole: it then fetches ahead at full depth from the
// first read, instead of ramping up as it must for a reader that may stop early.
type ReadPlanner interface {
	WillRead(off, n int64)
}

// willRead tells the storage's reader, when it plans (ReadPlanner), that the n bytes at off
// are about to be read whole: a tensor being written.
func (s *Storage) willRead(off, n int64) {
	if p, ok := storage.As[ReadPlanner](s.ra); ok && s.data == nil {
		p.WillRead(s.Offset+off, n)
	}
}

// Mapped returns the storage bytes without copying when they are memory-resident.
func (s *Storage) Mapped() ([]byte, bool) {
	if s.data != nil {
		return unsafe.Slice((*byte)(s.data), s.Size), true
	}
	if s.ra == nil {
		return nil, true
	}
	return nil, false
}

// ReadAt reads storage bytes at off (relative to the storage start).
func (s *Storage) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > s.Size {
		return 0, fmt.Errorf("%s: storage %q: read at %d outside its %d bytes", s.File, s.Key, off, s.Size)
	}
	if rem := s.Size - off; int64(len(p)) > rem {
		p = p[:rem]
		n, err := s.ReadAt(p, off)
		if err == nil {
			err = io.EOF
		}
		return n, err
	}
	if d, ok := s.Mapped(); ok {
		return copy(p, d[off:]), nil
	}
	n, err := s.ra.ReadAt(p, s.Offset+off)
	if err == io.EOF && n == len(p) {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("%s: storage %q at byte %d: %w", s.File, s.Key, s.Offset+off, err)
	}
	return n, err
}

// Lend lends up to n of the storage's bytes at off in place when its reader does
// (Lender: a remote object's window); ok is false otherwise.
func (s *Storage) Lend(off, n int64) (b []byte, release func(), ok bool, err error) {
	l, can := storage.As[Lender](s.ra)
	if !can || s.data != nil || off < 0 || off >= s.Size {
		return nil, nil, false, nil
	}
	b, release, ok, err = l.Lend(s.Offset+off, min(n, s.Size-off))
	if err != nil {
		err = fmt.Errorf("%s: storage %q at byte %d: %w", s.File, s.Key, s.Offset+off, err)
	}
	return b, release, ok, err
}

// WriteTo streams the storage's bytes as stored: as a file range for a writer that reads
// files itself (fastcopy), from the mapping without copying when the bytes are
// memory-resident, else through a bounded buffer.
func (s *Storage) WriteTo(w io.Writer) (int64, error) {
	if d, ok := s.Mapped(); ok {
		return s.writeMapped(w, d, 0)
	}
	buf := make([]byte, min(s.Size, copyBuf))
	var done int64
	for done < s.Size {
		chunk := buf[:min(s.Size-done, int64(len(buf)))]
		if _, err := s.ReadAt(chunk, done); err != nil {
			return done, err
		}
		n, err := w.Write(chunk)
		done += int64(n)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// LocalFile is where a FileBacked storage's bytes lie as stored in a local file, for
// readers that pread them rather than fault the mapping in. A storage mapped from another
// backend's object (storage.Mem's bytes) has no local file to pread: ok is false.
func (s *Storage) LocalFile() (path string, off int64, ok bool) {
	if !s.FileBacked || s.File == "" || storage.IsRemote(s.File) {
		return "", 0, false
	}
	return s.File, s.Offset, true
}

// writeMapped writes d, which starts at byte start of the storage's mapped bytes.
func (s *Storage) writeMapped(w io.Writer, d []byte, start int64) (int64, error) {
	if file, off, ok := s.LocalFile(); ok {
		return WriteRange(w, Range{Data: d, Path: file, Off: off + start})
	}
	n, err := w.Write(d)
	return int64(n), err
}

// Quantizer holds the parameters of a torch quantized tensor (qint8, quint8, ...).
type Quantizer struct {
	// Scheme is torch's qscheme name: "per_tensor_affine", "per_channel_affine", ...
	Scheme    string
	Scale     float64 // per-tensor schemes
	ZeroPoint int64   // per-tensor schemes
	// Scales and ZeroPoints hold the per-channel parameters along Axis.
	Scales, ZeroPoints *Tensor
	Axis               int64
}

// Tensor is a strided view of a Storage, as a torch tensor is. Its bytes are read lazily:
// [Tensor.Bytes] gives its contiguous value as stored (in DType), [Tensor.WriteTo] streams
// it, and [github.com/ckpt-dev/ckpt/codec.Float32s] decodes it to float32 — every
// floating dtype exactly (bfloat16, float16, FP8, packed FP4), integers and bool
// converted — as torch's t.float() does.
type Tensor struct {
	Shape   []int64
	Strides []int64 // in elements of DType
	Offset  int64   // storage offset in elements of DType
	Storage *Storage
	// DType is the element type. (It sits beside the flags below so that the struct packs
	// into fewer bytes: a checkpoint may hold hundreds of thousands of tensors.)
	DType DType

	RequiresGrad bool
	// Parameter marks an nn.Parameter.
	Parameter bool
	// Conj and Neg are torch's lazy conjugate and negative bits: the logical value is the
	// conjugate (negation) of what the storage holds.
	Conj, Neg bool
	// Quantizer is set for quantized dtypes.
	Quantizer *Quantizer
	// Class is the Python class for tensor subclasses ("" for torch.Tensor / nn.Parameter).
	Class string
	// Attrs holds Python attributes pickled with the tensor (Parameter state, __dict__).
	Attrs Value
	// Foreign is the source format's dtype name when torch has no such dtype (safetensors
	// "F6_E2M3"). DType is then Uint8 and Shape is the byte count, so the bytes still travel.
	Foreign string
}

// DTypeName is the tensor's dtype as torch names it ("bfloat16"), or the source format's
// name for a dtype torch does not have (Foreign).
func (t *Tensor) DTypeName() string {
	if t.Foreign != "" {
		return t.Foreign
	}
	return t.DType.String()
}

// ContiguousStrides returns the row-major strides of shape.
func ContiguousStrides(shape []int64) []int64 {
	st := make([]int64, len(shape))
	acc := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= shape[i]
	}
	return st
}

// NumEl is the number of elements (1 for a 0-dim tensor).
func (t *Tensor) NumEl() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// NBytes is the size of the tensor's contiguous bytes: NumEl × element size, or the packed
// byte count for quint4x2/quint2x4.
func (t *Tensor) NBytes() int64 {
	if v := t.DType.ValuesPerByte(); v > 1 {
		return (t.NumEl() + v - 1) / v
	}
	return t.NumEl() * int64(t.DType.Size())
}

// IsContiguous reports whether the view is row-major dense (size-1 dims ignored).
func (t *Tensor) IsContiguous() bool {
	want := int64(1)
	for i := len(t.Shape) - 1; i >= 0; i-- {
		if t.Shape[i] == 1 {
			continue
		}
		if t.Strides[i] != want {
			return false
		}
		want *= t.Shape[i]
	}
	return true
}

// Validate checks that the view is well formed and lies inside its storage, so that reading
// can never go out of bounds. Readers call it on every tensor they build.
func (t *Tensor) Validate() error {
	if t.DType.Size() == 0 {
		return fmt.Errorf("invalid dtype")
	}
	if len(t.Strides) != len(t.Shape) {
		return fmt.Errorf("%d strides for %d dims", len(t.Strides), len(t.Shape))
	}
	if t.Offset < 0 {
		return fmt.Errorf("negative storage offset %d", t.Offset)
	}
	numel := uint64(1)
	for i, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("negative size %d in dim %d", d, i)
		}
		if t.Strides[i] < 0 {
			return fmt.Errorf("negative stride %d in dim %d", t.Strides[i], i)
		}
		hi, lo := bits.Mul64(numel, uint64(d))
		if hi != 0 || lo > math.MaxInt64/16 {
			return fmt.Errorf("shape %v overflows", t.Shape)
		}
		numel = lo
	}
	if numel == 0 {
		return nil
	}
	if t.Storage == nil {
		return fmt.Errorf("no storage")
	}
	if v := t.DType.ValuesPerByte(); v > 1 {
		// Packed values have no addressable elements: only whole dense storages are readable.
		if !t.IsContiguous() || t.Offset != 0 {
			return fmt.Errorf("%s view with offset %d and strides %v: packed dtypes must be dense", t.DType, t.Offset, t.Strides)
		}
		if n := t.NBytes(); n > t.Storage.Size {
			return fmt.Errorf("%d packed %s values need %d bytes, storage has %d", numel, t.DType, n, t.Storage.Size)
		}
		return nil
	}
	// Highest element index reached, in elements.
	last := uint64(t.Offset)
	for i, d := range t.Shape {
		hi, lo := bits.Mul64(uint64(d-1), uint64(t.Strides[i]))
		var c uint64
		last, c = bits.Add64(last, lo, 0)
		if hi != 0 || c != 0 || last > math.MaxInt64/16 {
			return fmt.Errorf("strides %v overflow", t.Strides)
		}
	}
	es := uint64(t.DType.Size())
	if end := (last + 1) * es; end > uint64(t.Storage.Size) {
		return fmt.Errorf("view (offset %d, shape %v, strides %v) reaches byte %d of a %d-byte storage",
			t.Offset, t.Shape, t.Strides, end, t.Storage.Size)
	}
	return nil
}

// MaxViewExpansion is how many bytes more than its storage holds a view may materialise
// (WriteTo: hashing, converting to formats without views). Only overlapping views —
// stride 0 (expand) or overlapping strides — exceed their storage: zeros(1).expand(2**36)
// is 256 GiB from 4 stored bytes. The CKPT_MAX_VIEW_EXPANSION environment variable (bytes)
// overrides it.
var MaxViewExpansion int64 = 1 << 30

// viewExpansionLimit is MaxViewExpansion, or CKPT_MAX_VIEW_EXPANSION when set.
func viewExpansionLimit() int64 {
	if s := os.Getenv("CKPT_MAX_VIEW_EXPANSION"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
			return n
		}
	}
	return MaxViewExpansion
}

// CheckView refuses to materialise a view whose logical bytes exceed its storage's by
// more than the limit.
func (t *Tensor) CheckView() error {
	if t.Storage == nil {
		return nil
	}
	limit := viewExpansionLimit()
	if n := t.NBytes(); n > t.Storage.Size && n-t.Storage.Size > limit {
		return fmt.Errorf("%s: storage %q: %w: a view (shape %v, strides %v) expands its %d stored bytes to %d (more than %d bytes beyond the storage): set CKPT_MAX_VIEW_EXPANSION to a larger byte count to materialise it anyway",
			t.Storage.File, t.storageKey(), ckpterr.ErrUnsupported, t.Shape, t.Strides, t.Storage.Size, n, limit)
	}
	return nil
}

// IsWholeStorage reports whether the tensor's contiguous bytes (what WriteTo writes) are
// exactly its storage's bytes as stored, so that a checksum of one is a checksum of the other.
func (t *Tensor) IsWholeStorage() bool {
	return t.Storage != nil && t.Validate() == nil && t.Offset == 0 && t.IsContiguous() &&
		t.NBytes() == t.Storage.Size && t.fixup() == nil
}

// copyBuf is the size of the bounded buffer used when a view is not one contiguous run.
const copyBuf = 1 << 20

// WriteTo writes the tensor's logical value as contiguous little-endian bytes — what
// `tensor.resolve_conj().resolve_neg().contiguous()` holds in torch — streaming from the
// storage with a bounded buffer. A contiguous little-endian view of an mmap'd storage is
// written straight from the mapping without copying.
func (t *Tensor) WriteTo(w io.Writer) (int64, error) {
	if err := t.Validate(); err != nil {
		return 0, fmt.Errorf("tensor in storage %q: %w", t.storageKey(), err)
	}
	if err := t.CheckView(); err != nil {
		return 0, err
	}
	es := int64(t.DType.Size())
	total := t.NBytes()
	if total == 0 {
		return 0, nil
	}
	fix := t.fixup()
	if t.IsContiguous() {
		start := t.Offset * es
		t.Storage.willRead(start, total)
		if fix == nil {
			if d, ok := t.Storage.Mapped(); ok {
				return t.Storage.writeMapped(w, d[start:start+total], start)
			}
			return WriteRange(w, Range{Src: t.Storage, Off: start, N: total})
		}
		return t.copyRun(w, start, total, fix)
	}
	return t.gather(w, fix)
}

func (t *Tensor) storageKey() string {
	if t.Storage == nil {
		return ""
	}
	return t.Storage.Key
}

// copyRun streams [start, start+n) of the storage through a bounded buffer.
func (t *Tensor) copyRun(w io.Writer, start, n int64, fix func([]byte)) (int64, error) {
	buf := make([]byte, min(n, copyBuf))
	var written int64
	for written < n {
		chunk := buf[:min(n-written, int64(len(buf)))]
		if _, err := t.Storage.ReadAt(chunk, start+written); err != nil {
			return written, err
		}
		if fix != nil {
			fix(chunk)
		}
		m, err := w.Write(chunk)
		written += int64(m)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// gather walks a strided view in row-major order. Trailing dims that are contiguous with
// each other are merged into one run, so a sliced matrix copies row by row.
func (t *Tensor) gather(w io.Writer, fix func([]byte)) (int64, error) {
	es := int64(t.DType.Size())
	// Collapse trailing dims into a contiguous run of `run` elements.
	nd := len(t.Shape)
	run := int64(1)
	inner := nd
	for inner > 0 {
		i := inner - 1
		if t.Shape[i] == 1 {
			inner--
			continue
		}
		if t.Strides[i] != run {
			break
		}
		run *= t.Shape[i]
		inner--
	}
	outer := t.Shape[:inner]
	idx := make([]int64, len(outer))
	runBytes := run * es
	buf := make([]byte, 0, max(min(copyBuf, t.NBytes()), runBytes))
	mapped, isMapped := t.Storage.Mapped()
	var written int64
	flush := func() error {
		if fix != nil {
			fix(buf)
		}
		m, err := w.Write(buf)
		written += int64(m)
		buf = buf[:0]
		return err
	}
	for {
		off := t.Offset
		for i, v := range idx {
			off += v * t.Strides[i]
		}
		if int64(cap(buf)-len(buf)) < runBytes {
			if err := flush(); err != nil {
				return written, err
			}
		}
		src := off * es
		if isMapped {
			buf = append(buf, mapped[src:src+runBytes]...)
		} else {
			n := len(buf)
			buf = buf[:n+int(runBytes)]
			if _, err := t.Storage.ReadAt(buf[n:], src); err != nil {
				return written, err
			}
		}
		// Advance the outer index odometer.
		d := len(idx) - 1
		for ; d >= 0; d-- {
			idx[d]++
			if idx[d] < outer[d] {
				break
			}
			idx[d] = 0
		}
		if d < 0 {
			break
		}
	}
	return written, flush()
}

// fixup returns the in-place transform that turns stored element bytes into logical
// little-endian bytes (byte swap, lazy conj and neg), or nil when none is needed.
func (t *Tensor) fixup() func([]byte) {
	es := t.DType.Size()
	swap := t.Storage.BigEndian && es > 1
	conj := t.Conj && t.DType.IsComplex()
	neg := t.Neg
	if !swap && !conj && !neg {
		return nil
	}
	part := es // byte-swap unit: the whole element, or each half of a complex
	if t.DType.IsComplex() {
		part = es / 2
	}
	kind := t.DType.Kind()
	return func(b []byte) {
		for i := 0; i+es <= len(b); i += es {
			e := b[i : i+es]
			if swap {
				for p := 0; p < es; p += part {
					h := e[p : p+part]
					for a, z := 0, len(h)-1; a < z; a, z = a+1, z-1 {
						h[a], h[z] = h[z], h[a]
					}
				}
			}
			if conj {
				e[es-1] ^= 0x80 // sign of the imaginary half
			}
			if neg {
				switch kind {
				case KindFloat:
					negateFloat(t.DType, e)
				case KindComplex:
					e[part-1] ^= 0x80
					e[es-1] ^= 0x80
				case KindSigned, KindUnsigned:
					negateInt(e)
				}
			}
		}
	}
}

// negateFloat flips the sign of one float element, as IEEE negation does (NaN included).
// Formats without a sign bit (e8m0) or with a single NaN code at the sign position (fnuz)
// follow torch: fnuz negative zero does not exist, so 0x80 (NaN) stays NaN and 0 stays 0.
func negateFloat(d DType, e []byte) {
	switch d {
	case Float8E8M0FNU:
		return
	case Float8E4M3FNUZ, Float8E5M2FNUZ:
		if e[0] == 0 || e[0] == 0x80 {
			return
		}
		e[0] ^= 0x80
	case Float4E2M1FNx2:
		e[0] ^= 0x88
	default:
		e[len(e)-1] ^= 0x80
	}
}

// negateInt negates a little-endian two's complement integer in place.
func negateInt(e []byte) {
	switch len(e) {
	case 1:
		e[0] = -e[0]
	case 2:
		binary.LittleEndian.PutUint16(e, -binary.LittleEndian.Uint16(e))
	case 4:
		binary.LittleEndian.PutUint32(e, -binary.LittleEndian.Uint32(e))
	case 8:
		binary.LittleEndian.PutUint64(e, -binary.LittleEndian.Uint64(e))
	}
}

// Bytes returns the tensor's logical value as contiguous little-endian bytes (what WriteTo
// writes) in a new slice of NBytes bytes.
func (t *Tensor) Bytes() ([]byte, error) {
	var b bytes.Buffer
	b.Grow(int(t.NBytes()))
	if _, err := t.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
