package torchzip

import (
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/ckpt-dev/ckpt/statedict"
)

// Alignment is the data alignment of every record, torch's default storage_alignment.
const Alignment = 64

// zipWriter writes a zip archive laid out byte for byte as torch's PyTorchStreamWriter
// (miniz) does: stored records, data 64-byte aligned with an "FB" padding extra field,
// zero CRC and sizes in local headers with a data descriptor after each non-empty record,
// zip64 extras where sizes or offsets need them, and a zip64 end of central directory.
// Matching the layout lets torch compute storage offsets itself (.format_version ≥ 1).
type zipWriter struct {
	w       io.Writer
	off     int64
	entries []zipEntry
	// buf is scratch for headers and descriptors, crc and cw the record checksum and its
	// writer: kept across records (and archives, see saveState) so writing a small record
	// allocates nothing.
	buf []byte
	crc hash.Hash32
	cw  crcWriter
}

// reset empties z for the next archive, keeping its buffers.
func (z *zipWriter) reset() {
	clear(z.entries)
	z.entries = z.entries[:0]
	z.w, z.off, z.cw = nil, 0, crcWriter{}
}

type zipEntry struct {
	name   string
	offset int64 // local header
	size   int64
	crc    uint32
}

const zip64Limit = 0xFFFFFFFF

func (z *zipWriter) write(b []byte) error {
	n, err := z.w.Write(b)
	z.off += int64(n)
	return err
}

// record writes one stored record of size bytes produced by produce, which must write
// exactly size bytes; sum, if not nil, is fed the record's bytes as well.
func (z *zipWriter) record(name string, size int64, sum hash.Hash, produce func(io.Writer) (int64, error)) error {
	e := zipEntry{name: name, offset: z.off, size: size}
	big := size >= zip64Limit || e.offset >= zip64Limit
	start := e.offset + 30 + int64(len(name)) + 4
	var z64 []byte
	if big {
		var body []byte
		if size >= zip64Limit {
			body = binary.LittleEndian.AppendUint64(body, uint64(size))
			body = binary.LittleEndian.AppendUint64(body, uint64(size))
		}
		if e.offset >= zip64Limit {
			body = binary.LittleEndian.AppendUint64(body, uint64(e.offset))
		}
		z64 = binary.LittleEndian.AppendUint16(nil, 1)
		z64 = binary.LittleEndian.AppendUint16(z64, uint16(len(body)))
		z64 = append(z64, body...)
		start += int64(len(z64))
	}
	pad := (Alignment - start%Alignment) % Alignment
	flags := uint16(0x0800)
	if size > 0 {
		flags |= 0x0008
	}
	h := z.buf[:0]
	h = binary.LittleEndian.AppendUint32(h, 0x04034b50)
	h = binary.LittleEndian.AppendUint16(h, 0) // version needed, as miniz writes
	h = binary.LittleEndian.AppendUint16(h, flags)
	h = binary.LittleEndian.AppendUint16(h, 0) // stored
	h = binary.LittleEndian.AppendUint32(h, 0) // DOS time and date
	h = binary.LittleEndian.AppendUint32(h, 0) // crc: in the descriptor
	h = binary.LittleEndian.AppendUint64(h, 0) // sizes: in the descriptor
	h = binary.LittleEndian.AppendUint16(h, uint16(len(name)))
	h = binary.LittleEndian.AppendUint16(h, uint16(len(z64)+4+int(pad)))
	h = append(h, name...)
	h = append(h, z64...)
	h = append(h, 'F', 'B')
	h = binary.LittleEndian.AppendUint16(h, uint16(pad))
	for range pad {
		h = append(h, 'Z')
	}
	z.buf = h
	if err := z.write(h); err != nil {
		return err
	}
	if z.crc == nil {
		z.crc = crc32.NewIEEE()
	}
	z.crc.Reset()
	z.cw = crcWriter{w: z.w, crc: z.crc, sum: sum}
	cw := &z.cw
	if _, err := produce(cw); err != nil {
		z.off += cw.n
		return fmt.Errorf("%s: %w", name, err)
	}
	z.off += cw.n
	if cw.n != size {
		return fmt.Errorf("%s: wrote %d bytes, planned %d", name, cw.n, size)
	}
	e.crc = cw.crc.Sum32()
	if size > 0 {
		d := binary.LittleEndian.AppendUint32(z.buf[:0], 0x08074b50)
		d = binary.LittleEndian.AppendUint32(d, e.crc)
		if big {
			d = binary.LittleEndian.AppendUint64(d, uint64(size))
			d = binary.LittleEndian.AppendUint64(d, uint64(size))
		} else {
			d = binary.LittleEndian.AppendUint32(d, uint32(size))
			d = binary.LittleEndian.AppendUint32(d, uint32(size))
		}
		z.buf = d
		if err := z.write(d); err != nil {
			return err
		}
	}
	z.cw.sum = nil
	z.entries = append(z.entries, e)
	return nil
}

// bytesRecord writes a small in-memory record.
func (z *zipWriter) bytesRecord(name string, b []byte) error {
	return z.record(name, int64(len(b)), nil, func(w io.Writer) (int64, error) {
		n, err := w.Write(b)
		return int64(n), err
	})
}

// close writes the central directory and the (zip64) end records.
func (z *zipWriter) close() error {
	cdStart := z.off
	cd := z.buf[:0]
	for _, e := range z.entries {
		var extra []byte
		if e.size >= zip64Limit || e.offset >= zip64Limit {
			var body []byte
			if e.size >= zip64Limit {
				body = binary.LittleEndian.AppendUint64(body, uint64(e.size))
				body = binary.LittleEndian.AppendUint64(body, uint64(e.size))
			}
			if e.offset >= zip64Limit {
				body = binary.LittleEndian.AppendUint64(body, uint64(e.offset))
			}
			extra = binary.LittleEndian.AppendUint16(extra, 1)
			extra = binary.LittleEndian.AppendUint16(extra, uint16(len(body)))
			extra = append(extra, body...)
		}
		flags := uint16(0x0800)
		if e.size > 0 {
			flags |= 0x0008
		}
		cd = binary.LittleEndian.AppendUint32(cd, 0x02014b50)
		cd = binary.LittleEndian.AppendUint16(cd, 0) // made by
		cd = binary.LittleEndian.AppendUint16(cd, 0) // needed
		cd = binary.LittleEndian.AppendUint16(cd, flags)
		cd = binary.LittleEndian.AppendUint16(cd, 0)
		cd = binary.LittleEndian.AppendUint32(cd, 0)
		cd = binary.LittleEndian.AppendUint32(cd, e.crc)
		cd = binary.LittleEndian.AppendUint32(cd, clamp32(e.size))
		cd = binary.LittleEndian.AppendUint32(cd, clamp32(e.size))
		cd = binary.LittleEndian.AppendUint16(cd, uint16(len(e.name)))
		cd = binary.LittleEndian.AppendUint16(cd, uint16(len(extra)))
		cd = binary.LittleEndian.AppendUint16(cd, 0) // comment
		cd = binary.LittleEndian.AppendUint16(cd, 0) // disk
		cd = binary.LittleEndian.AppendUint16(cd, 0) // internal attributes
		cd = binary.LittleEndian.AppendUint32(cd, 0) // external attributes
		cd = binary.LittleEndian.AppendUint32(cd, clamp32(e.offset))
		cd = append(cd, e.name...)
		cd = append(cd, extra...)
	}
	z.buf = cd
	if err := z.write(cd); err != nil {
		return err
	}
	cdSize := int64(len(cd))
	n := uint64(len(z.entries))
	eocd64 := z.off
	t := binary.LittleEndian.AppendUint32(z.buf[:0], 0x06064b50)
	t = binary.LittleEndian.AppendUint64(t, 44)
	t = binary.LittleEndian.AppendUint16(t, 0x031E)
	t = binary.LittleEndian.AppendUint16(t, 0x002D)
	t = binary.LittleEndian.AppendUint32(t, 0)
	t = binary.LittleEndian.AppendUint32(t, 0)
	t = binary.LittleEndian.AppendUint64(t, n)
	t = binary.LittleEndian.AppendUint64(t, n)
	t = binary.LittleEndian.AppendUint64(t, uint64(cdSize))
	t = binary.LittleEndian.AppendUint64(t, uint64(cdStart))
	// zip64 end of central directory locator
	t = binary.LittleEndian.AppendUint32(t, 0x07064b50)
	t = binary.LittleEndian.AppendUint32(t, 0)
	t = binary.LittleEndian.AppendUint64(t, uint64(eocd64))
	t = binary.LittleEndian.AppendUint32(t, 1)
	// classic end of central directory
	t = binary.LittleEndian.AppendUint32(t, 0x06054b50)
	t = binary.LittleEndian.AppendUint16(t, 0)
	t = binary.LittleEndian.AppendUint16(t, 0)
	t = binary.LittleEndian.AppendUint16(t, clamp16(n))
	t = binary.LittleEndian.AppendUint16(t, clamp16(n))
	t = binary.LittleEndian.AppendUint32(t, clamp32(cdSize))
	t = binary.LittleEndian.AppendUint32(t, clamp32(cdStart))
	t = binary.LittleEndian.AppendUint16(t, 0)
	z.buf = t
	return z.write(t)
}

func clamp32(v int64) uint32 {
	if v >= zip64Limit {
		return zip64Limit
	}
	return uint32(v)
}

func clamp16(v uint64) uint16 {
	if v >= 0xFFFF {
		return 0xFFFF
	}
	return uint16(v)
}

// crcWriter computes a record's CRC-32 and size, and feeds sum when there is one. File
// ranges are checksummed by the writer that stores them (fastcopy feeds the hashes from its
// buffers on the other core).
type crcWriter struct {
	w   io.Writer
	crc hash.Hash32
	sum hash.Hash
	n   int64
}

// Write checksums p and passes it on.
func (c *crcWriter) Write(p []byte) (int, error) {
	c.crc.Write(p)
	if c.sum != nil {
		c.sum.Write(p)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriteRange implements statedict.RangeWriter.
func (c *crcWriter) WriteRange(r statedict.Range) (int64, error) {
	r.Sums = append(r.Sums[:len(r.Sums):len(r.Sums)], c.crc)
	if c.sum != nil {
		r.Sums = append(r.Sums, c.sum)
	}
	n, err := statedict.WriteRange(c.w, r)
	c.n += n
	return n, err
}
