package pickle

import "slices"

// memo is the pickle memo: dense for the indices picklers emit (0, 1, 2,
// ...), sparse for anything else, so that a LONG_BINPUT of 2^32-1 costs one
// map entry. Every index below len(dense) holds an entry: the dense part
// only grows by a put at its end, which also takes over a sparse entry at
// that index, so sparse never holds an index below len(dense).
type memo[T any] struct {
	dense  []T
	sparse map[uint64]T
}

func (m *memo[T]) reset() {
	clear(m.dense)
	m.dense = m.dense[:0]
	m.sparse = nil
}

// len returns the number of entries.
func (m *memo[T]) len() int { return len(m.dense) + len(m.sparse) }

func (m *memo[T]) has(i uint64) bool {
	_, ok := m.get(i)
	return ok
}

func (m *memo[T]) get(i uint64) (T, bool) {
	if i < uint64(len(m.dense)) {
		return m.dense[i], true
	}
	v, ok := m.sparse[i]
	return v, ok
}

// put stores v at index i.
func (m *memo[T]) put(i uint64, v T) {
	switch {
	case i < uint64(len(m.dense)):
		m.dense[i] = v
	case i == uint64(len(m.dense)):
		delete(m.sparse, i)
		if len(m.dense) == cap(m.dense) {
			m.dense = slices.Grow(m.dense, max(len(m.dense), 64)) // double: less garbage than append's 1.25×
		}
		m.dense = append(m.dense, v)
	default:
		if m.sparse == nil {
			m.sparse = make(map[uint64]T)
		}
		m.sparse[i] = v
	}
}
