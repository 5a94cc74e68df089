//go:build unix

package regular

import (
	"testing"

	"golang.org/x/sys/unix"
)

// mkfifo makes a FIFO at path (the tests that plant one skip where there are none).
func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := unix.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}
