package sink

import (
	"context"
	"io"
	"sync"

	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// releaseEvery is how many streamed bytes may stay resident from a mapped source before
// they are dropped (they remain in the page cache): it bounds the process's memory. Bytes
// pass on in pieces of a quarter of it.
const releaseEvery = 32 << 20

// Paged is an output whose files' bytes pass on in pieces small enough that the source's
// pages can be released between them, each piece first checking that ctx was not
// cancelled.
type Paged struct {
	out storage.Output
	ctx context.Context

	mu      sync.Mutex
	since   int64
	release func()
}

// NewPaged wraps out; ctx cancels the writing of its files.
func NewPaged(ctx context.Context, out storage.Output) *Paged {
	return &Paged{out: out, ctx: ctx}
}

// Releasing makes release what is called every releaseEvery bytes streamed (the pages of
// the source being read), until the returned func restores the previous one.
func (p *Paged) Releasing(release func()) (restore func()) {
	p.mu.Lock()
	prev := p.release
	p.release = release
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		p.release = prev
		p.mu.Unlock()
	}
}

// Streamed accounts for n bytes read from the source (written out, or read again to hash
// them), releasing the source's resident pages every releaseEvery bytes.
func (p *Paged) Streamed(n int64) {
	p.mu.Lock()
	p.since += n
	release := p.since >= releaseEvery
	if release {
		p.since = 0
	}
	rel := p.release
	p.mu.Unlock()
	if release && rel != nil {
		rel()
	}
}

// Create starts the file name, checking first that ctx was not cancelled.
func (p *Paged) Create(name string) (io.WriteCloser, error) {
	if err := p.ctx.Err(); err != nil {
		return nil, err
	}
	w, err := p.out.Create(name)
	if err != nil {
		return nil, err
	}
	return &paged{p: p, w: w}, nil
}

// Commit commits the output unless ctx was cancelled.
func (p *Paged) Commit(last []storage.NamedBytes) error {
	if err := p.ctx.Err(); err != nil {
		return err
	}
	return p.out.Commit(last)
}

func (p *Paged) Abort()                 { p.out.Abort() }
func (p *Paged) Unwrap() storage.Output { return p.out }

// inPieces passes b to write in pieces (each counted by Streamed), checking before each
// piece that ctx was not cancelled.
func (p *Paged) inPieces(b []byte, write func([]byte) (int, error)) (int, error) {
	var done int
	for done < len(b) {
		if err := p.ctx.Err(); err != nil {
			return done, err
		}
		n, err := write(b[done:min(len(b), done+releaseEvery/4)])
		done += n
		p.Streamed(int64(n))
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// paged is one file of a Paged output.
type paged struct {
	p *Paged
	w io.WriteCloser
}

// Write passes b on in pieces.
func (w *paged) Write(b []byte) (int, error) { return w.p.inPieces(b, w.w.Write) }

// WriteRange passes r on to a file writer that takes ranges (statedict.RangeWriter: a
// local file, which reads it with pread), a reader's range in pieces — it may read through
// a mapping (a cast of a mapped source), whose pages must be released as they go — and a
// file range whole: it is read with pread, never through the mapping, and every piece
// would end in a wait for its checksums. To a writer of bytes only (an upload), a reader's
// range goes from the bytes its source lends (statedict.Lender: a bucket stream's blocks,
// bucket → bucket), copied once, instead of through a buffer first.
func (w *paged) WriteRange(r statedict.Range) (int64, error) {
	if rw, ok := storage.As[statedict.RangeWriter](w.w); ok {
		return w.p.ranges(rw, r)
	}
	return w.p.lent(w, r)
}

func (p *Paged) ranges(rw statedict.RangeWriter, r statedict.Range) (int64, error) {
	var done int64
	for total := r.Len(); done < total; {
		if err := p.ctx.Err(); err != nil {
			return done, err
		}
		k := total - done
		if r.Src != nil { // a file range is read with pread, never through the mapping
			k = min(k, releaseEvery/4)
		}
		n, err := rw.WriteRange(r.Slice(done, done+k))
		done += n
		p.Streamed(n)
		if err != nil {
			return done, err
		}
	}
	return done, p.ctx.Err()
}

func (p *Paged) lent(w *paged, r statedict.Range) (int64, error) {
	var done int64
	for n := r.Len(); done < n; {
		if err := p.ctx.Err(); err != nil {
			return done, err
		}
		b, release, ok, err := r.Lend(done, min(n-done, releaseEvery/4))
		if err != nil {
			return done, err
		}
		if !ok {
			m, err := statedict.WriteRange(struct{ io.Writer }{w}, r.Slice(done, n)) // Write only: no recursion
			return done + m, err
		}
		m, err := w.w.Write(b)
		for _, h := range r.Sums {
			h.Write(b[:m])
		}
		release()
		done += int64(m)
		p.Streamed(int64(m))
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// Close finishes the file.
func (w *paged) Close() error { return w.w.Close() }

// Unwrap gives the file writer wrapped.
func (w *paged) Unwrap() io.Writer { return w.w }
