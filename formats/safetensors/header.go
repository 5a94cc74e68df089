// Package safetensors reads and writes the safetensors format of huggingface/safetensors 0.8.
//
// A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON describing each
// tensor (dtype, shape, byte range) plus optional string metadata, and the tensor bytes.
// Open maps the file and hands out tensors that are zero-copy slices of the mapping; ReadHeader
// parses and validates only the header, for listing and for readers of sharded folders. Writer
// streams a file tensor by tensor from a precomputed layout.
//
// Validation is at least as strict as the Rust reference (SafeTensors::read_metadata): the same
// size limits, contiguous tiling of the byte buffer, overflow-checked sizes in bits, and no
// trailing bytes. It is stricter where the reference is lenient by accident: duplicate JSON keys
// are errors (the reference keeps the last one), as are tensor entries in serde's array form,
// enum-map dtypes (`{"U8":null}`) and a null `__metadata__`. It is more lenient in one place on
// purpose: a well-formed but unknown dtype string does not fail the file (the reference rejects
// it), so `ckpt inspect` can list files written by newer producers.
//
// Every validation error is a [*ckpterr.FormatError] (Format "safetensors") carrying the file,
// the tensor and the absolute byte offset of the problem, in the manner of debug/elf. Its
// Offset is the offending JSON token (as near as encoding/json reports it) for syntax and type
// errors in the header; the start of the tensor's entry (its quoted name) for layout errors
// that involve the entry as a whole (gaps, overlaps, a size that does not match shape and
// dtype, a missing field); the first surplus byte for trailing data; and the end of the file
// for truncated data. Every one is [ckpterr.ErrCorrupt].
package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// MaxHeaderSize is the largest header length accepted, in bytes; the reference's
// MAX_HEADER_SIZE. Longer headers are rejected before anything is allocated.
const MaxHeaderSize = 100_000_000

// maxDepth is the deepest JSON nesting accepted, counting the header object itself. serde_json,
// as safetensors 0.8 calls it, accepts 125 nested arrays inside an ignored tensor field and
// fails on 126, i.e. 127 levels in all.
const maxDepth = 127

// TensorInfo describes one tensor as the header records it.
type TensorInfo struct {
	// Name is the tensor's key in the header.
	Name string
	// DType is the safetensors dtype string ("BF16", "F8_E4M3", "F4", ...).
	DType string
	// Shape is the header shape, counted in elements of DType. For F4 the last dimension is
	// twice torch's, since torch's float4_e2m1fn_x2 element holds two F4 values.
	Shape []int64
	// Begin and End delimit the tensor's bytes, relative to Header.DataStart. NewWriter
	// ignores the values it is given and assigns its own.
	Begin, End int64

	entry int64 // absolute offset of the entry's quoted name, for errors
}

// Size is the tensor's length in bytes.
func (t *TensorInfo) Size() int64 { return t.End - t.Begin }

// Header is a parsed and validated safetensors header.
type Header struct {
	// Metadata is the `__metadata__` object, or nil if the header has none.
	Metadata map[string]string
	// Tensors lists the tensors in data-offset order, which is the order the writer laid them
	// out; empty tensors sharing an offset keep their header order.
	Tensors []TensorInfo
	// DataStart is the absolute offset of the byte buffer: 8 + the header length.
	DataStart int64
}

// ReadHeader reads and validates the header of the safetensors file of size bytes that r
// reads. It checks everything the format constrains, including that the tensors exactly cover
// the rest of the file, but reads no tensor bytes. Problems with the file are *ckpterr.FormatError
// values; I/O errors from r are returned wrapped. If r has a Name() string method (*os.File,
// the mmap File), errors carry that name.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	var name string
	if n, ok := r.(interface{ Name() string }); ok {
		name = n.Name()
	}
	fail := func(off int64, format string, args ...any) error {
		return &ckpterr.FormatError{Format: Format, File: name, Offset: off, Err: fmt.Errorf(format, args...)}
	}
	if size < 8 {
		return nil, fail(0, "file is %d bytes, too short for the 8-byte header length", size)
	}
	// I/O errors are returned as they are; a reader shorter than size is a truncated file.
	readFull := func(p []byte, off int64) error {
		n, err := r.ReadAt(p, off)
		switch {
		case n == len(p):
			return nil
		case err == nil || err == io.EOF || err == io.ErrUnexpectedEOF:
			return fail(off+int64(n), "file ends after %d bytes, not %d", off+int64(n), size)
		}
		return fmt.Errorf("%s: safetensors: reading header: %w", name, err)
	}
	var lenBuf [8]byte
	if err := readFull(lenBuf[:], 0); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, fail(0, "header length %d exceeds the limit of %d bytes", n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, fail(0, "header length %d runs past the end of the %d-byte file", n, size)
	}
	hdr := make([]byte, n)
	if err := readFull(hdr, 8); err != nil {
		return nil, err
	}
	return parseHeader(name, hdr, size)
}

// parseHeader parses the header JSON hdr of a file of size bytes and validates the layout.
func parseHeader(file string, hdr []byte, size int64) (*Header, error) {
	if !utf8.Valid(hdr) {
		i := 0
		for i < len(hdr) {
			r, w := utf8.DecodeRune(hdr[i:])
			if r == utf8.RuneError && w == 1 {
				break
			}
			i += w
		}
		return nil, &ckpterr.FormatError{Format: Format, File: file, Offset: 8 + int64(i), Err: errors.New("header is not valid UTF-8")}
	}
	p := &parser{file: file, hdr: hdr, dec: json.NewDecoder(bytes.NewReader(hdr))}
	p.dec.UseNumber()
	h, err := p.parse()
	if err != nil {
		return nil, err
	}
	h.DataStart = 8 + int64(len(hdr))
	if err := h.validate(file, size); err != nil {
		return nil, err
	}
	return h, nil
}

// parser walks the header with encoding/json's token stream, so that it sees every key
// (and thus duplicates) and the offset of every token.
type parser struct {
	file   string
	hdr    []byte
	dec    *json.Decoder
	depth  int
	tensor string // entry being parsed, for errors
}

// errorf returns a FormatError at header-relative offset off.
func (p *parser) errorf(off int64, format string, args ...any) error {
	return &ckpterr.FormatError{Format: Format, File: p.file, Item: p.tensor, Offset: 8 + off, Err: fmt.Errorf(format, args...)}
}

// next returns the next token and the header-relative offset where it starts.
func (p *parser) next() (json.Token, int64, error) {
	start := p.dec.InputOffset()
	for start < int64(len(p.hdr)) && strings.IndexByte(" \t\r\n,:", p.hdr[start]) >= 0 {
		start++
	}
	tok, err := p.dec.Token()
	if err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			return nil, start, p.errorf(se.Offset, "invalid JSON: %v", se)
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return nil, start, p.errorf(int64(len(p.hdr)), "header JSON ends early")
		}
		return nil, start, p.errorf(start, "invalid JSON: %v", err)
	}
	switch tok {
	case json.Delim('{'), json.Delim('['):
		p.depth++
		if p.depth > maxDepth {
			return nil, start, p.errorf(start, "JSON nested deeper than %d levels", maxDepth)
		}
	case json.Delim('}'), json.Delim(']'):
		p.depth--
	}
	if s, ok := tok.(string); ok && strings.ContainsRune(s, utf8.RuneError) {
		// encoding/json turns escaped lone surrogates into U+FFFD; serde_json rejects them.
		if off, bad := loneSurrogate(p.hdr[start:p.dec.InputOffset()]); bad {
			return nil, start, p.errorf(start+off, "string escapes a lone UTF-16 surrogate")
		}
	}
	return tok, start, nil
}

// loneSurrogate scans a raw JSON string literal for a \u escape of a UTF-16 surrogate that is
// not part of a high-low pair, and returns its offset in lit.
func loneSurrogate(lit []byte) (int64, bool) {
	hex := func(i int) (rune, bool) {
		if i+6 > len(lit) || lit[i] != '\\' || lit[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(lit[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(lit); i++ {
		if lit[i] != '\\' {
			continue
		}
		r, ok := hex(i)
		if !ok {
			i++ // a two-byte escape such as \\ or \"
			continue
		}
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if lo, ok := hex(i + 6); ok && lo >= 0xDC00 && lo < 0xE000 {
				i += 11
				continue
			}
			return int64(i), true
		case r >= 0xDC00 && r < 0xE000:
			return int64(i), true
		}
		i += 5
	}
	return 0, false
}

// parse reads the whole header object.
func (p *parser) parse() (*Header, error) {
	tok, off, err := p.next()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, p.errorf(off, "header is not a JSON object")
	}
	// Room for every entry at once (a slice grown by doubling would hold up to twice the
	// entries of a header of hundreds of thousands): an entry names its "data_offsets",
	// and takes 40 bytes at least, which bounds what a header that only says the word
	// many times can make us allocate.
	h := &Header{Tensors: make([]TensorInfo, 0, min(bytes.Count(p.hdr, []byte(`"data_offsets"`)), len(p.hdr)/40))}
	seen := make(map[string]bool)
	for p.dec.More() {
		tok, off, err := p.next()
		if err != nil {
			return nil, err
		}
		key := tok.(string) // the decoder only yields string keys inside an object
		if seen[key] {
			if key != "__metadata__" {
				p.tensor = key
			}
			return nil, p.errorf(off, "duplicate key %q in header", key)
		}
		seen[key] = true
		if key == "__metadata__" {
			if h.Metadata, err = p.metadata(); err != nil {
				return nil, err
			}
			continue
		}
		p.tensor = key
		t, err := p.entry(key, off)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, t)
		p.tensor = ""
	}
	if _, _, err := p.next(); err != nil { // the closing '}'
		return nil, err
	}
	// Whitespace may follow the object (writers pad with spaces); nothing else may.
	end := p.dec.InputOffset()
	if rest := bytes.TrimLeft(p.hdr[end:], " \t\r\n"); len(rest) > 0 {
		return nil, p.errorf(int64(len(p.hdr)-len(rest)), "trailing data after the header object")
	}
	return h, nil
}

// metadata reads the `__metadata__` object: string keys to string values.
func (p *parser) metadata() (map[string]string, error) {
	tok, off, err := p.next()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, p.errorf(off, "__metadata__ is %s, not an object of strings", describe(tok))
	}
	md := make(map[string]string)
	for p.dec.More() {
		tok, off, err := p.next()
		if err != nil {
			return nil, err
		}
		key := tok.(string)
		if _, dup := md[key]; dup {
			return nil, p.errorf(off, "duplicate key %q in __metadata__", key)
		}
		tok, off, err = p.next()
		if err != nil {
			return nil, err
		}
		v, ok := tok.(string)
		if !ok {
			return nil, p.errorf(off, "__metadata__ value for %q is %s, not a string", key, describe(tok))
		}
		md[key] = v
	}
	_, _, err = p.next()
	return md, err
}

// entry reads one tensor entry; entryOff is the header offset of its quoted name.
func (p *parser) entry(name string, entryOff int64) (TensorInfo, error) {
	t := TensorInfo{Name: name, entry: 8 + entryOff}
	tok, off, err := p.next()
	if err != nil {
		return t, err
	}
	if tok != json.Delim('{') {
		return t, p.errorf(off, "tensor entry is %s, not an object", describe(tok))
	}
	var haveDType, haveShape, haveOffsets bool
	fields := make(map[string]bool)
	for p.dec.More() {
		tok, off, err := p.next()
		if err != nil {
			return t, err
		}
		field := tok.(string)
		if fields[field] {
			return t, p.errorf(off, "duplicate field %q", field)
		}
		fields[field] = true
		switch field {
		case "dtype":
			haveDType = true
			tok, off, err := p.next()
			if err != nil {
				return t, err
			}
			s, ok := tok.(string)
			if !ok || !wellFormedDType(s) {
				return t, p.errorf(off, "dtype is %s, not a dtype string", describe(tok))
			}
			t.DType = dtypeName(s)
		case "shape":
			haveShape = true
			if t.Shape, err = p.ints("shape", -1); err != nil {
				return t, err
			}
			if t.Shape == nil {
				t.Shape = []int64{}
			}
		case "data_offsets":
			haveOffsets = true
			o, err := p.ints("data_offsets", 2)
			if err != nil {
				return t, err
			}
			t.Begin, t.End = o[0], o[1]
		default:
			if err := p.skip(); err != nil { // unknown fields are ignored, as by the reference
				return t, err
			}
		}
	}
	if _, _, err := p.next(); err != nil {
		return t, err
	}
	for _, f := range []struct {
		have bool
		name string
	}{{haveDType, "dtype"}, {haveShape, "shape"}, {haveOffsets, "data_offsets"}} {
		if !f.have {
			return t, p.errorf(entryOff, "missing field %q", f.name)
		}
	}
	return t, nil
}

// ints reads an array of non-negative integers that fit an int64; want ≥ 0 fixes its length.
func (p *parser) ints(field string, want int) ([]int64, error) {
	tok, off, err := p.next()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('[') {
		return nil, p.errorf(off, "%s is %s, not an array", field, describe(tok))
	}
	var out []int64
	for p.dec.More() {
		tok, off, err := p.next()
		if err != nil {
			return nil, err
		}
		num, ok := tok.(json.Number)
		if !ok || strings.ContainsAny(string(num), "-.eE") {
			return nil, p.errorf(off, "%s element is %s, not a non-negative integer", field, describe(tok))
		}
		v, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil {
			return nil, p.errorf(off, "%s element %s does not fit in an int64", field, num)
		}
		if want >= 0 && len(out) == want {
			return nil, p.errorf(off, "%s has more than %d elements", field, want)
		}
		out = append(out, v)
	}
	_, end, err := p.next()
	if err != nil {
		return nil, err
	}
	if want >= 0 && len(out) != want {
		return nil, p.errorf(end, "%s has %d elements, want %d", field, len(out), want)
	}
	return out, nil
}

// skip consumes one JSON value of any type.
func (p *parser) skip() error {
	depth := 0
	for {
		tok, _, err := p.next()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// describe names a JSON token for error messages.
func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "an array"
	case string:
		return "string " + strconv.Quote(v)
	case json.Number:
		return "number " + string(v)
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprint(tok)
}

// validate checks the layout as Metadata::validate does, plus the file coverage check of
// read_metadata, and sorts Tensors into data-offset order.
func (h *Header) validate(file string, size int64) error {
	slices.SortStableFunc(h.Tensors, func(a, b TensorInfo) int {
		if a.Begin != b.Begin {
			return cmp.Compare(a.Begin, b.Begin)
		}
		return cmp.Compare(a.End, b.End)
	})
	var start int64
	for i := range h.Tensors {
		t := &h.Tensors[i]
		fail := func(format string, args ...any) error {
			return &ckpterr.FormatError{Format: Format, File: file, Item: t.Name, Offset: t.entry, Err: fmt.Errorf(format, args...)}
		}
		switch {
		case t.End < t.Begin:
			return fail("data_offsets [%d, %d] end before they begin", t.Begin, t.End)
		case t.Begin < start:
			return fail("data_offsets [%d, %d] overlap the previous tensor, which ends at %d", t.Begin, t.End, start)
		case t.Begin > start:
			return fail("data_offsets [%d, %d] leave a gap after the previous tensor, which ends at %d", t.Begin, t.End, start)
		}
		start = t.End
		n, ok := numElements(t.Shape)
		if !ok {
			return fail("shape %v: element count overflows", t.Shape)
		}
		elemBits, known := DTypeBits(t.DType)
		if !known {
			continue // an unknown dtype: its byte range is all we can check
		}
		hi, nbits := bits.Mul64(n, uint64(elemBits))
		if hi != 0 {
			return fail("shape %v of %s: size in bits overflows", t.Shape, t.DType)
		}
		if nbits%8 != 0 {
			return fail("shape %v of %s is %d bits, not a whole number of bytes", t.Shape, t.DType, nbits)
		}
		if uint64(t.Size()) != nbits/8 {
			return fail("shape %v of %s needs %d bytes but data_offsets [%d, %d] hold %d",
				t.Shape, t.DType, nbits/8, t.Begin, t.End, t.Size())
		}
	}
	if avail := size - h.DataStart; start < avail {
		return &ckpterr.FormatError{Format: Format, File: file, Offset: h.DataStart + start,
			Err: fmt.Errorf("%d bytes after the last tensor, which ends at byte %d", avail-start, h.DataStart+start)}
	} else if start > avail {
		for _, t := range h.Tensors {
			if t.End > avail {
				return &ckpterr.FormatError{Format: Format, File: file, Item: t.Name, Offset: size,
					Err: fmt.Errorf("data_offsets [%d, %d] run past the end of the file (byte %d ends %d bytes into the data)",
						t.Begin, t.End, size, avail)}
			}
		}
	}
	return nil
}

// numElements multiplies the dimensions left to right in uint64, failing on overflow even when
// a later dimension is 0, exactly as the reference's checked fold does.
func numElements(shape []int64) (uint64, bool) {
	n := uint64(1)
	for _, d := range shape {
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 {
			return 0, false
		}
		n = lo
	}
	return n, true
}

// knownDTypes are the dtype strings of safetensors' format, shared by every entry that
// names one (not a string each: a header may have hundreds of thousands of entries).
var knownDTypes = map[string]string{}

func init() {
	for _, d := range []string{"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2",
		"I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "I64", "U64", "F64"} {
		knownDTypes[d] = d
	}
}

// dtypeName returns s, as the shared string when it is a known dtype.
func dtypeName(s string) string {
	if d, ok := knownDTypes[s]; ok {
		return d
	}
	return s
}

// LooksLike reports whether head starts as a safetensors file does: an 8-byte
// little-endian header length followed by a JSON object (the reference accepts leading
// whitespace before it).
func LooksLike(head []byte) bool {
	if len(head) < 9 {
		return false
	}
	if n := binary.LittleEndian.Uint64(head); n < 2 {
		return false
	}
	for _, c := range head[8:] {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}
