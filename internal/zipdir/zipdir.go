// Package zipdir reads the central directory of a zip archive — the one reader of it in
// ckpt, for torch.save archives (formats/torchzip) and for the security scanner (scan) —
// the way archive/zip's NewReader reads it, into buffers recycled from archive to archive,
// with lookups by name whatever the case of its letters, as torch's reader (miniz) finds
// records.
package zipdir

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
)

// The zip directory of an archive, read the way archive/zip's NewReader reads it — the same
// end-record search, zip64 records, base offset, header loop and entry-count check, the
// same errors (zip.ErrFormat, io.ErrUnexpectedEOF, "zip: invalid comment length") — but
// into buffers recycled from archive to archive. A DCP data file embeds one torch.save
// archive per tensor; with archive/zip each of them cost a 4 KiB bufio reader, a 1 KiB
// end-record buffer, a File and a name per record and a map (~7 KiB, 2.1 GB of garbage
// over the 300 001 archives of a 300 000-tensor checkpoint), and under an address-space
// limit the collector, running near its memory limit, spent most of `ckpt check`'s time
// on that garbage. FuzzZipDir checks this reader against archive/zip on arbitrary bytes.

// Zip layout constants (APPNOTE.TXT), as archive/zip names them.
const (
	fileHeaderSignature      = 0x04034b50
	directoryHeaderSignature = 0x02014b50
	directoryEndSignature    = 0x06054b50
	directory64LocSignature  = 0x07064b50
	directory64EndSignature  = 0x06064b50
	fileHeaderLen            = 30
	directoryHeaderLen       = 46
	directoryEndLen          = 22
	directory64LocLen        = 20
	directory64EndLen        = 56
	zip64ExtraID             = 0x0001
)

// noDirectoryEnd is archive/zip's zip.ErrFormat — the same error, by errors.Is and by its
// message — for an archive with no end-of-central-directory record in its last 65 KiB: the
// record a zip ends with, missing from a file cut short. torch's reader says so.
type noDirectoryEnd struct{}

func (noDirectoryEnd) Error() string        { return zip.ErrFormat.Error() }
func (noDirectoryEnd) Is(target error) bool { return target == zip.ErrFormat }

// ErrNoDirectoryEnd is the error Read returns for it.
var ErrNoDirectoryEnd error = noDirectoryEnd{}

// Explain words err, an error of Read for an archive of size bytes, for a person: a
// missing end record says the file looks truncated; archive/zip's errors, which start
// "zip: ", keep their words; the others get that prefix.
func Explain(err error, size int64) error {
	switch {
	case errors.Is(err, ErrNoDirectoryEnd):
		return fmt.Errorf("no zip end-of-central-directory record in its last bytes: the file looks truncated (%d bytes: an interrupted download or copy?)", size)
	case strings.HasPrefix(err.Error(), "zip: "):
		return err
	}
	return fmt.Errorf("zip: %w", err)
}

// File is one central-directory record: what readers use of a zip.File.
type File struct {
	Name               []byte // in the directory's scratch buffer; copy it to keep it
	Flags, Method      uint16
	CompressedSize64   uint64
	UncompressedSize64 uint64
	HeaderOffset       int64
	dir                *Dir
}

// DataOffset is where the record's (possibly compressed) bytes start in the archive, read
// from its local header as zip.File.DataOffset reads it.
func (f *File) DataOffset() (int64, error) {
	buf := f.dir.scratch[:fileHeaderLen]
	if _, err := f.dir.zipr.ReadAt(buf, f.HeaderOffset); err != nil {
		return 0, err
	}
	if binary.LittleEndian.Uint32(buf) != fileHeaderSignature {
		return 0, zip.ErrFormat
	}
	filenameLen := int64(binary.LittleEndian.Uint16(buf[26:]))
	extraLen := int64(binary.LittleEndian.Uint16(buf[28:]))
	return f.HeaderOffset + fileHeaderLen + filenameLen + extraLen, nil
}

// Dir is a parsed directory and the buffers it is parsed into, reused through dirPool.
type Dir struct {
	Files []File
	// Layout locates the structures the directory was read from.
	Layout Layout
	sorted []int32 // indexes of File by name (letters folded), then by position (find)
	names  []byte
	spans  []int // [start, end) of each name in names
	end    []byte
	d      []byte
	br     *bufio.Reader
	zipr   io.ReaderAt // the archive
	// scratch holds a fixed-size header while it is parsed (a local array passed to an
	// io.Reader would escape to the heap).
	scratch [directory64EndLen]byte
	sr      sectionReader
	bytesR  bytes.Reader
	// headerLen is the length of the directory header read last.
	headerLen int64
	// tail is the block read from the archive's end while finding the end record, at
	// tailOff: the zip64 records before it are sliced from it, not read again.
	tail    []byte
	tailOff int64
}

// Layout locates the structures of an archive's directory, for a reader that checks that
// every byte of an archive is accounted for and that readers following other rules would
// read the same directory (the scanner: torch's miniz reads the zip64 end record whenever
// a locator leads to one, archive/zip only when the end record's fields are saturated).
type Layout struct {
	// End is the end-of-central-directory record's offset, EndLen its length with its
	// comment; Records, DirSize and DirOffset are its fields as written.
	End, EndLen                 int64
	Records, DirSize, DirOffset uint64
	// Zip64Loc is the offset of the zip64 locator right before the end record, -1 when
	// there is none; Zip64At is the offset it gives for the zip64 end record.
	Zip64Loc, Zip64At int64
	// Zip64Len is the length of the zip64 end record at Zip64At (its size field plus 12), 0
	// when there is none there or its size does not fit between it and the locator;
	// Zip64Records, Zip64DirSize and Zip64DirOffset are its fields.
	Zip64Len                                   int64
	Zip64Records, Zip64DirSize, Zip64DirOffset uint64
	// Used is what the directory was read with: the end record's fields, or the zip64 end
	// record's when the end record's are saturated (as archive/zip reads them).
	Used struct{ Records, DirSize, DirOffset uint64 }
	// Base is the offset of data prepended to the archive (0 for an archive at its start),
	// added to every header offset; DirRead is how many bytes the records read took.
	Base, DirRead int64
}

var dirPool = sync.Pool{New: func() any { return &Dir{br: bufio.NewReaderSize(nil, 4096)} }}

// Read reads the directory of the zip archive of size bytes in r (data, when not
// nil, is the same archive in memory). Release the result with release when its names are
// no longer needed.
func Read(r io.ReaderAt, data []byte, size int64) (*Dir, error) {
	z := dirPool.Get().(*Dir)
	z.Files, z.names, z.spans, z.sorted = z.Files[:0], z.names[:0], z.spans[:0], z.sorted[:0]
	z.Layout = Layout{Zip64Loc: -1, Zip64At: -1}
	z.tail, z.tailOff = nil, 0
	z.zipr = r
	if err := z.init(r, data, size); err != nil {
		z.Release()
		return nil, err
	}
	return z, nil
}

// release returns z's buffers for the next archive; z and its names are not to be used
// after.
func (z *Dir) Release() {
	if cap(z.names) > 1<<20 || cap(z.Files) > 1<<12 {
		return // a hostile directory's buffers are not kept
	}
	for i := range z.Files {
		z.Files[i] = File{}
	}
	z.br.Reset(nil)
	z.zipr = nil
	z.sr = sectionReader{}
	z.bytesR.Reset(nil)
	dirPool.Put(z)
}

// find returns the record named name whatever the case of its letters, as torch's reader
// (miniz, mz_zip_reader_locate_file) finds records — archive/DATA.PKL answers data.pkl —
// the last one of that name as a map filled in directory order would hold, or nil. Names
// that differ only in case make the lookup ambiguous (caseClash).
func (z *Dir) Find(name string) *File {
	i, ok := slices.BinarySearchFunc(z.sorted, name, func(k int32, name string) int {
		return foldCompare(z.Files[k].Name, name)
	})
	if !ok {
		return nil
	}
	for i+1 < len(z.sorted) && foldCompare(z.Files[z.sorted[i+1]].Name, name) == 0 {
		i++
	}
	return &z.Files[z.sorted[i]]
}

// caseClash returns two records whose names differ only in case, when there are: torch's
// reader may open either for one name.
func (z *Dir) CaseClash() (a, b string, ok bool) {
	for i := 1; i < len(z.sorted); i++ {
		x, y := z.Files[z.sorted[i-1]].Name, z.Files[z.sorted[i]].Name
		if foldCompare(x, string(y)) == 0 && !bytes.Equal(x, y) {
			return string(x), string(y), true
		}
	}
	return "", "", false
}

// foldCompare compares a name with ASCII letters folded to lower case, as miniz's
// MZ_TOLOWER does.
func foldCompare(a []byte, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := lower(a[i]), lower(b[i])
		if x != y {
			return int(x) - int(y)
		}
	}
	return len(a) - len(b)
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

type directoryEnd struct {
	directoryRecords uint64
	directorySize    uint64
	directoryOffset  uint64
}

// init is archive/zip's Reader.init.
func (z *Dir) init(r io.ReaderAt, data []byte, size int64) error {
	end, baseOffset, err := z.readDirectoryEnd(r, data, size)
	if err != nil {
		return err
	}
	z.Layout.Used.Records, z.Layout.Used.DirSize, z.Layout.Used.DirOffset = end.directoryRecords, end.directorySize, end.directoryOffset
	z.Layout.Base = baseOffset
	start := baseOffset + int64(end.directoryOffset)
	var rd io.Reader
	if data != nil {
		z.bytesR.Reset(data[start:size])
		rd = &z.bytesR
	} else {
		z.sr = sectionReader{r: r, off: start, limit: size}
		z.br.Reset(&z.sr)
		rd = z.br
	}
	// As archive/zip: headers are read until a bad one, and the count is compared modulo
	// 65536 only.
	for {
		f := File{dir: z}
		err = z.readDirectoryHeader(&f, rd)
		if err == zip.ErrFormat || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return err
		}
		f.HeaderOffset += baseOffset
		z.Files = append(z.Files, f)
		z.Layout.DirRead += z.headerLen
	}
	if uint16(len(z.Files)) != uint16(end.directoryRecords) {
		return err
	}
	for i := range z.Files {
		z.Files[i].Name = z.names[z.spans[2*i]:z.spans[2*i+1]:z.spans[2*i+1]]
		z.sorted = append(z.sorted, int32(i))
	}
	slices.SortStableFunc(z.sorted, func(a, b int32) int { return foldCompare(z.Files[a].Name, string(z.Files[b].Name)) })
	return nil
}

// readDirectoryEnd is archive/zip's: the end record in the last 1 KiB, else the last
// 65 KiB; the zip64 records when its fields are saturated; the base offset of data
// prepended to the archive.
func (z *Dir) readDirectoryEnd(r io.ReaderAt, data []byte, size int64) (directoryEnd, int64, error) {
	var buf []byte
	var directoryEndOffset int64
	for i, bLen := range []int64{1024, 65 * 1024} {
		bLen = min(bLen, size)
		if data != nil {
			buf = data[size-bLen : size]
		} else {
			if int64(cap(z.end)) < bLen {
				z.end = make([]byte, bLen)
			}
			buf = z.end[:bLen]
			if _, err := r.ReadAt(buf, size-bLen); err != nil && err != io.EOF {
				return directoryEnd{}, 0, err
			}
			z.tail, z.tailOff = buf, size-bLen
		}
		if p := findSignatureInBlock(buf); p >= 0 {
			buf = buf[p:]
			directoryEndOffset = size - bLen + int64(p)
			break
		}
		if i == 1 || bLen == size {
			return directoryEnd{}, 0, ErrNoDirectoryEnd
		}
	}
	b := buf[4:]
	d := directoryEnd{
		directoryRecords: uint64(binary.LittleEndian.Uint16(b[6:])),
		directorySize:    uint64(binary.LittleEndian.Uint32(b[8:])),
		directoryOffset:  uint64(binary.LittleEndian.Uint32(b[12:])),
	}
	if l := int(binary.LittleEndian.Uint16(b[16:])); l > len(b)-18 {
		return directoryEnd{}, 0, errors.New("zip: invalid comment length")
	}
	z.Layout.End, z.Layout.EndLen = directoryEndOffset, directoryEndLen+int64(binary.LittleEndian.Uint16(b[16:]))
	z.Layout.Records, z.Layout.DirSize, z.Layout.DirOffset = d.directoryRecords, d.directorySize, d.directoryOffset
	if err := z.zip64Layout(r, data, size); err != nil {
		return directoryEnd{}, 0, err
	}
	if d.directoryRecords == 0xffff || d.directorySize == 0xffff || d.directoryOffset == 0xffffffff {
		p, err := z.findDirectory64End(r, directoryEndOffset)
		if err == nil && p >= 0 {
			directoryEndOffset = p
			err = z.readDirectory64End(r, p, &d)
		}
		if err != nil {
			return directoryEnd{}, 0, err
		}
	}
	const maxInt64 = uint64(1<<63 - 1)
	if d.directorySize > maxInt64 || d.directoryOffset > maxInt64 {
		return directoryEnd{}, 0, zip.ErrFormat
	}
	baseOffset := directoryEndOffset - int64(d.directorySize) - int64(d.directoryOffset)
	if o := baseOffset + int64(d.directoryOffset); o < 0 || o >= size {
		return directoryEnd{}, 0, zip.ErrFormat
	}
	// A directory end that asks for a base offset, where one of 0 finds a valid header,
	// gets 0 (archive/zip has seen files with a wrong base offset).
	if baseOffset > 0 {
		off := int64(d.directoryOffset)
		var f File
		mark := len(z.names)
		z.sr = sectionReader{r: r, off: off, limit: size}
		err := z.readDirectoryHeader(&f, &z.sr)
		z.names, z.spans = z.names[:mark], z.spans[:0]
		if err == nil {
			baseOffset = 0
		}
	}
	return d, baseOffset, nil
}

// zip64Layout fills in the Layout's zip64 fields: the locator right before the end record
// and the zip64 end record it leads to, whatever the end record's fields (archive/zip
// reads them only when those are saturated).
func (z *Dir) zip64Layout(r io.ReaderAt, data []byte, size int64) error {
	l := &z.Layout
	loc := l.End - directory64LocLen
	if loc < 0 {
		return nil
	}
	buf, err := z.at(r, data, size, loc, directory64LocLen)
	if err != nil || binary.LittleEndian.Uint32(buf) != directory64LocSignature {
		return err
	}
	l.Zip64Loc = loc
	at := binary.LittleEndian.Uint64(buf[8:])
	if at > uint64(loc) {
		return nil
	}
	l.Zip64At = int64(at)
	if l.Zip64At > loc-directory64EndLen {
		return nil
	}
	buf, err = z.at(r, data, size, l.Zip64At, directory64EndLen)
	if err != nil || binary.LittleEndian.Uint32(buf) != directory64EndSignature {
		return err
	}
	n := binary.LittleEndian.Uint64(buf[4:])
	if n > uint64(loc-l.Zip64At) || n+12 < directory64EndLen || n+12 > uint64(loc-l.Zip64At) {
		return nil
	}
	l.Zip64Len = int64(n) + 12
	l.Zip64Records = binary.LittleEndian.Uint64(buf[32:])
	l.Zip64DirSize = binary.LittleEndian.Uint64(buf[40:])
	l.Zip64DirOffset = binary.LittleEndian.Uint64(buf[48:])
	return nil
}

// at returns the n bytes at off (inside the archive): a slice of data or of the tail read
// with the end record, else read into the scratch buffer.
func (z *Dir) at(r io.ReaderAt, data []byte, size, off, n int64) ([]byte, error) {
	if data != nil {
		return data[off : off+n], nil
	}
	if off >= z.tailOff && off+n <= z.tailOff+int64(len(z.tail)) {
		return z.tail[off-z.tailOff : off-z.tailOff+n], nil // read with the end record
	}
	buf := z.scratch[:n]
	if _, err := r.ReadAt(buf, off); err != nil && !(err == io.EOF && off+n == size) {
		return nil, err
	}
	return buf, nil
}

func findSignatureInBlock(b []byte) int {
	for i := len(b) - directoryEndLen; i >= 0; i-- {
		if b[i] == 'P' && b[i+1] == 'K' && b[i+2] == 0x05 && b[i+3] == 0x06 {
			n := int(b[i+directoryEndLen-2]) | int(b[i+directoryEndLen-1])<<8
			if n+directoryEndLen+i > len(b) {
				return -1 // a truncated comment
			}
			return i
		}
	}
	return -1
}

func (z *Dir) findDirectory64End(r io.ReaderAt, directoryEndOffset int64) (int64, error) {
	locOffset := directoryEndOffset - directory64LocLen
	if locOffset < 0 {
		return -1, nil
	}
	buf := z.scratch[:directory64LocLen]
	if _, err := r.ReadAt(buf, locOffset); err != nil {
		return -1, err
	}
	if binary.LittleEndian.Uint32(buf) != directory64LocSignature || binary.LittleEndian.Uint32(buf[4:]) != 0 || binary.LittleEndian.Uint32(buf[16:]) != 1 {
		return -1, nil
	}
	return int64(binary.LittleEndian.Uint64(buf[8:])), nil
}

func (z *Dir) readDirectory64End(r io.ReaderAt, offset int64, d *directoryEnd) error {
	buf := z.scratch[:directory64EndLen]
	if _, err := r.ReadAt(buf, offset); err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(buf) != directory64EndSignature {
		return zip.ErrFormat
	}
	d.directoryRecords = binary.LittleEndian.Uint64(buf[32:])
	d.directorySize = binary.LittleEndian.Uint64(buf[40:])
	d.directoryOffset = binary.LittleEndian.Uint64(buf[48:])
	return nil
}

// readDirectoryHeader is archive/zip's, keeping only what readers use; the name is
// appended to z.names (its span to z.spans).
func (z *Dir) readDirectoryHeader(f *File, r io.Reader) error {
	buf := z.scratch[:directoryHeaderLen]
	if _, err := io.ReadFull(r, buf); err != nil {
		return err
	}
	le := binary.LittleEndian
	if le.Uint32(buf) != directoryHeaderSignature {
		return zip.ErrFormat
	}
	f.Flags = le.Uint16(buf[8:])
	f.Method = le.Uint16(buf[10:])
	compressed, uncompressed := le.Uint32(buf[20:]), le.Uint32(buf[24:])
	f.CompressedSize64, f.UncompressedSize64 = uint64(compressed), uint64(uncompressed)
	filenameLen := int(le.Uint16(buf[28:]))
	extraLen := int(le.Uint16(buf[30:]))
	commentLen := int(le.Uint16(buf[32:]))
	f.HeaderOffset = int64(le.Uint32(buf[42:]))
	n := filenameLen + extraLen + commentLen
	if cap(z.d) < n {
		z.d = make([]byte, n)
	}
	d := z.d[:n]
	if _, err := io.ReadFull(r, d); err != nil {
		return err
	}
	z.spans = append(z.spans, len(z.names), len(z.names)+filenameLen)
	z.names = append(z.names, d[:filenameLen]...)
	needUSize := uncompressed == ^uint32(0)
	needCSize := compressed == ^uint32(0)
	needHeaderOffset := f.HeaderOffset == int64(^uint32(0))
	for extra := d[filenameLen : filenameLen+extraLen]; len(extra) >= 4; {
		tag, fieldSize := le.Uint16(extra), int(le.Uint16(extra[2:]))
		extra = extra[4:]
		if len(extra) < fieldSize {
			break
		}
		field := extra[:fieldSize]
		extra = extra[fieldSize:]
		if tag != zip64ExtraID {
			continue
		}
		if needUSize {
			needUSize = false
			if len(field) < 8 {
				return zip.ErrFormat
			}
			f.UncompressedSize64, field = le.Uint64(field), field[8:]
		}
		if needCSize {
			needCSize = false
			if len(field) < 8 {
				return zip.ErrFormat
			}
			f.CompressedSize64, field = le.Uint64(field), field[8:]
		}
		if needHeaderOffset {
			needHeaderOffset = false
			if len(field) < 8 {
				return zip.ErrFormat
			}
			f.HeaderOffset, field = int64(le.Uint64(field)), field[8:]
		}
	}
	if needCSize || needHeaderOffset {
		return zip.ErrFormat
	}
	z.headerLen = directoryHeaderLen + int64(n)
	return nil
}

// sectionReader reads r sequentially from off to limit, as io.SectionReader does; a value,
// so that it lives in Dir rather than in an allocation of its own.
type sectionReader struct {
	r          io.ReaderAt
	off, limit int64
}

func (s *sectionReader) Read(p []byte) (int, error) {
	if s.off >= s.limit {
		return 0, io.EOF
	}
	if max := s.limit - s.off; int64(len(p)) > max {
		p = p[:max]
	}
	n, err := s.r.ReadAt(p, s.off)
	s.off += int64(n)
	return n, err
}
