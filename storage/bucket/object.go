package bucket

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// Reading objects: every read is a ranged GET of exactly the bytes asked for, so opening a
// checkpoint reads its headers and pickles and a tensor's bytes are fetched only when the
// tensor is read. A read of more than a block is split into blocks fetched in parallel.
//
// A reader going through a range in order (a conversion streaming a tensor in 1 MiB
// pieces) is a stream: the bytes after its read are prefetched, twice as far ahead as the
// stream will then have read (from 64 KiB, doubling up to Ahead blocks) and never past
// the end of the range the caller will read — the storage a Window was made for, or the
// object. A reader that stops early has cost at most three times what it read; a
// --select of one layer reads that layer's bytes and its headers, not the blocks after
// each tensor. A writer going from tensor to tensor asks for the next one's first block
// while it writes the current one (Prefetch), so that reading and writing overlap across
// tensors too.
//
// At most Parallel requests are in flight in the process, a stream holds at most its
// read and Ahead blocks, dropped once read past, and at most maxStreams streams hold
// prefetched bytes (the one read longest ago loses them), so memory stays bounded
// whatever the object's or the checkpoint's size. Blocks live outside the Go heap and
// are reused (getBuf): a conversion from a bucket peaks near 125 MiB resident, within
// 60 MiB of the same conversion from a local file (BENCHMARKS.md). Two blocks ahead read
// within 10% of four on loopback (scripts/bench/rangeget).
const (
	// BlockSize is the largest ranged request of a large or sequential read.
	BlockSize = 8 << 20
	// Ahead is how many blocks a long stream has prefetched ahead of its reader.
	Ahead = 2
	// Parallel bounds the range requests in flight in the process.
	Parallel = 16
)

var requests = make(chan struct{}, Parallel)

const (
	// minStream is the smallest read that continues a stream (and the first prefetch).
	minStream = 64 << 10
	// maxStreams bounds the streams holding prefetched bytes in the process.
	maxStreams = 4
)

// object is an open object: a storage.File. Its reads are cancelled with ctx, the context
// it was opened with.
type object struct {
	ctx   context.Context
	b     *Bucket
	l     Location
	size  int64
	whole *stream // reads through the object itself
}

func newObject(ctx context.Context, b *Bucket, l Location, size int64) *object {
	o := &object{ctx: ctx, b: b, l: l, size: size}
	o.whole = &stream{o: o, lo: 0, hi: size, next: -1} // a first read at 0 (a header) is no stream
	return o
}

func (o *object) Size() int64 { return o.size }

// Close drops the prefetched bytes of the object's streams (the bucket stays open for
// other objects).
func (o *object) Close() error {
	active.mu.Lock()
	var mine []*stream
	kept := active.list[:0]
	for _, s := range active.list {
		if s.o == o {
			mine = append(mine, s)
		} else {
			kept = append(kept, s)
		}
	}
	clear(active.list[len(kept):])
	active.list = kept
	active.mu.Unlock()
	for _, s := range mine {
		s.drop()
	}
	return nil
}

// ReadAt reads len(p) bytes at off, as io.ReaderAt does.
func (o *object) ReadAt(p []byte, off int64) (int, error) { return o.whole.ReadAt(p, off) }

// Lend lends the object's bytes at off as its streams do (statedict.Lender).
func (o *object) Lend(off, n int64) ([]byte, func(), bool, error) { return o.whole.Lend(off, n) }

// Window returns a reader of the object (offsets are the object's) for a caller that will
// read [off, off+n) and nothing else — a tensor's storage (statedict.Windower): its stream
// prefetches within that range only.
func (o *object) Window(off, n int64) io.ReaderAt {
	lo := min(max(off, 0), o.size)
	hi := min(max(off+n, lo), o.size)
	return &stream{o: o, lo: lo, hi: hi, next: lo}
}

// stream reads an object for one reader, prefetching the bytes after a read that
// continues the last one, within [lo, hi).
type stream struct {
	o      *object
	lo, hi int64

	mu       sync.Mutex
	want     int64    // the end of the bytes the reader said it reads whole (WillRead)
	next     int64    // where the last read ended
	streamed int64    // bytes read by the reads of the current stream
	chunks   []*chunk // fetched or in flight, contiguous and in order, ending at issued
	issued   int64
}

// chunk is one ranged request's bytes [start, end). Its buffer goes back to the pool
// once the stream has let go of it (gone), no read is copying from it (refs) and the
// fetch has finished; the stream's mu guards these.
type chunk struct {
	start, end int64
	done       chan struct{}
	data       []byte
	err        error

	refs    int
	gone    bool
	fetched bool
}

// forget lets go of the chunks cs, recycling the buffers no one else holds. s.mu is held.
func forget(cs []*chunk) {
	for _, c := range cs {
		c.gone = true
		c.release()
	}
}

// release recycles the buffer of a chunk no one holds any more. s.mu is held.
func (c *chunk) release() {
	if c.gone && c.refs == 0 && c.fetched && c.data != nil {
		putBuf(c.data)
		c.data = nil
	}
}

// Buffers come by size class (powers of two from minStream to BlockSize) from anonymous
// memory outside the Go heap (mapBuf) and are kept for reuse up to keptBytes, so that
// streaming gigabytes maps a few buffers and the heap stays as small as for a local file.
// The pool serves the upload side too (S3 parts, s3put.go; GCS chunks, gcs.go — two of
// UploadBuffer, as many bytes as UploadParallel+1 parts): a conversion from a bucket into
// one keeps the blocks of its reads and the parts of its uploads, which a fresh mapping
// would otherwise cost a page fault per 4 KiB to fill (a third of the CPU time of the
// 2 GiB conversion, BENCHMARKS.md).
const keptBytes = 4*BlockSize + (UploadParallel+1)*UploadPart

var free struct {
	mu    sync.Mutex
	lists [24][][]byte
	bytes int64
}

// outstanding counts the buffers getBuf handed out and putBuf has not had back: every
// path of the read and upload sides returns its buffers (the tests count them).
var outstanding atomic.Int64

func sizeClass(n int64) int {
	c := 0
	for int64(minStream)<<c < n {
		c++
	}
	return c
}

func getBuf(n int64) []byte {
	outstanding.Add(1)
	c := sizeClass(n)
	free.mu.Lock()
	if l := free.lists[c]; len(l) > 0 {
		b := l[len(l)-1]
		free.lists[c] = l[:len(l)-1]
		free.bytes -= int64(cap(b))
		free.mu.Unlock()
		return b[:n]
	}
	free.mu.Unlock()
	return mapBuf(int64(minStream) << c)[:n]
}

func putBuf(b []byte) {
	outstanding.Add(-1)
	b = b[:cap(b)]
	c := sizeClass(int64(len(b)))
	if int64(minStream)<<c != int64(len(b)) {
		return // not mapped by getBuf
	}
	free.mu.Lock()
	if free.bytes+int64(len(b)) <= keptBytes {
		free.lists[c] = append(free.lists[c], b)
		free.bytes += int64(len(b))
		b = nil
	}
	free.mu.Unlock()
	if b != nil {
		unmapBuf(b)
	}
}

// ReadAt reads len(p) bytes at off (an offset in the object), as io.ReaderAt does.
func (s *stream) ReadAt(p []byte, off int64) (int, error) {
	o := s.o
	if off < 0 {
		return 0, fmt.Errorf("%s: read at negative offset %d", o.l, off)
	}
	if off >= o.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	var eof error
	if rem := o.size - off; int64(len(p)) > rem {
		p, eof = p[:rem], io.EOF
	}
	end := off + int64(len(p))
	s.mu.Lock()
	cont := s.continues(off, end)
	s.next = end
	var needed []*chunk
	if cont {
		needed = s.plan(off, end)
		s.streamed += int64(len(p))
	} else {
		s.reset()
	}
	s.mu.Unlock()
	var err error
	if cont {
		touch(s)
		err = s.copyOut(p, off, needed)
	} else {
		err = o.readDirect(p, off)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: reading %d bytes at byte %d: %w", o.l, len(p), off, err)
	}
	return len(p), eof
}

// Lend lends the stream's prefetched bytes at off in place (statedict.Lender): up to n of
// them, as far as the block holding off goes, valid until release. A writer that writes
// from borrowed memory (fastcopy through the page cache) takes a tensor's bytes so, one
// copy fewer than ReadAt: copying blocks out had been 8% of the CPU samples of a 2 GiB
// GCS → local conversion (BENCHMARKS.md "Buckets"). It lends only where ReadAt would
// stream (ok is false elsewhere: the caller reads), and moves the stream on as a read does.
func (s *stream) Lend(off, n int64) (b []byte, release func(), ok bool, err error) {
	o := s.o
	if off < 0 || n <= 0 || off >= o.size {
		return nil, nil, false, nil
	}
	end := min(off+n, o.size)
	s.mu.Lock()
	if !s.continues(off, end) {
		s.mu.Unlock()
		return nil, nil, false, nil
	}
	needed := s.plan(off, end)
	c := needed[0]
	for _, d := range needed[1:] { // lent: the first block's part only
		d.refs--
		d.release()
	}
	end = min(end, c.end)
	s.next = end
	s.streamed += end - off
	s.mu.Unlock()
	touch(s)
	<-c.done
	s.mu.Lock()
	if err = c.err; err != nil {
		c.refs--
		c.release()
		s.reset() // fetched again by the next read
		s.mu.Unlock()
		return nil, nil, false, fmt.Errorf("%s: reading %d bytes at byte %d: %w", o.l, end-off, off, err)
	}
	s.readTo(end) // c stays until released
	s.mu.Unlock()
	var once sync.Once
	return c.data[off-c.start : end-c.start], func() {
		once.Do(func() {
			s.mu.Lock()
			c.refs--
			c.release()
			s.mu.Unlock()
		})
	}, true, nil
}

// plan starts the fetches a stream's read of [off, end) needs and the prefetch after it,
// and returns the chunks holding [off, end). s.mu is held.
func (s *stream) plan(off, end int64) []*chunk {
	s.readTo(off) // read past
	if len(s.chunks) == 0 || s.chunks[0].start > off {
		forget(s.chunks)
		s.chunks, s.issued = nil, off
	}
	for s.issued < end {
		s.issue(min(BlockSize, end-s.issued))
	}
	// Prefetch twice as far ahead as the stream will have read, up to Ahead blocks, in
	// requests of a quarter of that; never past the range. Bytes the reader said it reads
	// whole (WillRead) are prefetched Ahead blocks deep from the first read.
	ahead := min(max(2*(s.streamed+end-off), minStream), Ahead*BlockSize)
	if s.want > end {
		ahead = max(ahead, min(Ahead*BlockSize, s.want-end))
	}
	size := min(max(ahead/Ahead, minStream), BlockSize)
	target := min(s.hi, end+ahead)
	for s.issued < target {
		n := min(size, target-s.issued)
		if n < size && target < s.hi {
			break // a full request once the reader has made room for it
		}
		s.issue(n)
	}
	var needed []*chunk
	for _, c := range s.chunks {
		if c.start >= end {
			break
		}
		c.refs++
		needed = append(needed, c)
	}
	return needed
}

// WillRead tells the stream its reader is about to read the n bytes at off whole
// (statedict.ReadPlanner: a tensor being written), so reads from off on prefetch Ahead
// blocks deep at once instead of ramping up from 64 KiB. Ramping up costs a round trip
// per doubling, and the first tensor of a conversion had no Prefetch to hide them behind:
// its first 32 MiB took ten times as long to read as any later 32 MiB. Bytes outside
// the window are never asked for.
func (s *stream) WillRead(off, n int64) {
	s.mu.Lock()
	if off >= s.lo && off < s.hi {
		s.want = min(off+max(n, 0), s.hi)
	}
	s.mu.Unlock()
}

// Prefetch starts fetching the window's first bytes (up to a block) before its reader
// asks for them (statedict.Prefetcher): a conversion calls it for the next tensor while it
// writes the current one. It does nothing once the window has been read; the bytes stay
// within the window, so a reader that never comes has cost one block at most.
func (s *stream) Prefetch() {
	s.mu.Lock()
	if s.next != s.lo || len(s.chunks) > 0 || s.lo >= s.hi {
		s.mu.Unlock()
		return
	}
	s.issued = s.lo
	s.issue(min(BlockSize, s.hi-s.lo))
	s.mu.Unlock()
	touch(s)
}

// issue starts fetching the n bytes at s.issued. s.mu is held.
func (s *stream) issue(n int64) {
	c := &chunk{start: s.issued, end: s.issued + n, done: make(chan struct{})}
	s.chunks = append(s.chunks, c)
	s.issued = c.end
	go func() {
		data := getBuf(c.end - c.start)
		err := s.o.fetch(data, c.start)
		s.mu.Lock()
		c.data, c.err, c.fetched = data, err, true
		c.release() // dropped while in flight
		s.mu.Unlock()
		close(c.done)
	}()
}

// copyOut copies [off, off+len(p)) from the chunks holding it, then drops the chunks
// read to their end.
func (s *stream) copyOut(p []byte, off int64, needed []*chunk) error {
	end := off + int64(len(p))
	var err error
	for _, c := range needed {
		<-c.done
		if err = c.err; err != nil {
			break
		}
		from, to := max(off, c.start), min(end, c.end)
		copy(p[from-off:to-off], c.data[from-c.start:to-c.start])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range needed {
		c.refs--
		c.release()
	}
	if err != nil {
		s.reset() // fetched again by the next read
		return err
	}
	s.readTo(end)
	return nil
}

// continues reports whether a read of [off, end) continues the stream — ReadAt and Lend
// then serve it from what is fetched and prefetch after it. A reader streaming through the
// range reads piece after piece, each starting where the last ended; small reads (headers,
// zip records' local headers scattered over the object) never start prefetching, but the
// short last piece of a stream is served from what was prefetched for it. s.mu is held.
func (s *stream) continues(off, end int64) bool {
	fetched := len(s.chunks) > 0 && s.chunks[0].start <= off && end <= s.issued
	return off == s.next && (end-off >= minStream || fetched) && off >= s.lo && end <= s.hi
}

// readTo lets go of the chunks a read ending at end has read to their end. s.mu is held.
func (s *stream) readTo(end int64) {
	for len(s.chunks) > 0 && s.chunks[0].end <= end {
		forget(s.chunks[:1])
		s.chunks = s.chunks[1:]
	}
}

// reset forgets the stream's prefetched bytes (fetches in flight finish unread). s.mu is
// held.
func (s *stream) reset() {
	forget(s.chunks)
	s.chunks, s.streamed, s.issued = nil, 0, 0
}

// drop forgets the stream's prefetched bytes.
func (s *stream) drop() {
	s.mu.Lock()
	s.reset()
	s.mu.Unlock()
}

// active are the streams that may hold prefetched bytes, the most recently read first.
var active struct {
	mu   sync.Mutex
	list []*stream
}

// touch makes s the most recently read stream, dropping the prefetched bytes of the one
// read longest ago when more than maxStreams hold some.
func touch(s *stream) {
	active.mu.Lock()
	l := active.list
	i := 0
	for i < len(l) && l[i] != s {
		i++
	}
	if i == len(l) {
		l = append(l, nil)
	}
	copy(l[1:i+1], l[:i])
	l[0] = s
	var evicted *stream
	if len(l) > maxStreams {
		evicted, l = l[len(l)-1], l[:len(l)-1]
	}
	active.list = l
	active.mu.Unlock()
	if evicted != nil {
		evicted.drop()
	}
}

// readDirect reads p at off in blocks fetched in parallel.
func (o *object) readDirect(p []byte, off int64) error {
	if len(p) <= BlockSize {
		return o.fetch(p, off)
	}
	var wg sync.WaitGroup
	errs := make([]error, (len(p)+BlockSize-1)/BlockSize)
	for i := range errs {
		part := p[i*BlockSize : min(len(p), (i+1)*BlockSize)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = o.fetch(part, off+int64(i*BlockSize))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// fetch reads p at off with one ranged request (retried), within the process's bound.
func (o *object) fetch(p []byte, off int64) error {
	select {
	case requests <- struct{}{}:
	case <-o.ctx.Done():
		return o.ctx.Err()
	}
	defer func() { <-requests }()
	return o.b.ReadRange(o.ctx, o.l.Key, p, off)
}
