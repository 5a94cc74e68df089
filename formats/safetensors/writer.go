package safetensors

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/ckpt-dev/ckpt/statedict"
)

// Writer streams a safetensors file: NewWriter lays out and writes the header, then each
// tensor's bytes are written in layout order by WriteTensor, and Close checks that none is
// missing. Nothing is buffered beyond a fixed-size write buffer, so a file of any size can be
// written from lazily read tensors.
type Writer struct {
	w       *bufio.Writer
	out     io.Writer // what w buffers for; file ranges go straight to it
	tensors []TensorInfo
	next    int
	err     error // sticky: set by the first failure, or by Close
}

// errClosed is returned by a Writer used after Close.
var errClosed = errors.New("safetensors: writer is closed")

// NewWriter computes the layout of tensors, in the order given, and writes the header to w.
// Each entry needs Name, DType (a safetensors dtype string) and Shape (the header shape, see
// TensorInfo); NewWriter assigns Begin and End itself, so a Header's Tensors can be passed back
// to copy a file. Use SortLikeReference first to get the reference writer's order, and
// TensorInfoFor to describe a statedict tensor.
//
// The header is what safetensors 0.8 writes: compact JSON with `__metadata__` first when
// metadata is non-nil (even if empty, as the reference does for Some({})), its keys in sorted
// order (the reference uses hash order), then the tensors in layout order, padded with spaces
// to a multiple of 8 bytes.
func NewWriter(w io.Writer, tensors []TensorInfo, metadata map[string]string) (*Writer, error) {
	plan := make([]TensorInfo, len(tensors))
	seen := make(map[string]bool, len(tensors))
	var off int64
	for i, t := range tensors {
		if !utf8.ValidString(t.Name) {
			return nil, fmt.Errorf("safetensors: tensor name %q is not valid UTF-8", t.Name)
		}
		if t.Name == "__metadata__" {
			return nil, fmt.Errorf("safetensors: a tensor cannot be named __metadata__")
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("safetensors: tensor %q appears twice", t.Name)
		}
		seen[t.Name] = true
		size, err := tensorSize(t.DType, t.Shape)
		if err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %w", t.Name, err)
		}
		if size > math.MaxInt64-off {
			return nil, fmt.Errorf("safetensors: tensor %q: file size overflows", t.Name)
		}
		plan[i] = TensorInfo{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape), Begin: off, End: off + size}
		off += size
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("safetensors: __metadata__ entry %q: %q is not valid UTF-8", k, v)
		}
	}
	hdr := encodeHeader(plan, metadata)
	if len(hdr) > MaxHeaderSize {
		return nil, fmt.Errorf("safetensors: header of %d bytes exceeds the limit of %d", len(hdr), MaxHeaderSize)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if _, err := bw.Write(append(binary.LittleEndian.AppendUint64(nil, uint64(len(hdr))), hdr...)); err != nil {
		return nil, fmt.Errorf("safetensors: writing header: %w", err)
	}
	return &Writer{w: bw, out: w, tensors: plan}, nil
}

// tensorSize is the byte size of a tensor of a known dtype, with the reference's checks.
func tensorSize(dtype string, shape []int64) (int64, error) {
	elemBits, ok := DTypeBits(dtype)
	if !ok {
		return 0, fmt.Errorf("dtype %q is not a safetensors 0.8 dtype", dtype)
	}
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
	}
	n, ok := numElements(shape)
	hi, nbits := bits.Mul64(n, uint64(elemBits))
	if !ok || hi != 0 || nbits/8 > math.MaxInt64 {
		return 0, fmt.Errorf("size of shape %v of %s overflows", shape, dtype)
	}
	if nbits%8 != 0 {
		return 0, fmt.Errorf("shape %v of %s is %d bits, not a whole number of bytes", shape, dtype, nbits)
	}
	return int64(nbits / 8), nil
}

// encodeHeader renders the header JSON byte for byte as serde_json does for the reference.
func encodeHeader(plan []TensorInfo, metadata map[string]string) []byte {
	b := []byte{'{'}
	if metadata != nil {
		b = append(b, `"__metadata__":{`...)
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, metadata[k])
		}
		b = append(b, '}')
	}
	for i, t := range plan {
		if i > 0 || metadata != nil {
			b = append(b, ',')
		}
		b = appendString(b, t.Name)
		b = append(b, `:{"dtype":`...)
		b = appendString(b, t.DType)
		b = append(b, `,"shape":[`...)
		for j, d := range t.Shape {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, t.Begin, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, t.End, 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for len(b)%8 != 0 {
		b = append(b, ' ')
	}
	return b
}

// appendString appends s as a JSON string with serde_json's escaping: the two-character
// escapes for '"', '\\', \b, \f, \n, \r and \t, \u00xx (lower-case hex) for other control
// characters, and everything else, including non-ASCII and DEL, verbatim.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			if c < 0x20 {
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			} else {
				b = append(b, c)
			}
		}
	}
	return append(b, '"')
}

// WriteTensor writes the bytes of the next tensor of the layout, which must be called name,
// by calling src.WriteTo (a *statedict.Tensor streams its contiguous little-endian bytes). src
// must write exactly the tensor's size: more is refused before it reaches the output, and a
// short or failed write is an error. After an error the Writer is unusable.
func (w *Writer) WriteTensor(name string, src io.WriterTo) error {
	if w.err != nil {
		return w.err
	}
	if w.next == len(w.tensors) {
		w.err = fmt.Errorf("safetensors: tensor %q: all %d tensors of the layout are written", name, len(w.tensors))
		return w.err
	}
	t := &w.tensors[w.next]
	if name != t.Name {
		w.err = fmt.Errorf("safetensors: tensor %q written out of order: tensor %q comes next", name, t.Name)
		return w.err
	}
	ew := &exactWriter{w: w.w, out: w.out, left: t.Size()}
	if _, err := src.WriteTo(ew); err != nil {
		w.err = fmt.Errorf("safetensors: tensor %q: %w", name, err)
		return w.err
	}
	if ew.left != 0 {
		w.err = fmt.Errorf("safetensors: tensor %q: wrote %d bytes, its %s shape %v needs %d",
			name, t.Size()-ew.left, t.DType, t.Shape, t.Size())
		return w.err
	}
	w.next++
	return nil
}

// exactWriter passes at most left bytes to w. File ranges (fastcopy) bypass the buffer: it
// is flushed and the range handed to out, whose writer reads the file itself.
type exactWriter struct {
	w    *bufio.Writer
	out  io.Writer
	left int64
}

// WriteRange implements statedict.RangeWriter.
func (e *exactWriter) WriteRange(r statedict.Range) (int64, error) {
	if r.Len() > e.left {
		return 0, fmt.Errorf("%d bytes more than its dtype and shape need", r.Len()-e.left)
	}
	if err := e.w.Flush(); err != nil {
		return 0, err
	}
	n, err := statedict.WriteRange(e.out, r)
	e.left -= n
	return n, err
}

// Write passes p on, refusing bytes beyond the tensor's size.
func (e *exactWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > e.left {
		return 0, fmt.Errorf("%d bytes more than its dtype and shape need", int64(len(p))-e.left)
	}
	n, err := e.w.Write(p)
	e.left -= int64(n)
	return n, err
}

// Close flushes the output and reports an error if a tensor of the layout was not written or
// an earlier write failed. It does not close the underlying writer.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if w.next < len(w.tensors) {
		w.err = fmt.Errorf("safetensors: %d of %d tensors not written, starting with %q",
			len(w.tensors)-w.next, len(w.tensors), w.tensors[w.next].Name)
		return w.err
	}
	w.err = errClosed
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return nil
}

// SortLikeReference orders tensors as the reference writer does: by descending dtype in the
// order of the Rust Dtype enum (U64, I64, F64, C64, F32, ..., F4, BOOL), which keeps every
// tensor naturally aligned, then by name (bytewise). Unknown dtypes sort last.
func SortLikeReference(tensors []TensorInfo) {
	slices.SortStableFunc(tensors, func(a, b TensorInfo) int {
		return cmp.Or(cmp.Compare(dtypeRank(b.DType), dtypeRank(a.DType)), cmp.Compare(a.Name, b.Name))
	})
}

// TensorInfoFor describes the statedict tensor t, to be written under name, as a header entry:
// its torch dtype mapped to the safetensors string and its shape, with the last dimension of
// float4_e2m1fn_x2 doubled to count F4 values. A foreign tensor of a known safetensors dtype
// (F6_E2M3, F6_E3M2) is written one-dimensional, since statedict keeps only its byte count.
// Begin and End are left zero for NewWriter to assign.
func TensorInfoFor(name string, t *statedict.Tensor) (TensorInfo, error) {
	info := TensorInfo{Name: name, Shape: slices.Clone(t.Shape)}
	if info.Shape == nil {
		info.Shape = []int64{}
	}
	if t.Foreign != "" {
		elemBits, ok := DTypeBits(t.Foreign)
		nbits := t.NBytes() * 8
		if !ok || nbits%int64(elemBits) != 0 {
			return info, fmt.Errorf("safetensors: tensor %q: cannot write foreign dtype %q from %d bytes", name, t.Foreign, t.NBytes())
		}
		info.DType, info.Shape = t.Foreign, []int64{nbits / int64(elemBits)}
		return info, nil
	}
	info.DType = t.DType.Safetensors()
	if info.DType == "" {
		return info, fmt.Errorf("safetensors: tensor %q: torch dtype %s has no safetensors equivalent", name, t.DType)
	}
	if t.DType == statedict.Float4E2M1FNx2 {
		if len(info.Shape) == 0 {
			return info, fmt.Errorf("safetensors: tensor %q: a 0-dim float4_e2m1fn_x2 tensor holds an odd number of F4 values", name)
		}
		last := len(info.Shape) - 1
		if info.Shape[last] > math.MaxInt64/2 {
			return info, fmt.Errorf("safetensors: tensor %q: shape %v overflows when doubled", name, t.Shape)
		}
		info.Shape[last] *= 2
	}
	return info, nil
}

// Float32s streams its values as the little-endian bytes of an F32 tensor, for WriteTensor.
type Float32s []float32

// WriteTo writes v's values, 64 KiB at a time.
func (v Float32s) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, 0, 1<<16)
	var n int64
	for i, x := range v {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
		if len(buf) == cap(buf) || i == len(v)-1 {
			m, err := w.Write(buf)
			n += int64(m)
			if err != nil {
				return n, err
			}
			buf = buf[:0]
		}
	}
	return n, nil
}
