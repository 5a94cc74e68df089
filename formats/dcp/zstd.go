package dcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/formats/torchpickle"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
	"github.com/klauspost/compress/zstd"
)

// ZStandard is the transform descriptor of torch's ZStandard stream extension
// (torch.distributed.checkpoint._extension.ZStandard, registry name "stream.zstd",
// version 1): the item's bytes — its torch.save archive, or a bytes item's BytesIO — are
// one zstd stream.
const ZStandard = "stream.zstd/1"

// compressed reports whether an item's transforms are torch's ZStandard extension, the
// one stream transform ckpt reads; any other transform is unsupported.
func compressed(descs []string) (bool, error) {
	switch {
	case len(descs) == 0:
		return false, nil
	case len(descs) == 1 && strings.HasPrefix(descs[0], "stream.zstd/"):
		if v := strings.TrimPrefix(descs[0], "stream.zstd/"); v != "1" && !strings.HasPrefix(v, "1.") {
			return false, fmt.Errorf("%w: ZStandard extension version %q (torch writes 1)", ckpterr.ErrUnsupported, v)
		}
		return true, nil
	}
	return false, fmt.Errorf("%w: stream transforms %q (ckpt reads torch's ZStandard extension, %s, alone)", ckpterr.ErrUnsupported, descs, ZStandard)
}

// maxRatio bounds how many times its compressed size an item of unknown size (a bytes
// item) may decompress to, beyond a MiB: a small hostile file cannot make the reader
// allocate without bound (the zip reader's deflate bound).
const maxRatio = 100

// maxZstdRatio is the most a zstd stream regenerates per compressed byte: an RLE block — 3
// bytes of header, 1 of content — regenerates at most 128 KiB.
const maxZstdRatio = (128 << 10) / 4

// archiveOverhead is what a torch.save archive holds beside its storages' bytes: its
// records' headers, data.pkl, the directory.
const archiveOverhead = 1 << 20

// maxHead bounds the start of an item kept to read its first record (data.pkl) while it
// inflates.
const maxHead = 16 << 20

// inflateItem inflates one compressed item — a torch.save archive — streaming into sink
// (which must not keep p) and returns its length. What it inflates is bounded by what the
// item can legitimately hold, and it stops at the first byte past that:
//   - limit: for a tensor chunk, its bytes (chunk, from the metadata) and archiveOverhead;
//     for a bytes item, maxRatio times its compressed size. A limit beyond what a zstd
//     stream of len(data) bytes can regenerate is a metadata lying about the item's size:
//     refused before inflating anything;
//   - the bytes must start as a torch.save archive — a zip whose first record is data.pkl, a
//     pickle — and once that record has arrived, the storages its pickle declares bound the
//     rest: for a tensor chunk they must be the chunk's bytes (the metadata and the archive
//     disagreeing, one lies), and nothing past them and archiveOverhead is inflated.
func inflateItem(data []byte, limit, chunk int64, sink func(p []byte)) (int64, error) {
	if limit > int64(len(data))*maxZstdRatio+archiveOverhead {
		return 0, fmt.Errorf("the metadata says the item holds %d bytes; %d compressed bytes of zstd regenerate at most %d", limit-archiveOverhead, len(data), int64(len(data))*maxZstdRatio)
	}
	// A frame's window may exceed its content (a stream writer does not know the size):
	// allow torch's 8 MiB at least; the output itself is bounded below.
	window := uint64(min(max(limit, 8<<20), zstd.MaxWindowSize))
	dec, err := zstd.NewReader(bytes.NewReader(data), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(window),
		zstd.WithDecoderMaxWindow(window))
	if err != nil {
		return 0, err
	}
	defer dec.Close()
	chk := archiveCheck{limit: limit, chunk: chunk}
	buf := make([]byte, 256<<10)
	var n int64
	for {
		k, err := dec.Read(buf)
		if k > 0 {
			n += int64(k)
			if n > chk.limit {
				return n, fmt.Errorf("decompresses to more than %d bytes%s", chk.limit, chk.why)
			}
			sink(buf[:k])
			if err := chk.add(buf[:k]); err != nil {
				return n, err
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("zstd: %w", err)
		}
	}
}

// archiveCheck follows the start of an inflating item: a zip local record whose data, a
// pickle, declares the storages the archive holds.
type archiveCheck struct {
	limit, chunk int64
	why          string // what set limit, for the error
	head         []byte
	done         bool
	tried        int // len(head) at the last attempt to read the pickle
}

func (c *archiveCheck) add(p []byte) error {
	if c.done {
		return nil
	}
	c.head = append(c.head, p...)
	h := c.head
	if len(h) >= 4 && string(h[:4]) != "PK\x03\x04" {
		return fmt.Errorf("the item is not a torch.save archive: it starts with % x", h[:4])
	}
	if len(h) < 30 {
		return nil
	}
	name := int(binary.LittleEndian.Uint16(h[26:]))
	at := 30 + name + int(binary.LittleEndian.Uint16(h[28:]))
	if len(h) <= at || len(h) < 2*c.tried {
		return nil
	}
	c.tried = len(h)
	if !strings.HasSuffix(strings.ToLower(string(h[30:30+name])), ".pkl") {
		return fmt.Errorf("the item's archive starts with the record %q, not data.pkl as torch writes it", h[30:30+name])
	}
	if len(h) > maxHead {
		if c.chunk >= 0 {
			return fmt.Errorf("the item's data.pkl runs past %d bytes: a tensor chunk's is a few hundred", maxHead)
		}
		c.done, c.head = true, nil // a bytes item's large pickle: bounded by limit alone
		return nil
	}
	storages := map[string]int64{}
	_, err := pickle.NewDecoder(h[at:], pickle.Options{Limits: pickle.Limits{MaxAlloc: maxHead}, PersistentLoad: func(pid pickle.Value) (pickle.Value, error) {
		req, err := torchpickle.ParsePID(pid)
		if err == nil && req.View == nil {
			storages[req.Key] = req.NumEl * int64(req.DType.Size())
		}
		return pickle.None{}, nil
	}}).Decode()
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return nil // the pickle has not all arrived
	}
	c.done, c.head = true, nil
	if err != nil {
		return fmt.Errorf("the item's data.pkl: %w", err)
	}
	var total int64
	for _, b := range storages {
		total += b
	}
	if c.chunk >= 0 && total != c.chunk {
		return fmt.Errorf("the metadata says the chunk holds %d bytes, the item's archive declares %d", c.chunk, total)
	}
	if total+archiveOverhead < c.limit {
		c.limit, c.why = total+archiveOverhead, fmt.Sprintf(" (its data.pkl declares %d bytes of storage)", total)
	}
	return nil
}

// decompress inflates a compressed item into memory (see inflateItem; chunk is -1 for a
// bytes item).
func decompress(data []byte, limit, chunk int64) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := inflateItem(data, limit, chunk, func(p []byte) { buf.Write(p) }); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// limits returns what item e can hold: the limit inflateItem takes and its chunk's bytes
// (-1 for a bytes item).
func (m *Metadata) limits(e *StorageEntry, compressedLen int) (limit, chunk int64) {
	limit, chunk = int64(compressedLen)*maxRatio+archiveOverhead, -1
	if it, ok := m.Item(e.FQN); ok && it.Tensor != nil && e.Offsets != nil {
		for _, c := range it.Tensor.Chunks {
			if slices.Equal(c.Offsets, e.Offsets) {
				n := int64(it.Tensor.DType.Size())
				for _, d := range c.Sizes {
					n = satMul(n, d)
				}
				return satAdd(n, archiveOverhead), n
			}
		}
	}
	return limit, chunk
}

func satMul(a, b int64) int64 {
	if a < 0 || b < 0 || (a != 0 && b > (1<<62)/a) {
		return 1 << 62
	}
	return a * b
}

func satAdd(a, b int64) int64 { return min(a+b, 1<<62) }

// Inflate returns the bytes of item e as DCP's loader reads them — b itself, or b
// decompressed for an item stored with torch's ZStandard extension — bounded by what the
// item can hold (see inflateItem). Other transforms are unsupported.
func (m *Metadata) Inflate(e *StorageEntry, b []byte) ([]byte, error) {
	z, err := compressed(e.TransformDescriptors)
	if err != nil || !z {
		return b, err
	}
	limit, chunk := m.limits(e, len(b))
	return decompress(b, limit, chunk)
}

// Ends are an inflated item's first and last bytes.
type Ends struct {
	Head, Tail []byte
	// Len is the inflated length: Head is all of it when it is no longer than Head.
	Len int64
}

// InflateEnds is Inflate keeping only the first head and last tail bytes of the item, so
// that reading its directory, records' headers and pickles (a scan) holds no storage: its
// memory is bounded whatever the item holds.
func (m *Metadata) InflateEnds(e *StorageEntry, b []byte, head, tail int) (Ends, error) {
	z, err := compressed(e.TransformDescriptors)
	if err != nil || !z {
		return Ends{Head: b, Len: int64(len(b))}, err
	}
	limit, chunk := m.limits(e, len(b))
	var ends Ends
	ring := make([]byte, 0, tail)
	n, err := inflateItem(b, limit, chunk, func(p []byte) {
		if k := min(head-len(ends.Head), len(p)); k > 0 {
			ends.Head = append(ends.Head, p[:k]...)
		}
		if len(p) >= tail {
			ring = append(ring[:0], p[len(p)-tail:]...)
		} else if drop := len(ring) + len(p) - tail; drop > 0 {
			ring = append(ring[:copy(ring, ring[drop:])], p...)
		} else {
			ring = append(ring, p...)
		}
	})
	if err != nil {
		return Ends{}, err
	}
	ends.Len, ends.Tail = n, ring
	return ends, nil
}

// zstdChunk is a tensor chunk stored compressed: an io.ReaderAt of the chunk's contiguous
// bytes that inflates its item when read and keeps it only until the last byte was read,
// so a conversion streaming tensors holds one item per reader at a time, never the
// checkpoint. The item's archive is checked against the metadata's dtype and shape then.
type zstdChunk struct {
	src        io.ReaderAt // the data file: the compressed item is length bytes at off
	length     int64
	path, fqn  string
	off        int64 // the item's offset in path, for errors
	dtype      statedict.DType
	shape      []int64
	size       int64 // the chunk's contiguous bytes
	mu         sync.Mutex
	plain      []byte // the chunk's bytes while being read
	handedOver int64  // bytes of plain read since it was inflated
}

// chunkTensor returns the chunk as a tensor over a zstdChunk.
func (r *reader) zstdTensor(fqn, path string, e *StorageEntry, f io.ReaderAt, dtype statedict.DType, sizes []int64) *statedict.Tensor {
	n := int64(dtype.Size())
	for _, d := range sizes {
		n *= d
	}
	z := &zstdChunk{src: f, length: e.Length, path: path, fqn: fqn, off: e.Offset, dtype: dtype, shape: slices.Clone(sizes), size: n}
	st := statedict.NewReaderStorage(fqn, "cpu", dtype, z, 0, n)
	st.File = path
	return &statedict.Tensor{DType: dtype, Shape: slices.Clone(sizes), Strides: statedict.ContiguousStrides(sizes), Storage: st}
}

// ReadAt implements io.ReaderAt over the chunk's bytes.
func (z *zstdChunk) ReadAt(p []byte, off int64) (int, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if off < 0 || off >= z.size {
		return 0, io.EOF
	}
	if z.plain == nil {
		b, err := z.inflate()
		if err != nil {
			return 0, errorAt(z.path, z.fqn, nil, z.off, err)
		}
		z.plain, z.handedOver = b, 0
	}
	n := copy(p, z.plain[off:])
	z.handedOver += int64(n)
	if z.handedOver >= z.size {
		z.plain = nil // read through: released until read again
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// inflate decompresses the item and returns the chunk's contiguous bytes.
func (z *zstdChunk) inflate() ([]byte, error) {
	data, err := storage.ReadRange(z.src, z.off, z.length)
	if err != nil {
		return nil, err
	}
	b, err := decompress(data, satAdd(z.size, archiveOverhead), z.size)
	if err != nil {
		return nil, err
	}
	v, err := torchzip.DecodeBytes(b, z.path, z.off) // inflated: memory only
	if err != nil {
		return nil, err
	}
	t, ok := v.(*statedict.Tensor)
	if !ok {
		return nil, fmt.Errorf("the compressed archive holds a %T, not a tensor", v)
	}
	if t.DType != z.dtype || !slices.Equal(t.Shape, z.shape) {
		return nil, fmt.Errorf("stored tensor is %s %v, the metadata says %s %v", t.DType, t.Shape, z.dtype, z.shape)
	}
	return t.Bytes()
}
