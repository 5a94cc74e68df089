// Package pytar reads the member list of a tar archive the way CPython's tarfile module
// reads it when opened with mode "r:" — as torch.load's legacy loader (torch < 0.4 tar
// checkpoints) and NeMo's restore_from (.nemo archives) open it — so that what ckpt reads
// and scans is what those loaders read: the same header fields and numbers (any magic,
// V7 included; numbers as tarfile's nti parses them), the ustar prefix joined to every
// name but GNU records', GNU long names, PAX records, and the same end: the point where
// tarfile.open raises ReadError (torch.load then unpickles the file from byte 0), where
// getmembers raises it, or where the list silently ends.
//
// The reading is CPython 3.14's. Where the CPython versions torch runs on (3.10 and later)
// read an archive differently — negative sizes, malformed PAX records, PAX paths with a
// trailing slash, a V7 directory after a GNU long name, PAX global records that rewrite
// later members, sparse members — or where a record is beyond what ckpt reads (long names
// or PAX records over 1 MiB), the list stops there with an error matching ErrUnsure:
// callers cannot vouch for what each reader sees after it. Only headers and name records
// are read, in windows: a member's bytes never are.
package pytar

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// Errors the reading ends with (see Format: its Err matches one of them with errors.Is).
var (
	// ErrNotTar: tarfile.open raises ReadError; torch.load reads the file as a pickle
	// stream from byte 0 instead, NeMo tries gzip.
	ErrNotTar = errors.New("not a tar archive Python's tarfile opens")
	// ErrRead: tarfile opens the archive but raises ReadError listing its members (torch's
	// legacy loader then reads the file as a pickle stream from byte 0).
	ErrRead = errors.New("tarfile raises ReadError")
	// ErrUnsure: the CPython versions torch runs on, or ckpt's bounds, read on differently
	// from here.
	ErrUnsure = errors.New("tar readers differ")
)

// Format is the name errors give this format: the reading ends with a [*ckpterr.FormatError]
// of Format "tar", whose Item is the member concerned (when known), Offset the byte offset
// of its header (or record), and Err a cause that matches one of ErrNotTar, ErrRead and
// ErrUnsure with errors.Is. ErrUnsure is ckpterr.ErrUnsupported too (ckpt cannot say how
// the archive is read); the others are ckpterr.ErrCorrupt.
const Format = "tar"

// kindError is the cause of pytar's errors: its message, matching its kind.
type kindError struct {
	kind error // ErrNotTar, ErrRead or ErrUnsure
	msg  string
}

func (e *kindError) Error() string { return e.msg }

func (e *kindError) Is(target error) bool {
	return target == e.kind || target == ckpterr.ErrUnsupported && e.kind == ErrUnsure
}

// errorAt returns the error of the given kind for the header at off, of member ("" when
// unknown).
func errorAt(off int64, member string, kind error, format string, args ...any) *ckpterr.FormatError {
	return &ckpterr.FormatError{Format: Format, Item: member, Offset: off, Err: &kindError{kind, fmt.Sprintf(format, args...)}}
}

// Type flags (tarfile's REGTYPE, ...).
const (
	TypeReg     = '0'
	TypeAReg    = 0
	TypeLink    = '1'
	TypeSymlink = '2'
	TypeChar    = '3'
	TypeBlock   = '4'
	TypeDir     = '5'
	TypeFifo    = '6'
	TypeCont    = '7'
	typeLong    = 'L'
	typeLongLnk = 'K'
	typeSparse  = 'S'
	typePAX     = 'x'
	typeGlobal  = 'g'
	typeSunPAX  = 'X'
)

// Member is one entry of the list tarfile's getmembers returns.
type Member struct {
	// Name and Linkname are TarInfo.name and .linkname: raw bytes (tarfile decodes them
	// with surrogateescape, which round-trips).
	Name, Linkname string
	// Type is the header's type flag (a V7 regular file named with a trailing slash is a
	// directory, as tarfile makes it).
	Type byte
	// Offset is TarInfo.offset: the member's first header (its long-name or PAX record).
	Offset int64
	// Data is TarInfo.offset_data: where its bytes start.
	Data int64
	// Size is TarInfo.size: the PAX size when a PAX record gives one, else the header's.
	// HeaderSize is the header's size field.
	Size, HeaderSize int64
}

// IsReg reports whether tarfile counts the member a regular file (REGULAR_TYPES).
func (m Member) IsReg() bool {
	switch m.Type {
	case TypeReg, TypeAReg, TypeCont, typeSparse:
		return true
	}
	return false
}

// Supported reports whether the type is one tarfile knows (SUPPORTED_TYPES); it skips the
// bytes of the others like a regular file's, and extracts them as regular files unless a
// filter refuses them.
func (m Member) Supported() bool { return supported(m.Type) }

func supported(t byte) bool {
	switch t {
	case TypeReg, TypeAReg, TypeLink, TypeSymlink, TypeDir, TypeFifo, TypeCont, TypeChar, TypeBlock, typeLong, typeLongLnk, typeSparse:
		return true
	}
	return false
}

// HasData reports whether the member's bytes follow its header in the archive (a regular
// file, or a type tarfile does not know).
func (m Member) HasData() bool { return m.IsReg() || !m.Supported() }

// Archive is a member list as tarfile reads it.
type Archive struct {
	Members []Member
	// Err is nil when the list ends where tarfile's does without an error (an all-zero or
	// short header, or the end of the file after a member), else a *ckpterr.FormatError: ErrRead when
	// getmembers raises after these members, ErrUnsure when the readers differ from there.
	Err error
}

const block = 512

// maxRecord bounds a GNU long-name or PAX record: tar tools write a few hundred bytes.
const maxRecord = 1 << 20

// window is how much is read at once: the headers of small members come in one read.
const window = 64 << 10

// Read reads the member list of the tar archive of size bytes in r as tarfile.open(mode
// "r:") and getmembers do. When tarfile.open itself would raise, the error matches
// ErrNotTar (or ErrUnsure, when the CPython versions differ on the first header).
func Read(r io.ReaderAt, size int64) (*Archive, error) {
	t := &reader{hr: headerReader{r: r, size: size}, size: size}
	a := &Archive{}
	for {
		m, err := t.next()
		if err != nil {
			if len(a.Members) == 0 {
				// The first member: tarfile.open itself raises.
				var k *kindError
				if errors.As(err, &k) && k.kind == ErrRead {
					k.kind = ErrNotTar
				}
				return nil, err
			}
			a.Err = err
			return a, nil
		}
		if m == nil {
			return a, nil
		}
		a.Members = append(a.Members, *m)
	}
}

// IsHeader reports whether head (a file's first bytes) starts with a block tarfile takes
// for a header: not all zero, its checksum a number matching the block's. Read says what
// it makes of it; IsHeader is the cheap test before reading more.
func IsHeader(head []byte) bool {
	if len(head) < block {
		return false
	}
	_, err := frombuf(head[:block], 0, true)
	var h *hdrErr
	return !errors.As(err, &h) || h.kind != invalidHeader && h.kind != eofHeader
}

// reader is tarfile's TarFile state while reading: offset (where the next header is) and
// tell (the file position its reads left).
type reader struct {
	hr           headerReader
	size         int64
	offset, tell int64
	last         *Member // the last member listed
}

// headerError is one of tarfile's HeaderError subclasses, raised reading a header.
type headerError int

const (
	emptyHeader headerError = iota
	truncatedHeader
	eofHeader
	invalidHeader
	subsequentHeader
)

type hdrErr struct {
	kind headerError
	off  int64
	msg  string
}

func (h *hdrErr) Error() string { return h.msg }

// next is TarFile.next: the next member, nil at the end, or the error ending the list.
func (t *reader) next() (*Member, error) {
	if t.offset != t.tell {
		// "Advance the file pointer": the previous member's bytes must be there.
		if t.offset-1 >= t.size {
			if l := t.last; l != nil {
				return nil, errorAt(l.Offset, l.Name, ErrRead, "%d bytes at byte %d run past the end of the %d-byte archive (tarfile: unexpected end of data)", l.Size, l.Data, t.size)
			}
			return nil, errorAt(t.offset, "", ErrRead, "unexpected end of data: the previous member runs to byte %d of a %d-byte file", t.offset, t.size)
		}
		t.tell = t.offset
	}
	m, err := t.fromTarfile(true)
	if err == nil {
		t.last = m
		return m, nil
	}
	var h *hdrErr
	if !errors.As(err, &h) {
		return nil, err // ErrUnsure (or ErrRead) already
	}
	switch h.kind {
	case subsequentHeader:
		return nil, errorAt(h.off, "", ErrRead, "%s", h.msg)
	case eofHeader:
		return nil, nil
	default: // invalid, empty, truncated: an error at offset 0, the end elsewhere
		if t.offset == 0 {
			return nil, errorAt(h.off, "", ErrRead, "%s", h.msg)
		}
		return nil, nil
	}
}

func unsure(off int64, member, format string, args ...any) error {
	return errorAt(off, member, ErrUnsure, format, args...)
}

// header is one parsed 512-byte header (TarInfo.frombuf).
type header struct {
	name, linkname string
	typ            byte
	size           int64
	off            int64
}

// fromTarfile is TarInfo.fromtarfile: read the header at tell and process it (long
// names and PAX records take the header after them along).
func (t *reader) fromTarfile(dircheck bool) (*Member, error) {
	off := t.tell
	n := int64(block)
	if t.size-off < n {
		n = max(t.size-off, 0)
	}
	buf, err := t.hr.read(off, int(n))
	if err != nil {
		return nil, err
	}
	t.tell += n
	h, err := frombuf(buf, off, dircheck)
	if err != nil {
		return nil, err
	}
	switch h.typ {
	case typeLong, typeLongLnk:
		return t.gnuLong(h)
	case typeSparse:
		return nil, unsure(off, h.name, "a GNU sparse member, which ckpt does not read")
	case typePAX, typeGlobal, typeSunPAX:
		return t.pax(h)
	}
	return t.builtin(h)
}

// blockOf is TarInfo._block: size rounded up to whole blocks. A negative size raises in
// CPython 3.14 and is read differently by earlier versions.
func blockOf(h *header, size int64) (int64, error) {
	if size < 0 {
		return 0, unsure(h.off, h.name, "negative size %d: CPython 3.14 refuses it, earlier versions seek backwards", size)
	}
	if size >= maxNumber {
		return 0, unsure(h.off, h.name, "a size of 2^62 bytes or more: tarfile fails seeking past it with an error of its own")
	}
	return (size + block - 1) / block * block, nil
}

// builtin is _proc_builtin: a member with no record before it.
func (t *reader) builtin(h *header) (*Member, error) {
	m := &Member{Name: h.name, Linkname: h.linkname, Type: h.typ, Offset: h.off, Data: t.tell, Size: h.size, HeaderSize: h.size}
	next := m.Data
	if m.HasData() {
		b, err := blockOf(h, h.size)
		if err != nil {
			return nil, err
		}
		next += b
	}
	t.offset = next
	// PAX global records patch every later member (_apply_pax_info): the keys that would
	// change one are refused where they are read.
	if m.Type == TypeDir {
		m.Name = strings.TrimRight(m.Name, "/")
	}
	return m, nil
}

// readRecord reads the bytes of a long-name or PAX record after header h (short at the
// end of the file, as _safe_read).
func (t *reader) readRecord(h *header) ([]byte, error) {
	n, err := blockOf(h, h.size)
	if err != nil {
		return nil, err
	}
	if h.size > maxRecord {
		return nil, unsure(h.off, h.name, "a %c record of %d bytes (ckpt reads at most %d)", h.typ, h.size, maxRecord)
	}
	n = min(n, max(t.size-t.tell, 0))
	b, err := t.hr.read(t.tell, int(n))
	if err != nil {
		return nil, err
	}
	t.tell += n
	return bytes.Clone(b), nil
}

// subsequent reads the header after a record: any HeaderError there makes getmembers
// raise (SubsequentHeaderError).
func (t *reader) subsequent(h *header) (*Member, error) {
	m, err := t.fromTarfile(false)
	var he *hdrErr
	if errors.As(err, &he) {
		return nil, &hdrErr{kind: subsequentHeader, off: he.off, msg: fmt.Sprintf("the header after the %c record at byte %d: %s", h.typ, h.off, he.msg)}
	}
	return m, err
}

// gnuLong is _proc_gnulong: the name (L) or link name (K) of the member after it.
func (t *reader) gnuLong(h *header) (*Member, error) {
	buf, err := t.readRecord(h)
	if err != nil {
		return nil, err
	}
	m, err := t.subsequent(h)
	if err != nil {
		return nil, err
	}
	m.Offset = h.off
	if h.typ == typeLong {
		m.Name = nts(buf)
	} else {
		m.Linkname = nts(buf)
	}
	if m.Type == TypeDir {
		m.Name = strings.TrimSuffix(m.Name, "/")
	}
	return m, nil
}

// paxMemberKeys are the PAX keywords that change what tarfile's member list holds.
var paxMemberKeys = map[string]bool{"path": true, "linkpath": true, "size": true}

// pax is _proc_pax: the records of a PAX header (x, X: for the next member; g: for all
// later ones), then the member after it.
func (t *reader) pax(h *header) (*Member, error) {
	buf, err := t.readRecord(h)
	if err != nil {
		return nil, err
	}
	recs, err := parsePAX(buf)
	if err != nil {
		return nil, unsure(h.off, h.name, "PAX record: %v: CPython 3.14 stops reading the archive there, earlier versions read on", err)
	}
	for k := range recs {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return nil, unsure(h.off, h.name, "a GNU sparse PAX record (%s), which ckpt does not read", k)
		}
		if h.typ == typeGlobal && paxMemberKeys[k] {
			return nil, unsure(h.off, h.name, "a PAX global record %q, which tarfile applies to every later member but other readers do not", k)
		}
	}
	// A global record's other keys change nothing the member list holds.
	m, err := t.subsequent(h)
	if err != nil {
		return nil, err
	}
	if h.typ == typeGlobal {
		return m, nil
	}
	if p, ok := recs["path"]; ok {
		if m.Type == TypeDir {
			p = strings.TrimRight(p, "/")
		} else if strings.HasSuffix(p, "/") {
			return nil, unsure(h.off, p, "a PAX path ending in '/': CPython 3.14 strips it, earlier versions keep it")
		}
		m.Name = p
	}
	if l, ok := recs["linkpath"]; ok {
		m.Linkname = l
	}
	if s, ok := recs["size"]; ok {
		v, err := decimal(s)
		if err != nil {
			return nil, unsure(h.off, m.Name, "PAX size %q: %v", s, err)
		}
		if m.Offset != t.tell-block {
			// tarfile computes where the next header is from the header after the PAX
			// record; behind a long-name record it points inside the member.
			return nil, unsure(h.off, m.Name, "a PAX size before a long-name record: tarfile looks for the next header inside the member")
		}
		m.Size = v
		next := m.Offset + block
		if m.HasData() {
			b, err := blockOf(&header{off: h.off, name: m.Name}, v)
			if err != nil {
				return nil, err
			}
			next += b
		}
		t.offset = next
	}
	m.Offset = h.off
	return m, nil
}

// decimal parses a PAX number: ASCII digits only (Python's int() also takes signs,
// underscores, spaces and other scripts' digits, which other readers refuse).
func decimal(s string) (int64, error) {
	if s == "" || len(s) > 18 {
		return 0, errors.New("not a plain decimal number ckpt reads")
	}
	var v int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("not a plain decimal number: Python's int() and other readers parse it differently")
		}
		v = v*10 + int64(s[i]-'0')
	}
	return v, nil
}

// parsePAX parses PAX records as CPython 3.14 does, refusing (as it does) a malformed
// one; earlier versions stop silently at it instead, so the caller refuses the archive.
func parsePAX(b []byte) (map[string]string, error) {
	out := map[string]string{}
	pos := 0
	for pos < len(b) && b[pos] != 0 {
		// ([0-9]{1,20}) then a space.
		i := pos
		for i < len(b) && i-pos < 21 && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == pos || i-pos > 20 || i >= len(b) || b[i] != ' ' {
			return nil, fmt.Errorf("no length at byte %d", pos)
		}
		var n int64
		for _, c := range b[pos:i] {
			n = n*10 + int64(c-'0')
			if n > int64(len(b)) {
				break
			}
		}
		if n < 5 || int64(pos)+n > int64(len(b)) {
			return nil, fmt.Errorf("record length %d at byte %d", n, pos)
		}
		end := pos + int(n) - 1 // the record's last byte: '\n'
		if i+1 > end {
			return nil, fmt.Errorf("record at byte %d is shorter than its length field", pos)
		}
		kv := b[i+1 : end]
		k, v, ok := bytes.Cut(kv, []byte("="))
		if !ok || len(k) == 0 || b[end] != '\n' {
			return nil, fmt.Errorf("malformed record at byte %d", pos)
		}
		out[string(k)] = string(v)
		pos += int(n)
	}
	return out, nil
}

// frombuf is TarInfo.frombuf for the header buf read at off.
func frombuf(buf []byte, off int64, dircheck bool) (*header, error) {
	switch {
	case len(buf) == 0:
		return nil, &hdrErr{emptyHeader, off, "empty header"}
	case len(buf) != block:
		return nil, &hdrErr{truncatedHeader, off, fmt.Sprintf("truncated header (%d bytes)", len(buf))}
	case allZero(buf):
		return nil, &hdrErr{eofHeader, off, "end of file header"}
	}
	invalid := func(field string) error {
		return &hdrErr{invalidHeader, off, fmt.Sprintf("invalid header: %s is not a number", field)}
	}
	chk, ok := nti(buf[148:156])
	if !ok {
		return nil, invalid("the checksum")
	}
	var u, s int64 = 256, 256
	for i, c := range buf {
		if i >= 148 && i < 156 {
			continue
		}
		u += int64(c)
		s += int64(int8(c))
	}
	if chk != u && chk != s {
		return nil, &hdrErr{invalidHeader, off, "bad checksum"}
	}
	h := &header{name: nts(buf[0:100]), typ: buf[156], linkname: nts(buf[157:257]), off: off}
	for _, f := range []struct {
		name   string
		lo, hi int
	}{{"mode", 100, 108}, {"uid", 108, 116}, {"gid", 116, 124}, {"size", 124, 136}, {"mtime", 136, 148}, {"devmajor", 329, 337}, {"devminor", 337, 345}} {
		v, ok := nti(buf[f.lo:f.hi])
		if !ok {
			return nil, invalid(f.name)
		}
		if f.name == "size" {
			h.size = v
		}
	}
	prefix := nts(buf[345:500])
	if dircheck && h.typ == TypeAReg && strings.HasSuffix(h.name, "/") {
		h.typ = TypeDir
	} else if !dircheck && h.typ == TypeAReg && strings.HasSuffix(h.name, "/") {
		return nil, unsure(off, h.name, "a V7 directory after a long-name or PAX record: CPython 3.14 reads it as a regular file, earlier versions as a directory")
	}
	if h.typ == TypeDir {
		h.name = strings.TrimRight(h.name, "/")
	}
	if prefix != "" && h.typ != typeLong && h.typ != typeLongLnk && h.typ != typeSparse {
		h.name = prefix + "/" + h.name
	}
	return h, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// nts is tarfile's nts: the bytes up to the first NUL.
func nts(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// maxNumber caps the numbers read: larger ones are larger than any file ckpt reads.
const maxNumber = 1 << 62

// nti is tarfile's nti: GNU base-256 (0x80 positive, 0xff negative), else int(text, 8)
// of the bytes up to the first NUL, stripped, "0" when empty — Python's int() grammar:
// sign, 0o prefix, underscores between digits. ok is false where it raises.
func nti(b []byte) (int64, bool) {
	if b[0] == 0xff {
		return -1, true // -(256**(len-1) - n): negative, whatever n
	}
	if b[0] == 0x80 {
		var n int64
		for _, c := range b[1:] {
			if n > maxNumber>>8 {
				return maxNumber, true
			}
			n = n<<8 | int64(c)
		}
		return n, true
	}
	s := nts(b)
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return 0, false // nts(s, "ascii", "strict") raises
		}
	}
	s = strings.Trim(s, " \t\n\v\f\r\x1c\x1d\x1e\x1f")
	if s == "" {
		return 0, true
	}
	return pyOctal(s)
}

// pyOctal is int(s, 8) for a stripped, non-empty ASCII s.
func pyOctal(s string) (int64, bool) {
	neg := false
	if s[0] == '+' || s[0] == '-' {
		neg = s[0] == '-'
		s = s[1:]
	}
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'O') {
		s = s[2:]
		if strings.HasPrefix(s, "_") {
			s = s[1:]
		}
	}
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' {
			if i == 0 || i == len(s)-1 || s[i+1] == '_' {
				return 0, false
			}
			continue
		}
		if c < '0' || c > '7' {
			return 0, false
		}
		if n < maxNumber {
			n = n*8 + int64(c-'0')
		}
	}
	n = min(n, maxNumber)
	if neg {
		n = -n
	}
	return n, true
}

// headerReader reads ranges of an archive through a window of the last bytes read.
type headerReader struct {
	r    io.ReaderAt
	size int64
	win  []byte
	at   int64 // offset of win in the archive
}

// read returns the n bytes at off (valid until the next read).
func (h *headerReader) read(off int64, n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	if off >= h.at && off+int64(n) <= h.at+int64(len(h.win)) {
		return h.win[off-h.at : off-h.at+int64(n)], nil
	}
	want := min(max(int64(n), window), h.size-off)
	if int64(cap(h.win)) < want {
		h.win = make([]byte, want)
	}
	h.win = h.win[:want]
	k, err := h.r.ReadAt(h.win, off)
	if k < n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		h.win = h.win[:0]
		return nil, fmt.Errorf("reading the tar archive at byte %d: %w", off, err)
	}
	h.win, h.at = h.win[:k], off
	return h.win[:n], nil
}
