// Package npy reads the header of a numpy .npy array as numpy's format.read_array reads
// it — the magic, the version (1.0, 2.0, 3.0), the header length and the header, a Python
// dict literal {'descr': ..., 'fortran_order': ..., 'shape': ...} — to say where the
// array's data starts and whether np.load(allow_pickle=True) unpickles it: an array whose
// dtype holds Python objects is stored as a pickle right after the header.
package npy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// Magic starts every .npy file.
const Magic = "\x93NUMPY"

// Objects says whether an array's dtype holds Python objects.
type Objects int

const (
	// NoObjects: a dtype of numbers, strings or bytes: the data is raw.
	NoObjects Objects = iota
	// HasObjects: a dtype with an object field: the data is a pickle.
	HasObjects
	// MaybeObjects: a header this reader does not follow (a descr other than the strings
	// and field lists numpy writes, a literal beyond its grammar): numpy may unpickle it.
	MaybeObjects
)

// Header is what an .npy header says.
type Header struct {
	Major, Minor int
	// Data is the offset of the array's data (or pickle): after the header.
	Data int64
	// Objects says whether np.load unpickles the data.
	Objects Objects
	// Descr is the header's 'descr' (MaybeObjects: as far as it was read).
	Descr string
}

// Format is the name errors give this format.
const Format = "npy"

// headerError reports a malformed header, at byte off: numpy refuses the file (and
// unpickles nothing). It is a [*ckpterr.FormatError] of Format "npy", and ckpterr.ErrCorrupt.
func headerError(off int64, format string, args ...any) error {
	return &ckpterr.FormatError{Format: Format, Offset: off, Err: fmt.Errorf(format, args...)}
}

// maxHeader bounds the header literal parsed: numpy writes a few hundred bytes (it
// refuses more than 10 000 unless allow_pickle is set, then reads any).
const maxHeader = 1 << 20

// ReadHeader reads the header at the start of b (the file's first bytes: enough for the
// header, which numpy pads to 64 bytes). size is the file's size.
func ReadHeader(b []byte, size int64) (*Header, error) {
	if len(b) < 8 || string(b[:6]) != Magic {
		return nil, headerError(0, "no \\x93NUMPY magic")
	}
	h := &Header{Major: int(b[6]), Minor: int(b[7])}
	var n, at int64
	switch {
	case h.Major == 1 && h.Minor == 0:
		if len(b) < 10 {
			return nil, headerError(8, "truncated header length")
		}
		n, at = int64(binary.LittleEndian.Uint16(b[8:])), 10
	case (h.Major == 2 || h.Major == 3) && h.Minor == 0:
		if len(b) < 12 {
			return nil, headerError(8, "truncated header length")
		}
		n, at = int64(binary.LittleEndian.Uint32(b[8:])), 12
	default:
		return nil, headerError(6, "format version %d.%d (numpy reads 1.0, 2.0 and 3.0)", h.Major, h.Minor)
	}
	h.Data = at + n
	if h.Data > size {
		return nil, headerError(at, "a header of %d bytes runs past the end of the %d-byte file", n, size)
	}
	if n > maxHeader || at+n > int64(len(b)) {
		h.Objects = MaybeObjects // numpy reads it; this reader does not
		return h, nil
	}
	text := string(b[at : at+n])
	if h.Major < 3 {
		text = latin1(text)
	}
	d, err := parseLiteral(text)
	if err != nil {
		h.Objects = MaybeObjects
		return h, nil
	}
	dict, ok := d.(map[string]any)
	if !ok {
		return nil, headerError(at, "the header is not a dict")
	}
	if len(dict) != 3 || dict["descr"] == nil || dict["shape"] == nil || dict["fortran_order"] == nil {
		return nil, headerError(at, "the header's keys are not descr, fortran_order and shape")
	}
	if _, ok := dict["fortran_order"].(bool); !ok {
		return nil, headerError(at, "fortran_order is not a bool")
	}
	if t, ok := dict["shape"].(tuple); !ok || !allInts(t) {
		return nil, headerError(at, "shape is not a tuple of ints")
	}
	h.Descr = repr(dict["descr"])
	h.Objects = objects(dict["descr"], 0)
	return h, nil
}

// repr prints a parsed literal as Python does.
func repr(v any) string {
	switch x := v.(type) {
	case string:
		return "'" + strings.ReplaceAll(x, "'", `\'`) + "'"
	case tuple:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = repr(e)
		}
		if len(x) == 1 {
			return "(" + parts[0] + ",)"
		}
		return "(" + strings.Join(parts, ", ") + ")"
	case list:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = repr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case none:
		return "None"
	}
	return fmt.Sprint(v)
}

func allInts(t tuple) bool {
	for _, v := range t {
		if _, ok := v.(int64); !ok {
			return false
		}
	}
	return true
}

// latin1 decodes ISO-8859-1 bytes (every byte is the code point of its value).
func latin1(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(rune(s[i]))
	}
	return b.String()
}

// plain matches the dtype strings numpy writes for arrays without objects: booleans,
// integers, floats, complex numbers, bytes, unicode, void and dates, with a byte order.
var plain = regexp.MustCompile(`^[<>|=]?(\?|b1|[iu][1248]|f[248]|f16|f12|c8|c16|c24|c32|[SUVa][0-9]+|[mM]8(\[[0-9]*(Y|M|W|D|h|m|s|ms|us|μs|ns|ps|fs|as|generic)\])?)$`)

// objects says whether descr (as descr_to_dtype reads it: a dtype string, a (descr,
// shape) tuple, or a list of (name, descr[, shape]) fields) holds Python objects.
func objects(descr any, depth int) Objects {
	if depth > 32 {
		return MaybeObjects
	}
	switch d := descr.(type) {
	case string:
		switch {
		case plain.MatchString(d):
			return NoObjects
		case strings.TrimLeft(d, "<>|=") == "O" || strings.TrimLeft(d, "<>|=") == "O8":
			return HasObjects
		}
		return MaybeObjects
	case tuple:
		if len(d) != 2 {
			return MaybeObjects
		}
		return objects(d[0], depth+1)
	case list:
		worst := NoObjects
		for _, f := range d {
			ft, ok := f.(tuple)
			if !ok || len(ft) < 2 || len(ft) > 3 {
				return MaybeObjects
			}
			worst = max(worst, objects(ft[1], depth+1))
		}
		return worst
	}
	return MaybeObjects
}

// tuple and list are the Python literals' kinds.
type (
	tuple []any
	list  []any
)

var errSyntax = errors.New("not a literal this reader follows")

// parseLiteral parses a Python literal of the grammar numpy writes: dicts with string
// keys, strings (quoted either way, with backslash escapes), tuples, lists, ints, True,
// False, None. Anything else — comments, concatenated strings, other numbers — is refused
// (ast.literal_eval may take it).
func parseLiteral(s string) (any, error) {
	p := &parser{s: s}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.s) {
		return nil, errSyntax
	}
	return v, nil
}

type parser struct {
	s string
	i int
}

func (p *parser) space() {
	for p.i < len(p.s) && strings.IndexByte(" \t\n\r\f\v", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *parser) value(depth int) (any, error) {
	if depth > 64 {
		return nil, errSyntax
	}
	p.space()
	if p.i >= len(p.s) {
		return nil, errSyntax
	}
	switch c := p.s[p.i]; {
	case c == '{':
		p.i++
		m := map[string]any{}
		for {
			p.space()
			if p.i < len(p.s) && p.s[p.i] == '}' {
				p.i++
				return m, nil
			}
			k, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, errSyntax
			}
			p.space()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return nil, errSyntax
			}
			p.i++
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			m[ks] = v
			if !p.sep('}') {
				return nil, errSyntax
			}
		}
	case c == '(' || c == '[':
		end := byte(')')
		if c == '[' {
			end = ']'
		}
		p.i++
		var items []any
		comma := false
		for {
			p.space()
			if p.i < len(p.s) && p.s[p.i] == end {
				p.i++
				if c == '[' {
					return list(items), nil
				}
				if len(items) == 1 && !comma {
					return items[0], nil // (x) is x
				}
				return tuple(items), nil
			}
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			items = append(items, v)
			p.space()
			comma = p.i < len(p.s) && p.s[p.i] == ','
			if !p.sep(end) {
				return nil, errSyntax
			}
		}
	case c == '\'' || c == '"':
		return p.str(c)
	case c >= '0' && c <= '9' || c == '-' || c == '+':
		return p.int()
	}
	for _, w := range []struct {
		word string
		v    any
	}{{"True", true}, {"False", false}, {"None", nil}} {
		if strings.HasPrefix(p.s[p.i:], w.word) {
			p.i += len(w.word)
			if p.i < len(p.s) && (isIdent(p.s[p.i])) {
				return nil, errSyntax
			}
			if w.v == nil {
				return none{}, nil
			}
			return w.v, nil
		}
	}
	return nil, errSyntax
}

// none is Python's None (nil means "absent" in a dict lookup).
type none struct{}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// sep consumes a ',' (or sees end next, left for the caller).
func (p *parser) sep(end byte) bool {
	p.space()
	if p.i >= len(p.s) {
		return false
	}
	if p.s[p.i] == ',' {
		p.i++
		return true
	}
	return p.s[p.i] == end
}

func (p *parser) int() (any, error) {
	start := p.i
	if p.s[p.i] == '-' || p.s[p.i] == '+' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || p.i-digits > 18 || (p.i < len(p.s) && (isIdent(p.s[p.i]) || p.s[p.i] == '.')) {
		return nil, errSyntax
	}
	if p.i-digits > 1 && p.s[digits] == '0' {
		return nil, errSyntax // Python refuses leading zeros
	}
	var v int64
	for _, c := range p.s[digits:p.i] {
		v = v*10 + int64(c-'0')
	}
	if p.s[start] == '-' {
		v = -v
	}
	return v, nil
}

// str parses a quoted string with the escapes numpy's writer produces (repr of a str).
func (p *parser) str(q byte) (any, error) {
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String(), nil
		case c == '\n':
			return nil, errSyntax
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return nil, errSyntax
			}
			e := p.s[p.i+1]
			switch e {
			case '\\', '\'', '"':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				return nil, errSyntax // other escapes: left to ast.literal_eval
			}
			p.i += 2
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return nil, errSyntax
}
