package dcp

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/ckpt-dev/ckpt/formats/store"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/statedict"
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
			return false, fmt.Errorf("%w: ZStandard extension version %q (torch writes 1)", ErrUnsupported, v)
		}
		return true, nil
	}
	return false, fmt.Errorf("%w: stream transforms %q (ckpt reads torch's ZStandard extension, %s, alone)", ErrUnsupported, descs, ZStandard)
}

// maxRatio bounds how many times its compressed size an item of unknown size (a bytes
// item) may decompress to, beyond a MiB: a small hostile file cannot make the reader
// allocate without bound (the zip reader's deflate bound).
const maxRatio = 100

// decompress inflates one compressed item into memory, refusing more than limit bytes.
func decompress(data []byte, limit int64) ([]byte, error) {
	// A frame's window may exceed its content (a stream writer does not know the size):
	// allow torch's 8 MiB at least; the output itself is bounded below.
	window := uint64(min(max(limit, 8<<20), zstd.MaxWindowSize))
	dec, err := zstd.NewReader(bytes.NewReader(data), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(window),
		zstd.WithDecoderMaxWindow(window))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(dec, limit+1))
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	if n > limit {
		return nil, fmt.Errorf("decompresses to more than %d bytes", limit)
	}
	return buf.Bytes(), nil
}

// Inflate returns the bytes of item e as DCP's loader reads them — b itself, or b
// decompressed for an item stored with torch's ZStandard extension — bounded by what the
// item can hold: its chunk's bytes (from the metadata) and a MiB for the archive around
// them, or maxRatio times its size for a bytes item. Other transforms are unsupported.
func (m *Metadata) Inflate(e *StorageEntry, b []byte) ([]byte, error) {
	z, err := compressed(e.TransformDescriptors)
	if err != nil || !z {
		return b, err
	}
	limit := int64(len(b))*maxRatio + 1<<20
	if it, ok := m.Item(e.FQN); ok && it.Tensor != nil && e.Offsets != nil {
		for _, c := range it.Tensor.Chunks {
			if slices.Equal(c.Offsets, e.Offsets) {
				n := int64(it.Tensor.DType.Size())
				for _, d := range c.Sizes {
					n *= d
				}
				limit = n + 1<<20
			}
		}
	}
	return decompress(b, limit)
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
			return 0, &Error{File: z.path, FQN: z.fqn, Offset: z.off, Err: err}
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
	data, err := store.ReadRange(z.src, z.off, z.length)
	if err != nil {
		return nil, err
	}
	b, err := decompress(data, z.size+1<<20)
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
