//go:build unix

package atomicfile

import (
	"os"
	"syscall"
	"testing"
)

// TestReadUmask: the umask read without changing it is the one umask(2) reports, for the
// usual masks.
func TestReadUmask(t *testing.T) {
	orig := syscall.Umask(0o022)
	defer syscall.Umask(orig)
	for _, m := range []int{0o022, 0o077, 0o002, 0o027} {
		syscall.Umask(m)
		if got := readUmask(); got != os.FileMode(m) {
			t.Errorf("umask %03o: read %03o", m, got)
		}
	}
}
