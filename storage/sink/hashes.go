package sink

import (
	"hash"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// Hashes keeps the xxhash64 digest of each key's bytes as a writer feeds them — a
// statedict writer's tensors and storages (statedict.WriteOptions.Sum) — so that the
// manifest reads nothing a second time.
type Hashes struct {
	mu sync.Mutex
	m  map[any]*xxhash.Digest
}

// NewHashes returns an empty set of digests.
func NewHashes() *Hashes { return &Hashes{m: map[any]*xxhash.Digest{}} }

// Sum returns a new digest for the bytes of key (statedict.WriteOptions.Sum).
func (h *Hashes) Sum(key any) hash.Hash {
	d := xxhash.New()
	h.mu.Lock()
	h.m[key] = d
	h.mu.Unlock()
	return d
}

// Sum64 is the digest fed for key, if any was.
func (h *Hashes) Sum64(key any) (uint64, bool) {
	h.mu.Lock()
	d, ok := h.m[key]
	h.mu.Unlock()
	if !ok {
		return 0, false
	}
	return d.Sum64(), true
}
