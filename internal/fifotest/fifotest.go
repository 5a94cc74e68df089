// Package fifotest plants FIFOs for the tests that check a reader never blocks on one:
// test files import it, the shipped binary does not.
package fifotest

import "testing"

// Make makes a FIFO at path, or skips the test on a system that has none.
func Make(t testing.TB, path string) {
	t.Helper()
	mkfifo(t, path)
}
