package statedict

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
)

// ReadOptions bound a full read of many tensors (ReadTensors).
type ReadOptions struct {
	// Workers is how many tensors are read at once; 0 means GOMAXPROCS.
	Workers int
	// Release, if set, drops the resident pages of the mapped files the tensors read
	// from (Checkpoint.ReleaseMemory); it is called every ReleaseEvery bytes read through
	// the mapping.
	Release func()
	// ReleaseEvery defaults to 32 MiB.
	ReleaseEvery int64
	// Piece is the size of the reads from files; 0 means 4 MiB.
	Piece int
}

// ReadTensors streams every byte of each tensor — its contiguous little-endian value, as
// WriteTo writes it — into the writer sink(i) returns for tensors[i], reading several
// tensors at once on different cores. It is the one way ckpt reads whole checkpoints
// (hashing for inspect and check, comparing for verify) and keeps what it holds bounded:
//
//   - bytes that lie as they are in a file (FileBacked storages) are read with pread into
//     one Piece-sized buffer per worker, never through the mapping, so no page is faulted
//     in (page faults, not hashing, made a mapped read of 2 GB take twice as long as
//     reading it) and nothing grows resident;
//   - bytes computed or gathered from the mapping (casts, dequantization, strided views,
//     decompressed records) are released every ReleaseEvery bytes.
//
// A sink sees its tensor's bytes in order, from one goroutine; different sinks run
// concurrently. The first error (or ctx's cancellation) stops the read.
func ReadTensors(ctx context.Context, tensors []NamedTensor, sink func(i int) io.Writer, opts ReadOptions) error {
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, max(len(tensors), 1))
	if opts.ReleaseEvery <= 0 {
		opts.ReleaseEvery = 32 << 20
	}
	if opts.Piece <= 0 {
		opts.Piece = 4 << 20
	}
	r := &fullRead{ctx: ctx, opts: opts}
	next := make(chan int)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			pr := &preader{r: r, buf: make([]byte, opts.Piece)}
			defer pr.close()
			for i := range next {
				if errs[w] != nil {
					continue
				}
				pr.w = sink(i)
				if _, err := tensors[i].Tensor.WriteTo(pr); err != nil {
					errs[w] = fmt.Errorf("tensor %s: %w", tensors[i].Name, err)
				}
			}
		})
	}
	for i := range tensors {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// fullRead is the state a ReadTensors call shares between its workers.
type fullRead struct {
	ctx    context.Context
	opts   ReadOptions
	mapped atomic.Int64 // bytes read through the mapping since the last release
}

// fromMapping accounts for n bytes read through the mapping, releasing its pages when due.
func (r *fullRead) fromMapping(n int64) {
	if r.opts.Release != nil && r.mapped.Add(n) >= r.opts.ReleaseEvery {
		r.mapped.Store(0)
		r.opts.Release()
	}
}

// preader is one worker's writer: it passes bytes to the current sink, reading file
// ranges itself with pread into its buffer.
type preader struct {
	r     *fullRead
	w     io.Writer
	buf   []byte
	files map[string]*os.File
}

// Write passes bytes that were computed or read through the mapping on, in pieces.
func (p *preader) Write(b []byte) (int, error) {
	piece := len(p.buf)
	for done := 0; done < len(b); {
		if err := p.r.ctx.Err(); err != nil {
			return done, err
		}
		n := min(len(b)-done, piece)
		if _, err := p.w.Write(b[done : done+n]); err != nil {
			return done, err
		}
		done += n
		p.r.fromMapping(int64(n))
	}
	return len(b), nil
}

// WriteRange reads the range from its file (or reader) into the buffer, a piece at a
// time, and passes each piece (and the range's sums) on; a range in memory only goes
// through Write.
func (p *preader) WriteRange(rg Range) (int64, error) {
	read := rg.ReadAt
	switch {
	case rg.Path != "":
		f, err := p.file(rg.Path)
		if err != nil {
			return 0, err
		}
		read = func(b []byte, off int64) error {
			if _, err := f.ReadAt(b, rg.Off+off); err != nil {
				return fmt.Errorf("reading %s at byte %d: %w", rg.Path, rg.Off+off, err)
			}
			return nil
		}
	case rg.Src == nil:
		n, err := p.Write(rg.Data)
		for _, s := range rg.Sums {
			s.Write(rg.Data[:n])
		}
		return int64(n), err
	}
	total := rg.Len()
	var done int64
	for done < total {
		if err := p.r.ctx.Err(); err != nil {
			return done, err
		}
		b := p.buf[:min(int64(len(p.buf)), total-done)]
		if err := read(b, done); err != nil {
			return done, err
		}
		if _, err := p.w.Write(b); err != nil {
			return done, err
		}
		for _, s := range rg.Sums {
			s.Write(b)
		}
		done += int64(len(b))
	}
	return done, nil
}

// file opens path for reading once per worker.
func (p *preader) file(path string) (*os.File, error) {
	if f, ok := p.files[path]; ok {
		return f, nil
	}
	if len(p.files) >= 16 {
		p.close()
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if p.files == nil {
		p.files = map[string]*os.File{}
	}
	p.files[path] = f
	return f, nil
}

func (p *preader) close() {
	for _, f := range p.files {
		f.Close()
	}
	p.files = nil
}
