package storage

import "io"

// A decorator of a reader, writer or output — a File counting what is read, a writer
// hashing what passes, storage/sink's outputs — keeps the optional capabilities of what it
// wraps (Mapped; statedict's Windower, Prefetcher, ReadPlanner, Lender, RangeWriter; an
// Output's Leftovers, FileSums, Staged, Reopener, SharedOutput) discoverable by giving it
// back through Unwrap, as errors.As finds wrapped errors (restic's backend.AsBackend):
// callers look capabilities up with As, never with a bare type assertion, which a
// decorator defeats.

// ReaderUnwrapper is a reader that wraps another, reading at the same offsets.
type ReaderUnwrapper interface {
	Unwrap() io.ReaderAt
}

// WriterUnwrapper is a writer that wraps another, writing the same bytes.
type WriterUnwrapper interface {
	Unwrap() io.Writer
}

// OutputUnwrapper is an Output that wraps another (a decorator of storage/sink), writing
// the same files.
type OutputUnwrapper interface {
	Unwrap() Output
}

// As returns the first value in v's Unwrap chain (v itself first) that has capability T.
func As[T any](v any) (T, bool) {
	for v != nil {
		if c, ok := v.(T); ok {
			return c, true
		}
		switch u := v.(type) {
		case ReaderUnwrapper:
			v = u.Unwrap()
		case WriterUnwrapper:
			v = u.Unwrap()
		case OutputUnwrapper:
			v = u.Unwrap()
		default:
			v = nil
		}
	}
	var zero T
	return zero, false
}
