package bucket

import (
	"context"
	"fmt"
	"io"
	"sync"

	"gocloud.dev/blob"
)

// Reading objects: every read is a ranged GET of exactly the bytes asked for, so opening a
// checkpoint reads its headers and pickles and a tensor's bytes are fetched only when the
// tensor is read. A read of more than a block is split into blocks fetched in parallel; a
// reader going through an object in order (a conversion streaming a tensor in 1 MiB
// pieces) gets the next blocks prefetched. At most Parallel requests are in flight in the
// process, and an object holds at most Ahead+1 blocks, dropped once read past, so memory
// stays bounded whatever the object's size.
const (
	// BlockSize is the size of one ranged request of a large or sequential read.
	BlockSize = 8 << 20
	// Ahead is how many blocks are prefetched ahead of a sequential reader.
	Ahead = 4
	// Parallel bounds the range requests in flight in the process.
	Parallel = 16
)

var requests = make(chan struct{}, Parallel)

// minStream is the smallest read that continues a stream (and so is served from blocks).
const minStream = 64 << 10

// object is an open object: a store.File.
type object struct {
	b    *blob.Bucket
	l    Location
	size int64

	mu     sync.Mutex
	next   int64            // where the last read ended
	blocks map[int64]*block // prefetched blocks by index
}

type block struct {
	done chan struct{}
	data []byte
	err  error
}

func newObject(b *blob.Bucket, l Location, size int64) *object {
	return &object{b: b, l: l, size: size, next: -1, blocks: map[int64]*block{}}
}

func (o *object) Size() int64 { return o.size }

// Close drops the prefetched blocks (the bucket stays open for other objects).
func (o *object) Close() error {
	o.mu.Lock()
	o.blocks = map[int64]*block{}
	o.mu.Unlock()
	return nil
}

// ReadAt reads len(p) bytes at off, as io.ReaderAt does.
func (o *object) ReadAt(p []byte, off int64) (int, error) {
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
	// A reader streaming through the object reads piece after piece, each starting where
	// the last ended; small reads (headers, zip records' local headers scattered over the
	// object) never start prefetching.
	o.mu.Lock()
	seq := off == o.next && len(p) >= minStream
	o.next = off + int64(len(p))
	o.mu.Unlock()
	var err error
	if seq && len(p) < BlockSize {
		err = o.readBlocks(p, off)
	} else {
		err = o.readDirect(p, off)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: reading %d bytes at byte %d: %w", o.l, len(p), off, err)
	}
	return len(p), eof
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
	requests <- struct{}{}
	defer func() { <-requests }()
	return readRange(context.Background(), o.b, o.l.Key, p, off)
}

// readBlocks serves a sequential read from the object's blocks, starting the fetch of the
// blocks it needs and of the Ahead after them, and dropping those read past.
func (o *object) readBlocks(p []byte, off int64) error {
	first, last := off/BlockSize, (off+int64(len(p))-1)/BlockSize
	o.mu.Lock()
	for i := range o.blocks {
		if i < first || i > last+Ahead {
			delete(o.blocks, i) // behind the reader, or prefetched for a stream that moved on
		}
	}
	needed := make([]*block, 0, last-first+1)
	for i := first; i <= last+Ahead && i*BlockSize < o.size; i++ {
		bl := o.blocks[i]
		if bl == nil {
			bl = &block{done: make(chan struct{})}
			o.blocks[i] = bl
			start := i * BlockSize
			data := make([]byte, min(BlockSize, o.size-start))
			go func() {
				bl.err = o.fetch(data, start)
				bl.data = data
				close(bl.done)
			}()
		}
		if i <= last {
			needed = append(needed, bl)
		}
	}
	o.mu.Unlock()
	for k, bl := range needed {
		<-bl.done
		if bl.err != nil {
			o.mu.Lock()
			delete(o.blocks, first+int64(k)) // fetched again by the next read
			o.mu.Unlock()
			return bl.err
		}
		start := (first + int64(k)) * BlockSize
		from := max(off, start)
		copy(p[from-off:], bl.data[from-start:])
	}
	// A block read to its end is done with.
	end := off + int64(len(p))
	o.mu.Lock()
	for i := first; i <= last; i++ {
		if (i+1)*BlockSize <= end || end == o.size {
			delete(o.blocks, i)
		}
	}
	o.mu.Unlock()
	return nil
}
