package torchzip

import (
	"bufio"
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"sync"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// torch.save never compresses records, but an archive re-zipped by hand may hold deflated
// ones, and a deflated record is where a small file can claim gigabytes. Deflated records
// are therefore bounded three ways: by a ratio cap (what the directory claims against the
// compressed bytes), by inflating storages lazily — only as far as the tensors read them,
// streaming through a bounded window rather than into memory — and by a budget on how much
// re-inflation random access to a large storage may cost.

// MaxInflateRatio is the largest ratio of a deflated record's inflated size to its
// compressed size that is read; records inflating to at most InflateRatioFloor bytes are
// exempt. Deflate reaches ~1030× on runs of zeros, which is what a zip bomb is made of;
// real tensor data compresses far less.
var (
	MaxInflateRatio   int64 = 100
	InflateRatioFloor int64 = 1 << 20
)

// checkRatio refuses a record that claims to inflate beyond the ratio cap.
func checkRatio(claimed uint64, compressed int64) error {
	if claimed <= uint64(InflateRatioFloor) {
		return nil
	}
	if compressed <= 0 || claimed/uint64(compressed) >= uint64(MaxInflateRatio) {
		return fmt.Errorf("%w: deflated record of %d bytes claims %d inflated (more than %d×): refusing a likely zip bomb; re-save the checkpoint with torch.save, which stores records uncompressed",
			ckpterr.ErrUnsupported, compressed, claimed, MaxInflateRatio)
	}
	return nil
}

// Inflate decompresses a deflated record whose directory claims claimed bytes into memory,
// refusing claims beyond limit or the ratio cap and records that inflate to another size.
func Inflate(raw []byte, claimed uint64, limit int64) ([]byte, error) {
	if claimed > uint64(limit) {
		return nil, fmt.Errorf("%w: deflated record of %d bytes is larger than the %d this reader inflates", ckpterr.ErrUnsupported, claimed, limit)
	}
	if err := checkRatio(claimed, int64(len(raw))); err != nil {
		return nil, err
	}
	// The claim is only a claim: grow with the real inflated bytes.
	w := bytes.NewBuffer(make([]byte, 0, min(claimed, 1<<26)))
	n, err := io.Copy(w, io.LimitReader(flate.NewReader(bytes.NewReader(raw)), int64(claimed)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: inflate: %v", ckpterr.ErrCorrupt, err)
	}
	if uint64(n) != claimed {
		return nil, fmt.Errorf("%w: inflated %d bytes, the directory says %d", ckpterr.ErrCorrupt, n, claimed)
	}
	return w.Bytes(), nil
}

// inflateWhole is the size up to which a lazily inflated storage is inflated whole on first
// read and kept, so that strided (transposed) reads cost nothing more.
const inflateWhole = 16 << 20

// reinflateBudget bounds the bytes random access may inflate over a large storage, as a
// multiple of its size: a backward read restarts the stream from the record's start.
const reinflateBudget = 8

// inflater is an io.ReaderAt over a deflated storage record at file offset base, whose
// compressed bytes are read from src (the record's first compressed byte at 0) only as
// the stream needs them — never fetched whole at open, which for an archive in a bucket
// would hold the whole record in memory. Small records are inflated whole on first use;
// large ones are streamed: reads move forward through the stream, a read behind the
// current position restarts it. Safe for concurrent use.
type inflater struct {
	src     io.ReaderAt
	srcSize int64 // compressed bytes
	size    int64 // what the directory claims
	base    int64
	name    string // file and record, for errors

	mu       sync.Mutex
	whole    []byte        // small records, once inflated
	fr       io.ReadCloser // the stream of a large record
	pos      int64         // bytes the stream has produced
	inflated int64         // total bytes inflated so far
}

func newInflater(src io.ReaderAt, srcSize, size, base int64, name string) *inflater {
	return &inflater{src: src, srcSize: srcSize, size: size, base: base, name: name}
}

// stream starts inflating the record from its first byte.
func (z *inflater) stream() io.ReadCloser {
	return flate.NewReader(bufio.NewReaderSize(io.NewSectionReader(z.src, 0, z.srcSize), 256<<10))
}

// ReadAt reads len(p) bytes at file offset off.
func (z *inflater) ReadAt(p []byte, off int64) (int, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	off -= z.base
	if off < 0 || off > z.size || int64(len(p)) > z.size-off {
		return 0, fmt.Errorf("%s: read of %d bytes at %d outside the %d-byte record", z.name, len(p), off, z.size)
	}
	if z.size <= inflateWhole {
		if z.whole == nil {
			fr := z.stream()
			b := make([]byte, z.size)
			n, err := io.ReadFull(fr, b)
			z.pos = int64(n)
			if err != nil {
				return 0, z.short(err)
			}
			if k, _ := fr.Read(make([]byte, 1)); k > 0 {
				return 0, fmt.Errorf("%w: %s: the deflated record inflates to more than the %d bytes the directory says", ckpterr.ErrCorrupt, z.name, z.size)
			}
			z.whole = b
		}
		return copy(p, z.whole[off:]), nil
	}
	if z.fr == nil || off < z.pos {
		if z.fr != nil && z.inflated > reinflateBudget*z.size {
			return 0, fmt.Errorf("%w: %s: reading this deflated storage out of order has inflated %d bytes (%d× its size); re-save the checkpoint uncompressed",
				ckpterr.ErrUnsupported, z.name, z.inflated, reinflateBudget)
		}
		z.fr = z.stream()
		z.pos = 0
	}
	if skip := off - z.pos; skip > 0 {
		n, err := io.CopyN(io.Discard, z.fr, skip)
		z.pos += n
		z.inflated += n
		if err != nil {
			return 0, z.short(err)
		}
	}
	n, err := io.ReadFull(z.fr, p)
	z.pos += int64(n)
	z.inflated += int64(n)
	if err != nil {
		return n, z.short(err)
	}
	return n, nil
}

// short reports a stream that ended early or broke.
func (z *inflater) short(err error) error {
	z.fr = nil
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%w: %s: the deflated record ends after %d bytes, the directory says %d", ckpterr.ErrCorrupt, z.name, z.pos, z.size)
	}
	return fmt.Errorf("%w: %s: inflate: %v", ckpterr.ErrCorrupt, z.name, err)
}
