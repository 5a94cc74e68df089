// Package torchzip reads checkpoints in torch.save's zip format (PyTorch 1.6 and later)
// without executing their pickles. The file is mapped into memory; tensors are views of the
// mapped `data/<key>` records, so nothing is copied until a tensor is read.
//
// The layout handled is the one torch's PyTorchStreamReader accepts: every record under one
// top folder of any name (taken from the first central-directory entry), a `data.pkl`
// pickle, `data/<key>` storage records stored uncompressed (deflated ones are decompressed
// into memory), an optional `byteorder` record, zip64 archives, and zero CRCs.
package torchzip

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/torchpickle"
	"github.com/ckpt-dev/ckpt/internal/zipdir"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Format is the name ckpt gives this format.
const Format = "torch-zip"

// Magic is how a torch zip archive starts: a zip local file header with no preamble, which
// is the same test torch.load applies.
var Magic = []byte("PK\x03\x04")

// Open reads the file at path (local: mapped; a gs:// or s3:// object: read in ranges,
// see package storage) as a torch zip checkpoint.
func Open(ctx context.Context, path string) (*statedict.Checkpoint, error) {
	f, err := storage.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	root, err := DecodeAt(f, 0, f.Size(), path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &statedict.Checkpoint{Format: Format, Path: path, Root: root, Closers: []io.Closer{f}}, nil
}

// Decode reads a torch zip archive held in data, a slice of the mapped local file named
// file at base (torch.distributed.checkpoint embeds one archive per tensor): its storages
// are file-backed, so writers and hashing may read their bytes from the file. Tensors
// alias data.
func Decode(data []byte, file string, base int64) (statedict.Value, error) {
	return decode(source{data: data, base: base, size: int64(len(data)), inFile: true}, file)
}

// DecodeBytes reads a torch zip archive held in data that are not the bytes of any file as
// stored — inflated, or read into memory from a bucket object — so its storages are
// memory only. file and base name where the archive came from, for error messages.
// Tensors alias data.
func DecodeBytes(data []byte, file string, base int64) (statedict.Value, error) {
	return decode(source{data: data, base: base, size: int64(len(data))}, file)
}

// DecodeAt reads the torch zip archive of size bytes at base in r, the whole file named
// file. When r is storage.Mapped, tensors alias its bytes as Decode's do; otherwise only the
// zip directory and the small records (data.pkl, version, byteorder) are read up front and
// every storage reads its bytes from r when a tensor is read, so a remote object is never
// read whole.
func DecodeAt(r io.ReaderAt, base, size int64, file string) (statedict.Value, error) {
	if d, ok := storage.Bytes(r); ok {
		if base < 0 || size < 0 || base > int64(len(d)) || size > int64(len(d))-base {
			return nil, &ckpterr.FormatError{Format: Format, File: file, Offset: base, Err: fmt.Errorf("%w: archive of %d bytes runs past the end of the %d-byte file", ckpterr.ErrCorrupt, size, len(d))}
		}
		return Decode(d[base:base+size], file, base)
	}
	var small []byte
	if size <= SmallArchive {
		// One read instead of one per structure (end record, directory, local headers,
		// data.pkl): a DCP data file read with pread holds 300 000 such archives.
		var err error
		if small, err = storage.ReadRange(r, base, size); err != nil {
			return nil, &ckpterr.FormatError{Format: Format, File: file, Offset: base, Err: fmt.Errorf("%w: reading the %d-byte archive: %v", ckpterr.ErrCorrupt, size, err)}
		}
	}
	return DecodeRead(r, base, small, size, file)
}

// DecodeRead is DecodeAt of an archive whose bytes the caller has already read from r at
// base (small, all size of them; nil if not read): the directory and the small records
// come from small, the storages read from r when a tensor is read.
func DecodeRead(r io.ReaderAt, base int64, small []byte, size int64, file string) (statedict.Value, error) {
	if small != nil && int64(len(small)) != size {
		return nil, &ckpterr.FormatError{Format: Format, File: file, Offset: base, Err: fmt.Errorf("%w: %d bytes read of the %d-byte archive", ckpterr.ErrCorrupt, len(small), size)}
	}
	return decode(source{r: r, base: base, size: size, small: small}, file)
}

// SmallArchive is the size up to which an archive not in memory is read whole before its
// directory is parsed; its storages still read their bytes from the file when read.
const SmallArchive = 64 << 10

// source is an archive's bytes: data in memory, or size bytes at base in r — of which
// small, when set, is a copy read up front for the directory and the small records
// (storages still read from r).
type source struct {
	data  []byte
	r     io.ReaderAt
	small []byte
	base  int64
	size  int64
	// inFile says data are the bytes of file at base as stored: storages made from them
	// are file-backed.
	inFile bool
}

// inMemory is the archive's bytes when they are in memory (data or small).
func (s source) inMemory() []byte {
	if s.data != nil {
		return s.data
	}
	return s.small
}

// readerAt is the archive as an io.ReaderAt from its first byte.
func (s source) readerAt() io.ReaderAt {
	if b := s.inMemory(); b != nil {
		return bytes.NewReader(b)
	}
	return io.NewSectionReader(s.r, s.base, s.size)
}

// section is the n bytes at off of the archive as a reader (from 0), reading them only when
// read: a window of the file's own prefetching reader when it has one (a bucket object).
func (s source) section(off, n int64) io.ReaderAt {
	if s.data != nil {
		return bytes.NewReader(s.data[off : off+n])
	}
	r := s.r
	if w, ok := storage.As[statedict.Windower](r); ok {
		r = w.Window(s.base+off, n)
	}
	return io.NewSectionReader(r, s.base+off, n)
}

// slice returns n bytes at off of the archive.
func (s source) slice(off, n int64) ([]byte, error) {
	if b := s.inMemory(); b != nil {
		return b[off : off+n], nil
	}
	return storage.ReadRange(s.r, s.base+off, n)
}

// head returns up to the first n bytes of the archive.
func (s source) head(n int64) []byte {
	b, err := s.slice(0, min(n, s.size))
	if err != nil {
		return nil
	}
	return b
}

func decode(data source, file string) (statedict.Value, error) {
	base := data.base
	fail := func(rec string, off int64, err error) error {
		if off >= 0 {
			off += base
		}
		return &ckpterr.FormatError{Format: Format, File: file, Item: rec, Offset: off, Err: err}
	}
	if !bytes.HasPrefix(data.head(int64(len(Magic))), Magic) {
		return nil, fail("", 0, errors.New("not a torch zip archive (no PK\\x03\\x04 at the start)"))
	}
	zr, err := zipdir.Read(data.readerAt(), data.inMemory(), data.size)
	if err != nil {
		return nil, fail("", -1, zipdir.Explain(err, data.size))
	}
	defer zr.Release()
	if len(zr.Files) == 0 {
		return nil, fail("", -1, errors.New("empty zip archive"))
	}
	first := zr.Files[0].Name
	slash := bytes.IndexByte(first, '/')
	if slash < 0 {
		return nil, fail(string(first), -1, errors.New("file in archive is not in a subdirectory"))
	}
	prefix := string(first[:slash+1])
	for i := range zr.Files {
		if f := &zr.Files[i]; !bytes.HasPrefix(f.Name, first[:slash+1]) {
			// torch's PyTorchStreamReader refuses the archive ("file in archive is not in a
			// subdirectory"): a record beside the archive folder (../../escaped.txt) is
			// nothing torch.save writes.
			return nil, fail(string(f.Name), -1, fmt.Errorf("%w: record is not in the archive folder %s, which torch refuses", ckpterr.ErrCorrupt, prefix))
		}
	}
	if a, b, ok := zr.CaseClash(); ok {
		return nil, fail(b, -1, fmt.Errorf("%w: records %q and %q differ only in case: torch's reader finds either for one name", ckpterr.ErrCorrupt, a, b))
	}
	// records finds a record by its name inside the archive folder, whatever its case.
	records := func(rest string) *zipdir.File { return zr.Find(prefix + rest) }
	// torch.load takes an archive with a record named exactly constants.pkl for TorchScript.
	if c := records("constants.pkl"); c != nil && string(c.Name) == prefix+"constants.pkl" || records(".data/version") != nil && records("version") == nil {
		return nil, fail(prefix+"constants.pkl", -1, fmt.Errorf("%w: this is a TorchScript archive (torch.jit.save), not a torch.save checkpoint", ckpterr.ErrUnsupported))
	}
	read := func(name string) ([]byte, int64, error) {
		f := records(name)
		if f == nil {
			return nil, -1, fail(prefix+name, -1, errors.New("record missing"))
		}
		return record(data, f, func(off int64, err error) error { return fail(string(f.Name), off, err) })
	}
	if err := checkVersion(records, read, fail, prefix); err != nil {
		return nil, err
	}
	bigEndian := false
	if records("byteorder") != nil {
		bo, _, err := read("byteorder")
		if err != nil {
			return nil, err
		}
		switch string(bo) {
		case "little":
		case "big":
			bigEndian = true
		default:
			return nil, fail(prefix+"byteorder", -1, fmt.Errorf("unknown byte order %q", bo))
		}
	}
	pkl, pklOff, err := read("data.pkl")
	if err != nil {
		return nil, err
	}
	resolve := func(req torchpickle.StorageRequest) (*statedict.Storage, error) {
		if req.View != nil {
			return nil, fmt.Errorf("storage %q: view metadata is only valid in the legacy format", req.Key)
		}
		name := "data/" + req.Key
		rec := records(name)
		if rec == nil {
			return nil, fail(prefix+name, -1, fmt.Errorf("%w: record missing", ckpterr.ErrCorrupt))
		}
		nbytes := req.NumEl * int64(req.DType.Size())
		if req.NumEl > 0 && nbytes/req.NumEl != int64(req.DType.Size()) {
			return nil, fail(prefix+name, -1, fmt.Errorf("%w: storage of %d %s elements overflows", ckpterr.ErrCorrupt, req.NumEl, req.DType))
		}
		if rec.Method == zip.Deflate {
			// Inflated lazily, as far as the tensors read, streaming: a small deflated record
			// may claim gigabytes no tensor references.
			off, n, err := storedRange(data.size, rec, func(off int64, err error) error { return fail(string(rec.Name), off, err) })
			if err != nil {
				return nil, err
			}
			if err := checkRatio(rec.UncompressedSize64, n); err != nil {
				return nil, fail(string(rec.Name), off, err)
			}
			if uint64(nbytes) > rec.UncompressedSize64 {
				return nil, fail(prefix+name, off, fmt.Errorf("%w: storage of %d %s elements needs %d bytes, record has %d", ckpterr.ErrCorrupt, req.NumEl, req.DType, nbytes, rec.UncompressedSize64))
			}
			z := newInflater(data.section(off, n), n, int64(rec.UncompressedSize64), base+off, file+": "+string(rec.Name))
			st := statedict.NewReaderStorage(req.Key, req.Location, req.DType, z, base+off, nbytes)
			st.File, st.BigEndian = file, bigEndian
			return st, nil
		}
		if data.data == nil {
			// Read from the file when a tensor is read, never here.
			off, size, err := storedRange(data.size, rec, func(off int64, err error) error { return fail(string(rec.Name), off, err) })
			if err != nil {
				return nil, err
			}
			if nbytes > size {
				return nil, fail(prefix+name, off, fmt.Errorf("%w: storage of %d %s elements needs %d bytes, record has %d", ckpterr.ErrCorrupt, req.NumEl, req.DType, nbytes, size))
			}
			st := statedict.NewReaderStorage(req.Key, req.Location, req.DType, data.r, base+off, nbytes)
			st.File, st.BigEndian = file, bigEndian
			return st, nil
		}
		b, off, err := read(name)
		if err != nil {
			return nil, err
		}
		if nbytes > int64(len(b)) {
			return nil, fail(prefix+name, off, fmt.Errorf("%w: storage of %d %s elements needs %d bytes, record has %d", ckpterr.ErrCorrupt, req.NumEl, req.DType, nbytes, len(b)))
		}
		st := statedict.NewMappedStorage(req.Key, req.Location, req.DType, b[:nbytes])
		st.File, st.Offset, st.BigEndian = file, base+off, bigEndian
		st.FileBacked = data.inFile
		return st, nil
	}
	root, _, err := torchpickle.Load(pkl, resolve, torchpickle.Options{})
	if err != nil {
		if fe := (*ckpterr.FormatError)(nil); errors.As(err, &fe) && fe.Format == Format && fe.File == file {
			return nil, err // a storage record's own error, from resolve
		}
		return nil, fail(prefix+"data.pkl", pklOff, err)
	}
	return root, nil
}

// checkVersion applies torch's rule: a `version` (or `.data/version`) record holding a
// number in 1..10 must exist.
func checkVersion(records func(string) *zipdir.File, read func(string) ([]byte, int64, error), fail func(string, int64, error) error, prefix string) error {
	name := "version"
	if records(name) == nil {
		name = ".data/version"
	}
	b, off, err := read(name)
	if err != nil {
		return err
	}
	v, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if perr != nil || v < 1 || v > 10 {
		return fail(prefix+name, off, fmt.Errorf("unsupported archive version %q (torch reads 1..10)", b))
	}
	return nil
}

// storedRange returns where a record's stored (possibly compressed) bytes lie in an archive
// of size bytes, checked to lie inside it.
func storedRange(size int64, f *zipdir.File, fail func(int64, error) error) (int64, int64, error) {
	off, err := f.DataOffset()
	if err != nil {
		return -1, 0, fail(-1, fmt.Errorf("%w: %v", ckpterr.ErrCorrupt, err))
	}
	n := int64(f.CompressedSize64)
	if n < 0 || off < 0 || off > size || n > size-off {
		return off, 0, fail(off, fmt.Errorf("%w: record of %d bytes runs past the end of the %d-byte archive", ckpterr.ErrCorrupt, f.CompressedSize64, size))
	}
	return off, n, nil
}

// rawRecord returns a record's stored (possibly compressed) bytes, checked to lie inside
// the archive, and their offset.
func rawRecord(data source, f *zipdir.File, fail func(int64, error) error) ([]byte, int64, error) {
	off, n, err := storedRange(data.size, f, fail)
	if err != nil {
		return nil, off, err
	}
	b, err := data.slice(off, n)
	if err != nil {
		return nil, off, fail(off, err)
	}
	return b, off, nil
}

// maxInflatedRecord bounds a deflated record other than a storage (data.pkl, version),
// which is inflated into memory whole.
const maxInflatedRecord = 1 << 30

// record returns a record's bytes: a zero-copy slice of data for stored records, a
// decompressed copy for deflated ones (bounded by maxInflatedRecord and the ratio cap). off
// is the data offset within data.
func record(data source, f *zipdir.File, fail func(int64, error) error) ([]byte, int64, error) {
	raw, off, err := rawRecord(data, f, fail)
	if err != nil {
		return nil, off, err
	}
	switch f.Method {
	case zip.Store:
		if f.UncompressedSize64 != f.CompressedSize64 {
			return nil, off, fail(off, fmt.Errorf("%w: stored record with compressed size %d != size %d", ckpterr.ErrCorrupt, f.CompressedSize64, f.UncompressedSize64))
		}
		return raw, off, nil
	case zip.Deflate:
		b, err := Inflate(raw, f.UncompressedSize64, maxInflatedRecord)
		if err != nil {
			return nil, off, fail(off, err)
		}
		return b, off, nil
	}
	return nil, off, fail(off, fmt.Errorf("%w: compression method %d", ckpterr.ErrUnsupported, f.Method))
}
