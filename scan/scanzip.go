package scan

import (
	"bytes"
	"cmp"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/internal/zipdir"
	"github.com/ckpt-dev/ckpt/storage"
)

const (
	zipMagic       = "PK\x03\x04"
	zipCentralSig  = "PK\x01\x02"
	zipEndSig      = "PK\x05\x06"
	zip64EndSig    = "PK\x06\x06"
	zip64LocSig    = "PK\x06\x07"
	zipDescSig     = "PK\x07\x08"
	zipEndLen      = 22
	zip64LocLen    = 20
	zipCentralLen  = 46
	zipLocalLen    = 30
	zipFlagDescr   = 0x8
	zipMethodStore = 0
	zipMethodFlate = 8
)

// zipEntry is one record of a zip archive, from its central-directory entry and local header.
type zipEntry struct {
	Name             string
	Flags, Method    uint16
	CompSize, Size   uint64
	HeaderOff        int64 // local header
	DataOff, DataEnd int64 // the record's (compressed) bytes
	End              int64 // past the data descriptor, if any
}

// zipDir is a parsed zip archive: its records and the spans of data they account for.
type zipDir struct {
	Entries []zipEntry
	// spans are the byte ranges the archive's structures cover: local records, central
	// directory, zip64 records, end record and comment.
	spans []span
	// End is where the end-of-central-directory record and its comment end.
	End int64
}

type span struct {
	from, to int64
	what     string
}

// zipSource is a zip archive's bytes: in memory (memZip), or an object in object storage
// read in ranges (remoteZip), so that scanning a remote archive reads its directory,
// local headers and pickles, not its tensors.
type zipSource interface {
	Len() int64
	// Bytes returns the n bytes at off, which must lie inside the archive.
	Bytes(off, n int64) ([]byte, error)
}

// sourceReader reads a zipSource as an io.ReaderAt, for the central-directory reader.
type sourceReader struct{ zipSource }

func (s sourceReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= s.Len() {
		return 0, io.EOF
	}
	n := min(int64(len(p)), s.Len()-off)
	b, err := s.Bytes(off, n)
	if err != nil {
		return 0, err
	}
	copy(p, b)
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// memZip is an archive held in memory (a mapped file, or part of one).
type memZip []byte

func (m memZip) Len() int64 { return int64(len(m)) }

func (m memZip) Bytes(off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off > int64(len(m)) || n > int64(len(m))-off {
		return nil, io.ErrUnexpectedEOF
	}
	return m[off : off+n], nil
}

// remoteZip is an archive in object storage. It keeps what it read (the directory, local
// headers and pickles, which the scan goes back to) for the scan of the one file, sorted by
// offset so that finding a range costs a binary search, not a pass over every record's.
type remoteZip struct {
	f       storage.File
	segs    []remoteSeg // by offset
	longest int64       // the longest segment's length
}

type remoteSeg struct {
	off  int64
	data []byte
}

// maxRemoteZipRead bounds one range a remote archive's scan reads (its central directory,
// a pickle): more than any real torch.save archive has, less than a forged length could
// make it allocate.
const maxRemoteZipRead = 256 << 20

func (r *remoteZip) Len() int64 { return r.f.Size() }

func (r *remoteZip) Bytes(off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off > r.Len() || n > r.Len()-off {
		return nil, io.ErrUnexpectedEOF
	}
	if b := r.held(off, n); b != nil {
		return b, nil
	}
	if n > maxRemoteZipRead {
		return nil, fmt.Errorf("%w: %d bytes at byte %d, more than the %d a remote archive's scan reads at once", ckpterr.ErrUnsupported, n, off, int64(maxRemoteZipRead))
	}
	b, err := storage.ReadRange(r.f, off, n)
	if err != nil {
		return nil, err
	}
	r.add(remoteSeg{off, b})
	return b, nil
}

// zipReadAhead is how far past a miss ReadAt reads: the central-directory reader asks for
// headers a few bytes at a time, and a directory of thousands of records then costs a
// round trip per zipReadAhead bytes, not per record.
const zipReadAhead = 1 << 20

// ReadAt serves the central-directory reader: from a segment read before, else by reading
// the range and up to zipReadAhead bytes past it.
func (r *remoteZip) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off > r.Len() {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.Len()-off)
	b := r.held(off, n)
	if b == nil {
		var err error
		if b, err = r.Bytes(off, min(max(n, zipReadAhead), r.Len()-off)); err != nil {
			return 0, err
		}
	}
	copy(p, b[:n])
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// held returns the n bytes at off from a segment read before, or nil.
func (r *remoteZip) held(off, n int64) []byte {
	// A segment holding [off, off+n) starts in [off+n-longest, off].
	i, _ := slices.BinarySearchFunc(r.segs, off+n-r.longest, func(s remoteSeg, at int64) int { return cmp.Compare(s.off, at) })
	for ; i < len(r.segs) && r.segs[i].off <= off; i++ {
		if s := r.segs[i]; off+n <= s.off+int64(len(s.data)) {
			return s.data[off-s.off : off-s.off+n : off-s.off+n]
		}
	}
	return nil
}

// add keeps segs.
func (r *remoteZip) add(segs ...remoteSeg) {
	for _, s := range segs {
		if s.data != nil {
			r.segs = append(r.segs, s)
			r.longest = max(r.longest, int64(len(s.data)))
		}
	}
	slices.SortStableFunc(r.segs, func(a, b remoteSeg) int { return cmp.Compare(a.off, b.off) })
}

// prefetch reads the n bytes at each of offs (fewer at the archive's end; none already
// read) in parallel — local headers, data descriptors — so that an archive of thousands of
// records costs round trips in proportion to the requests in flight, not to the records.
func (r *remoteZip) prefetch(offs []int64, n int64) {
	segs := make([]remoteSeg, len(offs))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, off := range offs {
		if off < 0 || off >= r.Len() || r.held(off, min(n, r.Len()-off)) != nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if b, err := storage.ReadRange(r.f, off, min(n, r.Len()-off)); err == nil {
				segs[i] = remoteSeg{off, b}
			}
		}()
	}
	wg.Wait()
	r.add(segs...)
}

// readZipDir parses the zip archive in data with the one central-directory reader
// (zipdir, archive/zip's rules), then holds it to what a reader following other rules —
// torch's miniz, which reads the zip64 end record whenever a locator leads to one — would
// read the same way: the directory must end where the end record (or the zip64 end
// record) starts, hold exactly the records the end record counts and nothing else, the
// end record and the zip64 end record must agree, and no data may precede the archive.
// Then each entry's local header is read. Every length is checked against the archive
// before use.
func readZipDir(data zipSource) (*zipDir, error) {
	n := data.Len()
	var zd *zipdir.Dir
	var err error
	switch z := data.(type) {
	case memZip:
		zd, err = zipdir.Read(bytes.NewReader(z), z, n)
	case io.ReaderAt:
		zd, err = zipdir.Read(z, nil, n)
	default:
		zd, err = zipdir.Read(sourceReader{data}, nil, n)
	}
	if err != nil {
		return nil, zipdir.Explain(err, n)
	}
	defer zd.Release()
	l := zd.Layout
	d := &zipDir{End: l.End + l.EndLen}
	d.spans = append(d.spans, span{l.End, d.End, "end of central directory"})
	count, cdSize, cdOff := l.Records, l.DirSize, l.DirOffset
	cdEnd := l.End // where the central directory must end
	if l.Zip64Loc < 0 && (count == 0xffff || cdSize == 0xffffffff || cdOff == 0xffffffff) {
		return nil, errors.New("zip: zip64 end record expected but no locator")
	}
	if l.Zip64Loc >= 0 {
		// A zip64 locator before the end record (miniz, torch's writer, always writes one)
		// leads to the zip64 end record, whose counts torch's reader takes.
		if l.Zip64Len == 0 {
			return nil, fmt.Errorf("zip: zip64 end record at byte %d is missing or has a bad size", l.Zip64At)
		}
		d.spans = append(d.spans, span{l.Zip64Loc, l.End, "zip64 locator"}, span{l.Zip64At, l.Zip64At + l.Zip64Len, "zip64 end record"})
		count, cdSize, cdOff = l.Zip64Records, l.Zip64DirSize, l.Zip64DirOffset
		cdEnd = l.Zip64At
	}
	if l.Used.Records != count || l.Used.DirSize != cdSize || l.Used.DirOffset != cdOff {
		return nil, fmt.Errorf("zip: the end record (%d entries, %d bytes at byte %d) and the zip64 end record (%d entries, %d bytes at byte %d) disagree: zip readers would read different directories", l.Records, l.DirSize, l.DirOffset, l.Zip64Records, l.Zip64DirSize, l.Zip64DirOffset)
	}
	if cdOff > uint64(cdEnd) || cdSize != uint64(cdEnd)-cdOff {
		return nil, fmt.Errorf("zip: central directory (byte %d, %d bytes) does not end where the end record starts (byte %d)", cdOff, cdSize, cdEnd)
	}
	if l.Base != 0 {
		return nil, fmt.Errorf("zip: %d bytes precede the archive its directory describes", l.Base)
	}
	if uint64(len(zd.Files)) != count {
		return nil, fmt.Errorf("zip: central directory holds %d entries, its end record says %d", len(zd.Files), count)
	}
	if l.DirRead != int64(cdSize) {
		return nil, fmt.Errorf("zip: %d bytes of the %d-byte central directory belong to no entry", int64(cdSize)-l.DirRead, cdSize)
	}
	d.spans = append(d.spans, span{int64(cdOff), cdEnd, "central directory"})
	d.Entries = make([]zipEntry, len(zd.Files))
	hdrs := make([]uint64, len(zd.Files))
	for i, f := range zd.Files {
		d.Entries[i] = zipEntry{Name: string(f.Name), Flags: f.Flags, Method: f.Method, CompSize: f.CompressedSize64, Size: f.UncompressedSize64}
		hdrs[i] = uint64(f.HeaderOffset)
	}
	if r, ok := data.(*remoteZip); ok {
		// A local header: its fixed part, the name and an extra field (torch's aligns the
		// data to 64 bytes); a longer one is read again when parsed.
		offs := make([]int64, 0, len(hdrs))
		for _, h := range hdrs {
			if h < uint64(n) {
				offs = append(offs, int64(h))
			}
		}
		r.prefetch(offs, zipLocalLen+256+128)
	}
	for i := range d.Entries {
		if err := localRecord(data, &d.Entries[i], hdrs[i]); err != nil {
			return nil, err
		}
	}
	if r, ok := data.(*remoteZip); ok {
		// The data descriptors after the records (torch's writer puts one after each).
		var offs []int64
		for _, e := range d.Entries {
			if e.Flags&zipFlagDescr != 0 {
				offs = append(offs, e.DataEnd)
			}
		}
		r.prefetch(offs, zipDescLen)
	}
	for i := range d.Entries {
		e := &d.Entries[i]
		if err := descriptor(data, e); err != nil {
			return nil, err
		}
		d.spans = append(d.spans, span{e.HeaderOff, e.End, fmt.Sprintf("record %q", e.Name)})
	}
	return d, nil
}

// localRecord reads the local header of e at hdr and locates its data.
func localRecord(data zipSource, e *zipEntry, hdr uint64) error {
	n := data.Len()
	var lh []byte
	if n >= zipLocalLen && hdr <= uint64(n-zipLocalLen) {
		lh, _ = data.Bytes(int64(hdr), zipLocalLen)
	}
	if lh == nil || string(lh[:4]) != zipMagic {
		return fmt.Errorf("record %q: no local header at byte %d", e.Name, hdr)
	}
	h := int64(hdr)
	e.HeaderOff = h
	e.DataOff = h + zipLocalLen + int64(le16(lh[26:])) + int64(le16(lh[28:]))
	if e.CompSize > uint64(n) || e.DataOff > n-int64(e.CompSize) {
		return fmt.Errorf("record %q: %d bytes at byte %d run past the end of the %d-byte archive", e.Name, e.CompSize, e.DataOff, n)
	}
	e.DataEnd = e.DataOff + int64(e.CompSize)
	e.End = e.DataEnd
	return nil
}

// zipDescLen is the longest data descriptor: signature, CRC, zip64 sizes.
const zipDescLen = 4 + 4 + 8 + 8

// descriptor locates the data descriptor after the data of e, if its flags say one follows.
func descriptor(data zipSource, e *zipEntry) error {
	n := data.Len()
	if e.Flags&zipFlagDescr != 0 {
		// A data descriptor follows: optional signature, CRC, sizes (8 bytes each in zip64).
		l := int64(12)
		if e.CompSize >= 0xffffffff || e.Size >= 0xffffffff {
			l = 20
		}
		if sig, err := data.Bytes(e.DataEnd, 4); err == nil && string(sig) == zipDescSig {
			l += 4
		}
		if e.DataEnd+l > n {
			return fmt.Errorf("record %q: data descriptor runs past the end of the archive", e.Name)
		}
		e.End += l
	}
	return nil
}

// gaps returns the bytes of [0, size) no span covers and the spans that overlap.
func (d *zipDir) check(size int64) error {
	sp := append([]span(nil), d.spans...)
	sort.Slice(sp, func(i, j int) bool { return sp[i].from < sp[j].from })
	var at int64
	for i, s := range sp {
		if s.from > at {
			return fmt.Errorf("%d bytes at byte %d belong to no zip record", s.from-at, at)
		}
		if s.from < at {
			return fmt.Errorf("%s at byte %d overlaps %s", s.what, s.from, sp[i-1].what)
		}
		at = s.to
	}
	if at < size {
		return fmt.Errorf("%d bytes at byte %d after the end of the zip archive", size-at, at)
	}
	return nil
}

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// maxPickleRecord bounds a deflated pickle record inflated for scanning.
const maxPickleRecord = 256 << 20

// errBeyondLimits marks a record the scanner does not read whole: a loader would.
var errBeyondLimits = errors.New("beyond the scanner's limits")

// inflateRecord inflates a deflated record the scanner reads whole — exactly the size its
// directory entry gives, as torch's and Python's zip readers check — up to
// maxPickleRecord bytes and torchzip.MaxInflateRatio times its compressed size (beyond
// torchzip.InflateRatioFloor): a larger one is beyond the scanner's limits
// (errBeyondLimits), not a broken record — the loader inflates and unpickles it.
func inflateRecord(raw []byte, size uint64) ([]byte, error) {
	if bound := uint64(max(int64(len(raw))*torchzip.MaxInflateRatio, torchzip.InflateRatioFloor)); size > maxPickleRecord || size > bound {
		return nil, fmt.Errorf("a deflated record of %d bytes inflating to %d is %w (it inflates at most %d, and %d× its size): what the loader unpickles from it is unknown", len(raw), size, errBeyondLimits, int64(maxPickleRecord), torchzip.MaxInflateRatio)
	}
	w := bytes.NewBuffer(make([]byte, 0, min(size, 1<<20)))
	n, err := io.Copy(w, io.LimitReader(flate.NewReader(bytes.NewReader(raw)), int64(size)+1))
	if err != nil {
		return nil, fmt.Errorf("inflate: %v", err)
	}
	if uint64(n) != size {
		return nil, fmt.Errorf("inflates to more than the %d bytes its directory entry gives", size)
	}
	return w.Bytes(), nil
}

// zipArchive scans a torch zip archive held in data (at base within file), as torch.load
// reads it: the records must all lie in one top folder (torch refuses others), a
// constants.pkl record makes it a TorchScript archive (torch.load runs torch.jit.load on
// it), and every .pkl record is scanned, data.pkl first. torch's zip reader (miniz) finds
// a record whatever the case of its name — archive/DATA.PKL answers a lookup of data.pkl
// and, beside archive/data.pkl, may be the one it opens — so record names are matched
// without case, every record that may answer scanned. It returns the layout.
func (s *scanner) zipArchive(file string, data zipSource, base int64, where string) string {
	at := func(off int64) int64 { return base + off }
	d, err := readZipDir(data)
	if err != nil {
		s.problem("torch-zip", file, at(0), ckpterr.ErrCorrupt, "%s", joinWhere(where, err.Error()))
		return layoutZip
	}
	if err := d.check(data.Len()); err != nil {
		s.problem("torch-zip", file, at(0), ckpterr.ErrCorrupt, "%s", joinWhere(where, "zip: "+err.Error()))
	}
	layout := layoutZip
	if len(d.Entries) == 0 {
		s.problem("torch-zip", file, at(0), ckpterr.ErrCorrupt, "%s", joinWhere(where, "empty zip archive"))
		return layout
	}
	prefix := ""
	if i := strings.IndexByte(d.Entries[0].Name, '/'); i >= 0 {
		prefix = d.Entries[0].Name[:i+1]
	} else {
		s.problem("torch-zip", file, at(d.Entries[0].HeaderOff), ckpterr.ErrCorrupt, "%s", joinWhere(where, fmt.Sprintf("record %q is not in a subdirectory: torch refuses the archive", d.Entries[0].Name)))
	}
	var pkls []zipEntry
	for _, e := range d.Entries {
		if prefix != "" && !strings.HasPrefix(e.Name, prefix) {
			s.problem("torch-zip", file, at(e.HeaderOff), ckpterr.ErrCorrupt, "%s", joinWhere(where, fmt.Sprintf("record %q is outside the archive folder %s: torch refuses the archive", e.Name, prefix)))
		}
		if e.Name == prefix+"constants.pkl" {
			layout = layoutTorchScript
			s.res.Code = append(s.res.Code, Finding{File: file, Where: joinWhere(where, e.Name), Offset: at(e.HeaderOff), Class: pickle.Unsafe,
				Why: "TorchScript archive: torch.load hands it to torch.jit.load, which runs its code"})
		}
		if len(e.Name) >= 4 && strings.EqualFold(e.Name[len(e.Name)-4:], ".pkl") {
			pkls = append(pkls, e)
		}
	}
	isData := func(e zipEntry) bool { return strings.EqualFold(e.Name, prefix+"data.pkl") }
	sort.SliceStable(pkls, func(i, j int) bool { return isData(pkls[i]) && !isData(pkls[j]) })
	if len(pkls) == 0 || !isData(pkls[0]) {
		s.problem("torch-zip", file, at(0), ckpterr.ErrCorrupt, "%s", joinWhere(where, fmt.Sprintf("no %sdata.pkl record (in any case): torch.load cannot read the archive", prefix)))
	}
	for _, e := range pkls {
		ps := PickleScan{File: file, Where: joinWhere(where, e.Name), Base: at(e.DataOff)}
		raw, err := data.Bytes(e.DataOff, e.DataEnd-e.DataOff)
		if err != nil {
			s.problem("torch-zip", file, at(e.DataOff), ckpterr.ErrCorrupt, "%s: %v", ps.Where, err)
			continue
		}
		switch e.Method {
		case zipMethodStore:
			if e.CompSize != e.Size {
				s.problem("torch-zip", file, at(e.HeaderOff), ckpterr.ErrCorrupt, "%s: stored record of %d bytes says it holds %d", ps.Where, e.CompSize, e.Size)
			}
		case zipMethodFlate:
			ps.Inflated = true
			if raw, err = inflateRecord(raw, e.Size); err != nil {
				if errors.Is(err, errBeyondLimits) {
					s.beyondLimits(file, at(e.DataOff), ps.Where, err.Error())
				} else {
					s.problem("torch-zip", file, at(e.DataOff), ckpterr.ErrCorrupt, "%s: %v", ps.Where, err)
				}
				continue
			}
		default:
			s.problem("torch-zip", file, at(e.DataOff), ckpterr.ErrUnsupported, "%s: compression method %d", ps.Where, e.Method)
			continue
		}
		ps.Report, ps.Err = pickle.ScanOne(raw)
		if ps.Err == nil && ps.Report.End != int64(len(raw)) {
			s.problem("torch-zip", file, at(e.DataOff)+ps.Report.End, ckpterr.ErrCorrupt, "%s: %d bytes after the pickle's STOP", ps.Where, int64(len(raw))-ps.Report.End)
		}
		s.addPickle(ps)
		s.pickleProblem(ps)
	}
	return layout
}

// concatenated scans a DCP data file without the metadata that locates its items: torch.save
// archives (or legacy streams) back to back, each archive's end found by walking its local
// records to its central directory and end record (not by searching for a signature, which
// a tensor's bytes may contain).
func (s *scanner) concatenated(file string, data []byte) {
	var off int64
	for i := 1; off < int64(len(data)); i++ {
		where := fmt.Sprintf("archive at byte %d", off)
		rest := data[off:]
		if len(rest) >= 4 && string(rest[:4]) == zipMagic {
			end, err := zipForwardEnd(rest)
			if err != nil {
				s.problem("torch-zip", file, off, ckpterr.ErrCorrupt, "%s: %v", where, err)
				return
			}
			s.zipArchive(file, memZip(rest[:end]), off, where)
			off += end
			continue
		}
		if safetensors.LooksLike(rest) {
			return // the safetensors blob of SerializationFormat.SAFETENSORS runs to the end
		}
		if s.legacy(file, rest, off, fmt.Sprintf("item at byte %d", off), false) == "" {
			s.problem("torch-zip", file, off, ckpterr.ErrCorrupt, "%d bytes at byte %d are neither an archive nor a pickle", len(rest), off)
		}
		return
	}
}

// zipForwardEnd returns the length of the zip archive at the start of data, walking local
// records (whose sizes must be in their headers) to the central directory and end record.
func zipForwardEnd(data []byte) (int64, error) {
	n := int64(len(data))
	var p int64
	for p+4 <= n && string(data[p:p+4]) == zipMagic {
		if p+zipLocalLen > n {
			return 0, fmt.Errorf("truncated local header at byte %d", p)
		}
		flags := le16(data[p+6:])
		comp := int64(le32(data[p+18:]))
		nameLen, extraLen := int64(le16(data[p+26:])), int64(le16(data[p+28:]))
		if flags&zipFlagDescr != 0 {
			return 0, fmt.Errorf("record at byte %d has its sizes in a data descriptor", p)
		}
		if comp == 0xffffffff {
			// zip64: the local extra field holds the sizes (uncompressed, then compressed).
			ex := data[min(p+zipLocalLen+nameLen, n):min(p+zipLocalLen+nameLen+extraLen, n)]
			comp = -1
			for len(ex) >= 4 {
				id, sz := le16(ex), int(le16(ex[2:]))
				if sz > len(ex)-4 {
					break
				}
				if id == 1 && sz >= 16 {
					comp = int64(le64(ex[12:]))
				}
				ex = ex[4+sz:]
			}
			if comp < 0 {
				return 0, fmt.Errorf("zip64 record at byte %d has no sizes", p)
			}
		}
		next := p + zipLocalLen + nameLen + extraLen + comp
		if comp < 0 || next > n || next < p {
			return 0, fmt.Errorf("record at byte %d runs past the end of the file", p)
		}
		p = next
	}
	for p+4 <= n && string(data[p:p+4]) == zipCentralSig {
		if p+zipCentralLen > n {
			return 0, fmt.Errorf("truncated central directory entry at byte %d", p)
		}
		p += zipCentralLen + int64(le16(data[p+28:])) + int64(le16(data[p+30:])) + int64(le16(data[p+32:]))
	}
	if p+4 <= n && string(data[p:p+4]) == zip64EndSig {
		if p+12 > n {
			return 0, fmt.Errorf("truncated zip64 end record at byte %d", p)
		}
		l := int64(le64(data[p+4:]))
		if l < 0 || l > n-p-12 {
			return 0, fmt.Errorf("zip64 end record at byte %d runs past the end of the file", p)
		}
		p += 12 + l
		if p+4 <= n && string(data[p:p+4]) == zip64LocSig {
			p += zip64LocLen
		}
	}
	if p+zipEndLen > n || string(data[p:p+4]) != zipEndSig {
		return 0, fmt.Errorf("no end-of-central-directory record at byte %d", p)
	}
	end := p + zipEndLen + int64(le16(data[p+20:]))
	if end > n {
		return 0, fmt.Errorf("end record's comment runs past the end of the file")
	}
	return end, nil
}
