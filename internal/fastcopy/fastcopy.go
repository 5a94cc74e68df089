// Package fastcopy writes checkpoint outputs at the speed of the disk. An output is a
// sequential stream of small pieces (headers, pickles) and large runs of tensor bytes, most of
// them ranges of a page-cache-warm source file. File gathers the stream into large chunks,
// reading source ranges into them with pread, and writes them durably by one of two paths:
//
//   - direct I/O (O_DIRECT): two goroutines write the aligned chunks straight to the disk,
//     without a second copy into the page cache and without waiting for writeback;
//   - the page cache: the chunks are written in pieces of cachedPiece bytes, with writeback
//     started as each chunk lands and awaited a bounded window behind, so that the disk
//     works while the stream is produced and the final fsync finds little left.
//
// On either path the file is also flushed to stable storage (fdatasync) every flushEvery
// bytes, on a goroutine of its own, so that a device's (or a VM host's) write cache drains
// while the stream is still produced instead of all at the final fsync.
//
// Which is faster differs between machines (see calibration), so the first large file on a
// device measures both and the faster writes the rest. Where direct I/O is unavailable (tmpfs,
// some network filesystems) or switched off with CKPT_DIRECT_IO=off, the page cache is used.
//
// Writers that sit in between (counters, checksums, buffers) pass ranges along by
// implementing RangeWriter, so tensor bytes need not pass through them; a writer that must
// see the bytes (a CRC, the manifest's hash) adds a hash to the range's Sums, which File feeds
// from the chunk the bytes were read into, on another goroutine while the next piece is read:
// the bytes are read once, the mapping is never touched, and checksumming runs on the second
// core.
//
// Source ranges are not copied file to file inside the kernel (copy_file_range, as cp does),
// although that saves the read into a chunk: the checksums need the bytes read anyway, and a
// kernel copy between offsets that differ modulo the page size — a tensor's place in a torch
// zip and in a safetensors file almost always do — dirties every page of the output in two
// partial writes, whose writeback took 1.9-2.1 s for 2.1 GB where whole pages took 1.4-1.5 s
// (BENCHMARKS.md, "14:55 the same day").
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

	"github.com/ckpt-dev/ckpt/ckpterr"
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
	// dirtyWindow is how far behind the stream the page-cache path waits for writeback:
	// what it has dirtied and not yet seen on disk. Enough for the disk to have many
	// requests queued (a 16 MiB window wrote a 2 GiB output 2× slower than cp + sync on a
	// VM whose disk streams at 1.4 GB/s), little next to any machine's memory.
	dirtyWindow = 128 << 20
	// cachedPiece is the most the page-cache path writes in one call, at offsets aligned
	// to it. Since Linux 6.x keeps a file's page cache in large folios (ext4 from 6.16), a
	// buffered write allocates folios as large as the write: on a VM, such high-order
	// allocations tend to land on guest memory the host has not touched yet, whose first
	// touch costs a host fault per page. Written from 4 MiB chunks in one call, 2.1 GB took
	// 2.4-7.7 s of system time, erratically; in 64 KiB pieces 0.82-0.84 s, run after run,
	// and its writeback was as fast (BENCHMARKS.md, "14:55 the same day").
	cachedPiece = 64 << 10
	// defaultFlushEvery is how many bytes of the stream lie between flushes. A sync_file_range
	// writeback reaches the device, not stable storage: on a VM whose disk is a file in the
	// host's page cache, the final fsync then waited 0.9-1.2 s for the host to write the
	// whole 2.1 GB output. Flushing every 128 MiB as the stream goes took the page-cache
	// path from 1.25-1.35× the time of cp + sync to 0.83-1.07× (rotating pairs, 6 reps,
	// 2026-12-02); every 256 or 512 MiB did less. Sixteen flushes per 2 GiB cost little
	// where a flush is cheap.
	defaultFlushEvery = 128 << 20
)

// flushEvery is defaultFlushEvery; tests shorten it.
var flushEvery int64 = defaultFlushEvery

// buffers recycles aligned chunk buffers between files (an HF folder writes many). Go
// allocates a buffer this large on a page of its own, so it is aligned as it comes; one a
// block larger is the fallback should it not be. (A buffer a block larger than 4 MiB made
// the heap grow 8 MiB at a time, which near an address-space limit was where it ran out.)
var buffers = sync.Pool{New: func() any {
	b := make([]byte, chunkSize)
	if uintptr(unsafe.Pointer(&b[0]))%blockSize != 0 {
		b = make([]byte, chunkSize+blockSize)
		skip := (blockSize - int(uintptr(unsafe.Pointer(&b[0])))%blockSize) % blockSize
		b = b[skip : skip+chunkSize : skip+chunkSize]
	}
	return &b
}}

// directIO reports whether direct I/O may be tried; CKPT_DIRECT_IO=off switches it off.
func directIO() bool { return os.Getenv("CKPT_DIRECT_IO") != "off" }

// measuredChoice reports whether the write path is chosen by measuring both (the default);
// CKPT_DIRECT_IO=on keeps direct I/O without measuring.
func measuredChoice() bool { return os.Getenv("CKPT_DIRECT_IO") != "on" }

// Which path writes fastest differs between machines: on one VM a durable write went 1.5×
// faster through the page cache than with direct I/O, on another the reverse. So the first
// file of a run on a device that is large enough measures both on its own stream: its first
// calWindow bytes with direct I/O, timed until every write has returned; the next calWindow
// through the page cache, timed until writeback of all of it has finished. Each window runs
// its path as it runs for the rest of the file (writers in parallel, the writeback window),
// so the times compare what the two paths would take; the faster one writes the rest of the
// file and every later file on the same device (choices).
//
// A stream whose bytes come from memory (a bucket's reads, a cast) measures the same way:
// since the page cache is written in cachedPiece pieces, it is the faster path for those
// too on the VM where direct I/O had been kept for them (GCS → local and a float32 →
// bfloat16 cast, BENCHMARKS.md "Buckets").
const calWindow = 32 << 20

// now is the clock calibration reads; tests move it to make one path slow without waiting.
var now = time.Now

// choices holds, per device, whether direct I/O was measured to be the faster path.
var choices sync.Map // uint64 → bool

// calibration is a File's measurement of both paths. Only the goroutine filling the File
// touches it.
type calibration struct {
	dev    uint64
	cached bool      // the direct window is done; the page-cache one runs
	begin  int64     // stream offset the running window began at
	t0     time.Time // when it began; zero until the first byte
	direct time.Duration
}

// calibrate ends a measurement window once calWindow bytes of it have been handed on: it
// waits for them to be written (and, for the page-cache window, on disk), and switches to the
// page cache after the direct window, or to the faster path after both.
func (f *File) calibrate() {
	c := f.calib
	if c == nil || f.off-c.begin < calWindow {
		return
	}
	f.pending.Wait()
	if f.noDirect.Load() { // refused while measuring: nothing to choose between
		f.calib = nil
		return
	}
	if !c.cached {
		c.direct = now().Sub(c.t0)
		c.cached, c.begin, c.t0 = true, f.off, now()
		f.useDirect.Store(false)
		return
	}
	f.os.await(f.f, c.begin, f.off-c.begin)
	useDirect := c.direct < now().Sub(c.t0)
	choices.Store(c.dev, useDirect)
	f.useDirect.Store(useDirect)
	f.calib = nil
}

// osPath holds the operating system's fast path: opening a second descriptor with direct
// I/O, telling whether a write failed because direct I/O was refused, and starting
// writeback of a written range. Linux has all of them
// (fastcopy_linux.go); elsewhere, or with CKPT_WRITE_PATH=portable, the portable path writes
// through the page cache and leaves writeback to the final fsync.
type osPath struct {
	openDirect func(f *os.File) (*os.File, error)
	refused    func(err error) bool
	// writeback starts writing a range back; await waits until it is on disk; flush
	// waits until all of the file's data written so far is on stable storage.
	writeback func(f *os.File, off, n int64)
	await     func(f *os.File, off, n int64)
	flush     func(f *os.File) error
	// device identifies the file's file system, for choices.
	device func(f *os.File) (uint64, bool)
}

var portablePath = osPath{
	openDirect: func(*os.File) (*os.File, error) { return nil, ckpterr.ErrUnsupported },
	refused:    func(error) bool { return false },
	writeback:  func(*os.File, int64, int64) {},
	await:      func(*os.File, int64, int64) {},
	flush:      func(*os.File) error { return nil },
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
	// O_DIRECT at open but not these writes; noDirect is then set for good), or while and
	// when the page cache is measured faster: chunks then go through the cache.
	useDirect atomic.Bool
	noDirect  atomic.Bool
	// start is the file offset writing began at; calib measures both paths (nil when the
	// choice is made already, or there is none to make).
	start int64
	calib *calibration
	// cachedMu lets one writer at a time write through the page cache. The file system
	// serializes buffered writes to a file anyway (ext4 takes the inode lock), and a
	// second writer waiting there spins on a core the stream's producer needs: on a VM whose
	// page-cache copies were slow, 20% of the samples of a 2 GiB conversion were that spin.
	cachedMu sync.Mutex
	// pending counts chunks handed to the writers and not yet written.
	pending sync.WaitGroup
	// srcs are the source files open for reading, most recently used last; at most
	// maxSources stay open, so a folder of thousands of shards needs no more descriptors.
	srcs []source

	cur   *chunk // chunk being filled; nil when none is
	off   int64  // file offset of the chunk being filled
	slots chan struct{}
	jobs  chan *chunk
	sums  chan sumJob
	wg    sync.WaitGroup
	// flushes asks flushLoop for a flush (at most one waits: more would be redundant);
	// flushed is closed when flushLoop has returned.
	flushes chan struct{}
	flushed chan struct{}

	mu     sync.Mutex
	err    error // first error of the writing goroutine
	closed bool
}

// chunk is a buffer on its way to the file. It goes back to the pool when its last user
// (filler, writer, checksummers) is done with it.
type chunk struct {
	buf   *[]byte
	off   int64
	limit int  // how many bytes it takes: it ends on a block boundary of the file
	final bool // the stream's last chunk, which direct I/O may pad
	// lent gives the buffer back to the source that lent it (lendRange); nil for a buffer
	// of the pool.
	lent func()
	refs atomic.Int32
	f    *File
}

func (c *chunk) release() {
	if c.refs.Add(-1) == 0 {
		if c.lent != nil {
			c.lent()
		} else {
			buffers.Put(c.buf)
		}
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
		jobs: make(chan *chunk, inFlight), sums: make(chan sumJob, inFlight*chunkSize/piece),
		flushes: make(chan struct{}, 1), flushed: make(chan struct{})}
	out.off, out.err = f.Seek(0, io.SeekCurrent)
	out.start = out.off
	if out.err == nil && out.off%blockSize == 0 && directIO() {
		if d, err := out.os.openDirect(f); err == nil {
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
	go out.flushLoop()
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

// WriteRange reads r from its file (else from r.Data or r.Src) into the output stream,
// feeding r.Sums as it goes.
func (f *File) WriteRange(r statedict.Range) (int64, error) {
	if r.Path == "" && r.Src != nil && f.calib == nil && !f.useDirect.Load() {
		return f.lendRange(r)
	}
	put := r.ReadAt
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
	return f.fill(r.Len(), r.Sums, put)
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
			c := &chunk{buf: buffers.Get().(*[]byte), off: f.off, limit: chunkSize - int(f.off%blockSize), f: f}
			*c.buf = (*c.buf)[:0]
			c.refs.Store(1)
			f.cur = c
			if f.calib != nil && f.calib.t0.IsZero() {
				f.calib.t0 = now()
			}
		}
		c := f.cur
		b := *c.buf
		k := min(n-done, int64(c.limit-len(b)))
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
		if len(*c.buf) == c.limit {
			f.submit()
			f.calibrate()
		}
	}
	if last != nil {
		<-last
	}
	return done, nil
}

// lendRange writes a reader range from the memory its source lends (statedict.Lender: a
// bucket stream's prefetched blocks), in place: each lent piece goes to the writers as a
// chunk of its own and back to the source once written and checksummed — one copy of
// every byte fewer than reading it into a chunk. Only the page-cache path takes such
// chunks: direct I/O needs aligned memory and offsets. What the source does not lend is
// read into chunks as fill does.
func (f *File) lendRange(r statedict.Range) (int64, error) {
	n := r.Len()
	var done int64
	var last chan struct{}
	for done < n {
		if err := f.failed(); err != nil {
			return done, err
		}
		b, release, ok, err := r.Lend(done, min(n-done, chunkSize)) // as much as a chunk holds
		if err != nil {
			return done, err
		}
		if ok && len(b) == 0 {
			release()
			ok = false
		}
		if !ok {
			from := done
			m, err := f.fill(n-done, r.Sums, func(dst []byte, d int64) error { return r.ReadAt(dst, from+d) })
			return done + m, err
		}
		if f.cur != nil { // its bytes come first
			if len(*f.cur.buf) > 0 {
				f.submit()
			} else {
				f.cur.release()
				f.cur = nil
			}
		}
		f.slots <- struct{}{}
		c := &chunk{buf: &b, off: f.off, limit: len(b), lent: release, f: f}
		c.refs.Store(1)
		done += int64(len(b))
		for p := 0; p < len(b) && len(r.Sums) > 0; p += piece {
			q := min(len(b), p+piece)
			c.refs.Add(1)
			job := sumJob{data: b[p:q], c: c, sums: r.Sums}
			if done == n && q == len(b) {
				last = make(chan struct{})
				job.done = last
			}
			f.sums <- job
		}
		f.cur = c
		f.submit()
	}
	if last != nil {
		<-last
	}
	return done, nil
}

// settle starts writeback of n bytes written at off and waits for the bytes a dirtyWindow
// behind them: dirty pages stay bounded, the disk has plenty queued, and the final fsync
// finds little left to write.
func (f *File) settle(off, n int64) {
	f.os.writeback(f.f, off, n)
	if lag := off - dirtyWindow; lag >= f.start {
		f.os.await(f.f, lag, n)
	}
}

// submit hands the chunk being filled to the writing goroutines.
func (f *File) submit() {
	f.pending.Add(1)
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
		if j.c != nil {
			j.c.release()
		}
		if j.done != nil {
			close(j.done)
		}
	}
}

// fail records the first error of the goroutines writing or checksumming.
func (f *File) fail(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
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
			if err := f.writeChunk(c); err != nil {
				f.fail(err)
			} else if end := c.off + int64(len(*c.buf)); (end-f.start)/flushEvery != (c.off-f.start)/flushEvery {
				select {
				case f.flushes <- struct{}{}:
				default: // one is waiting already, and will cover this chunk
				}
			}
		}
		c.release()
		f.pending.Done()
	}
}

// flushLoop flushes the file whenever asked. Its error is the File's: the kernel reports a
// writeback error to a descriptor once, so the final fsync would not see it again.
func (f *File) flushLoop() {
	defer close(f.flushed)
	for range f.flushes {
		if err := f.os.flush(f.f); err != nil {
			f.fail(&os.PathError{Op: "fdatasync", Path: f.f.Name(), Err: err})
		}
	}
}

// writeChunk writes c, with direct I/O when that is the path and c lies on block
// boundaries. The stream's short last chunk is padded to a whole block for direct I/O;
// Close truncates the padding away.
func (f *File) writeChunk(c *chunk) error {
	b, off := *c.buf, c.off
	if f.useDirect.Load() && c.lent == nil && off%blockSize == 0 && (len(b)%blockSize == 0 || c.final) {
		padded := (len(b) + blockSize - 1) / blockSize * blockSize
		clear(b[len(b):padded])
		_, err := writeDirect(f.direct, b[:padded], off)
		if err == nil {
			return nil
		}
		if !f.os.refused(err) {
			return err
		}
		f.noDirect.Store(true)
		f.useDirect.Store(false) // this chunk, and every later one, through the page cache
	}
	f.cachedMu.Lock()
	_, err := writeCached(f.f, b, off)
	f.cachedMu.Unlock()
	if err != nil {
		return err
	}
	f.settle(off, int64(len(b)))
	return nil
}

// writeDirect writes a chunk through the O_DIRECT descriptor, writeCached through the
// page cache in pieces (variables so that tests can make a path slow, or refuse direct
// writes).
var (
	writeDirect = (*os.File).WriteAt
	writeCached = func(f *os.File, b []byte, off int64) (int, error) { return inPieces(f.WriteAt, b, off) }
)

// inPieces writes b at off with write, in pieces of at most cachedPiece bytes that do not
// cross a multiple of cachedPiece.
func inPieces(write func([]byte, int64) (int, error), b []byte, off int64) (int, error) {
	var n int
	for len(b) > 0 {
		k := min(len(b), cachedPiece-int(off%cachedPiece))
		m, err := write(b[:k], off)
		n += m
		if err != nil {
			return n, err
		}
		b, off = b[k:], off+int64(k)
	}
	return n, nil
}

// source is an open source file.
type source struct {
	path string
	f    *os.File
}

// maxSources is how many source files a File keeps open at once.
const maxSources = 16

// source returns path opened for reading, reusing a recently used descriptor. Ranges arrive
// in file order, so the cache almost always hits. Reads and copies of a file closed here
// have finished: they happen on the calling goroutine.
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
			f.cur.final = true
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
	close(f.flushes)
	<-f.flushed
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
