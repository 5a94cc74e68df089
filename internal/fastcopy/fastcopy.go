// Package fastcopy writes checkpoint outputs at the speed of the disk. An output is a
// sequential stream of small pieces (headers, pickles) and large runs of tensor bytes, most of
// them ranges of a page-cache-warm source file. File gathers the stream into large aligned
// chunks, reads source ranges into them with pread (no page faults, no mapping kept
// resident) and hands full chunks to two goroutines that write them with direct I/O
// (O_DIRECT): the bytes go from the chunk to the disk without a second copy into the page
// cache and without waiting for writeback, so the final fsync finds nothing left to write.
// Where direct I/O is unavailable (tmpfs, some network filesystems) or switched off with
// CKPT_DIRECT_IO=off, the same chunks are written through the page cache, with writeback
// started as each one lands.
//
// Writers that sit in between (counters, checksums, buffers) pass ranges along by
// implementing RangeWriter, so tensor bytes need not pass through them; a writer that must
// see the bytes (a CRC, the manifest's hash) adds a hash to the range's Sums, which File feeds
// from its chunk on another goroutine while the next piece is read: the mapping is never
// touched, and checksumming runs on the second core.
package fastcopy

import (
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ckpt-dev/ckpt/statedict"
)

const (
	// blockSize is the alignment direct I/O needs of file offsets, lengths and memory:
	// 4096 covers every logical block size Linux filesystems use.
	blockSize = 4096
	// chunkSize is the size of one write: large enough that the disk streams, small enough
	// that a few in flight keep memory low.
	chunkSize = 4 << 20
	// writers is how many chunks are written at once: the disk streams fastest with more
	// than one request queued.
	writers = 2
	// inFlight is how many chunks may be filled, checksummed or written at once.
	inFlight = writers + 2
	// piece is how much is read into a chunk at a time, and handed on to be checksummed:
	// small enough that little is left to checksum when a range ends.
	piece = 1 << 20
)

// buffers recycles aligned chunk buffers between files (an HF folder writes many).
var buffers = sync.Pool{New: func() any {
	b := make([]byte, chunkSize+blockSize)
	skip := (blockSize - int(uintptr(unsafe.Pointer(&b[0])))%blockSize) % blockSize
	b = b[skip : skip+chunkSize : skip+chunkSize]
	return &b
}}

// directIO reports whether direct I/O may be tried; CKPT_DIRECT_IO=off switches it off.
func directIO() bool { return os.Getenv("CKPT_DIRECT_IO") != "off" }

// measuredChoice reports whether the write path is chosen by measuring both (the default);
// CKPT_DIRECT_IO=on keeps direct I/O without measuring.
func measuredChoice() bool { return os.Getenv("CKPT_DIRECT_IO") != "on" }

// Which path writes fastest differs between machines: on one VM a durable write went 1.5×
// faster through the page cache (with writeback started and awaited as chunks land) than
// with direct I/O, on another the reverse. So the first file of a run that is large enough
// measures both — its first calChunks chunks with direct I/O, the next calChunks through the
// page cache, each timed until the bytes are on disk — and the faster path writes the rest
// of it and every later file on the same device (choices).
const calChunks = 8

// choices holds, per device, whether direct I/O was measured to be the faster path.
var choices sync.Map // uint64 → bool

// calibration is a File's measurement of both paths.
type calibration struct {
	mu             sync.Mutex
	dev            uint64
	direct, cached time.Duration
	nd, nc         int
	decided        bool
}

// done reports whether the measurement is over (decided, or stopped).
func (c *calibration) done() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.decided
}

// stop ends the measurement without a choice.
func (c *calibration) stop() {
	c.mu.Lock()
	c.decided = true
	c.mu.Unlock()
}

// record adds the time one chunk took on a path and decides once both have calChunks.
func (c *calibration) record(f *File, direct bool, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if direct {
		c.direct += d
		c.nd++
	} else {
		c.cached += d
		c.nc++
	}
	if !c.decided && c.nd >= calChunks && c.nc >= calChunks {
		c.decided = true
		useDirect := c.direct <= c.cached
		choices.Store(c.dev, useDirect)
		if !useDirect {
			f.useDirect.Store(false)
		}
	}
}

// osPath holds the operating system's fast path: opening a second descriptor with direct
// I/O, telling whether a write failed because direct I/O was refused, and starting
// writeback of a written range. Linux has all three (fastcopy_linux.go); elsewhere, or with
// CKPT_WRITE_PATH=portable, the portable path writes through the page cache and leaves
// writeback to the final fsync.
type osPath struct {
	openDirect func(name string) (*os.File, error)
	refused    func(err error) bool
	// writeback starts writing a range back; await waits until it is on disk.
	writeback func(f *os.File, off, n int64)
	await     func(f *os.File, off, n int64)
	// device identifies the file's file system, for choices.
	device func(f *os.File) (uint64, bool)
}

var portablePath = osPath{
	openDirect: func(string) (*os.File, error) { return nil, errors.ErrUnsupported },
	refused:    func(error) bool { return false },
	writeback:  func(*os.File, int64, int64) {},
	await:      func(*os.File, int64, int64) {},
	device:     func(*os.File) (uint64, bool) { return 0, false },
}

// path is the write path in use: the system's, unless CKPT_WRITE_PATH=portable.
func path() osPath {
	if os.Getenv("CKPT_WRITE_PATH") == "portable" {
		return portablePath
	}
	return systemPath
}

// File is a sequential writer over an output file, from the file's current offset on. It
// owns the file's contents past that offset until Close.
type File struct {
	f      *os.File
	os     osPath
	direct *os.File // the same file opened with O_DIRECT; nil when unavailable
	// useDirect is cleared when direct writes fail with EINVAL (the filesystem accepted
	// O_DIRECT at open but not these writes), or when the page cache was measured faster:
	// from then on chunks go through the cache.
	useDirect atomic.Bool
	// start is the file offset writing began at; calib measures both paths (nil when the
	// choice is made already, or there is none to make).
	start int64
	calib *calibration
	// srcs are the source files open for reading, most recently used last; at most
	// maxSources stay open, so a folder of thousands of shards needs no more descriptors.
	srcs []source

	cur   *chunk // chunk being filled; nil when none is
	off   int64  // file offset of the chunk being filled
	slots chan struct{}
	jobs  chan *chunk
	sums  chan sumJob
	wg    sync.WaitGroup

	mu     sync.Mutex
	err    error // first error of the writing goroutine
	closed bool
}

// chunk is a buffer on its way to the file. It goes back to the pool when its last user
// (filler, writer, checksummers) is done with it.
type chunk struct {
	buf  *[]byte
	off  int64
	refs atomic.Int32
	f    *File
}

func (c *chunk) release() {
	if c.refs.Add(-1) == 0 {
		buffers.Put(c.buf)
		<-c.f.slots
	}
}

// sumJob asks the checksumming goroutine to feed data (part of c) to sums; done, if set, is
// closed after.
type sumJob struct {
	data []byte
	c    *chunk
	sums []hash.Hash
	done chan struct{}
}

// NewFile wraps f, which must be open for writing and positioned where writing continues.
// Direct I/O is used when the filesystem supports it and that position is block-aligned.
func NewFile(f *os.File) *File {
	out := &File{f: f, os: path(), slots: make(chan struct{}, inFlight),
		jobs: make(chan *chunk, inFlight), sums: make(chan sumJob, inFlight*chunkSize/piece)}
	out.off, out.err = f.Seek(0, io.SeekCurrent)
	out.start = out.off
	if out.err == nil && out.off%blockSize == 0 && directIO() {
		if d, err := out.os.openDirect(f.Name()); err == nil {
			out.direct = d
			out.useDirect.Store(true)
			if dev, ok := out.os.device(f); ok && measuredChoice() {
				if v, known := choices.Load(dev); known {
					out.useDirect.Store(v.(bool))
				} else {
					out.calib = &calibration{dev: dev}
				}
			}
		}
	}
	out.wg.Add(1 + writers)
	for range writers {
		go out.writeLoop()
	}
	go out.sumLoop()
	return out
}

// Write copies p into the output stream.
func (f *File) Write(p []byte) (int, error) {
	n, err := f.fill(int64(len(p)), nil, func(dst []byte, done int64) error {
		copy(dst, p[done:])
		return nil
	})
	return int(n), err
}

// WriteRange reads r from its file (from r.Data when it has none) into the output stream,
// feeding r.Sums as it goes.
func (f *File) WriteRange(r statedict.Range) (int64, error) {
	put := func(dst []byte, done int64) error {
		copy(dst, r.Data[done:])
		return nil
	}
	if r.Path != "" {
		src, err := f.source(r.Path)
		if err != nil {
			return 0, err
		}
		put = func(dst []byte, done int64) error {
			if _, err := src.ReadAt(dst, r.Off+done); err != nil {
				return fmt.Errorf("reading %s at offset %d: %w", r.Path, r.Off+done, err)
			}
			return nil
		}
	}
	return f.fill(int64(len(r.Data)), r.Sums, put)
}

// fill appends n bytes to the stream, a piece at a time; put copies the bytes from done on
// into dst. Each piece is handed to the checksumming goroutine when there are sums, and fill
// returns once they have seen all n bytes.
func (f *File) fill(n int64, sums []hash.Hash, put func(dst []byte, done int64) error) (int64, error) {
	var done int64
	var last chan struct{}
	for done < n {
		if err := f.failed(); err != nil {
			return done, err
		}
		if f.cur == nil {
			f.slots <- struct{}{}
			c := &chunk{buf: buffers.Get().(*[]byte), off: f.off, f: f}
			*c.buf = (*c.buf)[:0]
			c.refs.Store(1)
			f.cur = c
		}
		c := f.cur
		b := *c.buf
		k := min(n-done, int64(cap(b)-len(b)))
		if len(sums) > 0 {
			k = min(k, piece)
		}
		dst := b[len(b) : len(b)+int(k)]
		if err := put(dst, done); err != nil {
			return done, err
		}
		*c.buf = b[:len(b)+int(k)]
		done += k
		if len(sums) > 0 {
			c.refs.Add(1)
			job := sumJob{data: dst, c: c, sums: sums}
			if done == n {
				last = make(chan struct{})
				job.done = last
			}
			f.sums <- job
		}
		if len(*c.buf) == cap(*c.buf) {
			f.submit()
		}
	}
	if last != nil {
		<-last
	}
	return done, nil
}

// submit hands the chunk being filled to the writing goroutine.
func (f *File) submit() {
	f.jobs <- f.cur
	f.off += int64(len(*f.cur.buf))
	f.cur = nil
}

func (f *File) failed() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("fastcopy: write after Close")
	}
	return f.err
}

// sumLoop feeds pieces to their sums in order.
func (f *File) sumLoop() {
	defer f.wg.Done()
	for j := range f.sums {
		for _, h := range j.sums {
			h.Write(j.data)
		}
		j.c.release()
		if j.done != nil {
			close(j.done)
		}
	}
}

// writeLoop writes chunks; each chunk has its own place in the file, so the writers need
// no order among themselves.
func (f *File) writeLoop() {
	defer f.wg.Done()
	for c := range f.jobs {
		f.mu.Lock()
		failed := f.err != nil
		f.mu.Unlock()
		if !failed {
			if err := f.writeChunk(*c.buf, c.off); err != nil {
				f.mu.Lock()
				f.err = err
				f.mu.Unlock()
			}
		}
		c.release()
	}
}

// writeChunk writes b at off, with direct I/O when possible. A short last chunk is padded
// to a whole block for direct I/O; Close truncates the padding away.
func (f *File) writeChunk(b []byte, off int64) error {
	if f.calib != nil && len(b) == chunkSize && f.useDirect.Load() && !f.calib.done() {
		if i := (off - f.start) / chunkSize; i < 2*calChunks {
			return f.measure(b, off, i < calChunks)
		}
	}
	if f.useDirect.Load() {
		padded := (len(b) + blockSize - 1) / blockSize * blockSize
		clear(b[len(b):padded])
		_, err := writeDirect(f.direct, b[:padded], off)
		if err == nil {
			return nil
		}
		if !f.os.refused(err) {
			return err
		}
		f.useDirect.Store(false) // this chunk, and every later one, through the page cache
	}
	if _, err := f.f.WriteAt(b, off); err != nil {
		return err
	}
	// Start writeback now, so the disk works while the next chunk fills, and wait for the
	// chunk written inFlight chunks ago: dirty pages stay bounded, and the final fsync
	// finds little left to write.
	f.os.writeback(f.f, off, int64(len(b)))
	if lag := off - inFlight*chunkSize; lag >= f.start {
		f.os.await(f.f, lag, chunkSize)
	}
	return nil
}

// measure writes a full chunk of the calibration on one path, timed until it is on disk.
func (f *File) measure(b []byte, off int64, direct bool) error {
	t0 := time.Now()
	if direct {
		if _, err := writeDirect(f.direct, b, off); err != nil {
			if !f.os.refused(err) {
				return err
			}
			f.useDirect.Store(false) // refused: nothing to choose between
			f.calib.stop()
			return f.writeChunk(b, off)
		}
	} else {
		if _, err := f.f.WriteAt(b, off); err != nil {
			return err
		}
		f.os.await(f.f, off, int64(len(b)))
	}
	f.calib.record(f, direct, time.Since(t0))
	return nil
}

// writeDirect writes a chunk through the O_DIRECT descriptor (a variable so that tests can
// make a filesystem refuse direct writes).
var writeDirect = (*os.File).WriteAt

// source is an open source file.
type source struct {
	path string
	f    *os.File
}

// maxSources is how many source files a File keeps open at once.
const maxSources = 16

// source returns path opened for reading, reusing a recently used descriptor. Ranges arrive
// in file order, so the cache almost always hits. Reads of a file closed here have finished:
// they happen on the calling goroutine.
func (f *File) source(path string) (*os.File, error) {
	for i, s := range f.srcs {
		if s.path == path {
			f.srcs = append(append(f.srcs[:i:i], f.srcs[i+1:]...), s)
			return s.f, nil
		}
	}
	if len(f.srcs) == maxSources {
		f.srcs[0].f.Close()
		f.srcs = f.srcs[1:]
	}
	s, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	f.srcs = append(f.srcs, source{path, s})
	return s, nil
}

// Close writes what is left, waits for every write to finish, sets the file's size to the
// end of the stream and leaves the file positioned there. The output file stays open for its
// owner to sync and close; source files opened for reading are closed. Closing twice does
// nothing.
func (f *File) Close() error {
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		return nil
	}
	end := f.off
	if f.cur != nil {
		end += int64(len(*f.cur.buf))
		if len(*f.cur.buf) > 0 {
			f.submit()
		} else {
			f.cur.release()
			f.cur = nil
		}
	}
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	close(f.jobs)
	close(f.sums)
	f.wg.Wait()
	for _, s := range f.srcs {
		s.f.Close()
	}
	f.srcs = nil
	err := f.err
	if f.direct != nil {
		if cerr := f.direct.Close(); err == nil {
			err = cerr
		}
		f.direct = nil
	}
	if err == nil {
		err = f.f.Truncate(end) // drops the padding of a direct last chunk
	}
	if err == nil {
		_, err = f.f.Seek(end, io.SeekStart)
	}
	return err
}
