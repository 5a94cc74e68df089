//go:build race

package zipdir

// raceEnabled: the race detector makes sync.Pool drop what it is given, so that counting
// allocations of recycled buffers means nothing under it.
const raceEnabled = true
