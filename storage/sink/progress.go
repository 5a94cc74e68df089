package sink

import (
	"hash"
	"sync"
)

// Progress reports how many bytes of a total were written, as the digests they are fed
// count them (Counting): tensor bytes, whatever the layout adds around them or compresses.
type Progress struct {
	report func(done, total int64)

	mu          sync.Mutex
	done, total int64
}

// NewProgress reports to report (nil: nothing is counted).
func NewProgress(report func(done, total int64)) *Progress { return &Progress{report: report} }

// Expect sets the total to n.
func (p *Progress) Expect(n int64) {
	p.mu.Lock()
	p.total = n
	p.mu.Unlock()
}

// Grow adds n to the total.
func (p *Progress) Grow(n int64) {
	p.mu.Lock()
	p.total += n
	p.mu.Unlock()
}

// Advance reports n more bytes written, never past the total.
func (p *Progress) Advance(n int64) {
	if p.report == nil {
		return
	}
	p.mu.Lock()
	p.done = min(p.done+n, p.total)
	done, total := p.done, p.total
	p.mu.Unlock()
	p.report(done, total)
}

// Finish reports the total as done (a writer of some ranks does not hash every piece its
// ranks hold: others may write the replicated ones).
func (p *Progress) Finish() {
	if p.report == nil {
		return
	}
	p.mu.Lock()
	p.done = p.total
	total := p.total
	p.mu.Unlock()
	p.report(total, total)
}

// Counting is h whose input also counts as progress.
func (p *Progress) Counting(h hash.Hash) hash.Hash {
	if p.report == nil {
		return h
	}
	return &counted{Hash: h, p: p}
}

type counted struct {
	hash.Hash
	p *Progress
}

func (c *counted) Write(b []byte) (int, error) {
	c.p.Advance(int64(len(b)))
	return c.Hash.Write(b)
}

// Summing is the statedict.WriteOptions.Sum of writers whose digests h keeps and whose
// bytes count as progress.
func (p *Progress) Summing(h *Hashes) func(key any) hash.Hash {
	return func(key any) hash.Hash { return p.Counting(h.Sum(key)) }
}
