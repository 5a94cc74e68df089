//go:build unix && !linux

package atomicfile

import (
	"os"
	"syscall"
)

// readUmask reads the umask with umask(2), setting it back at once.
func readUmask() os.FileMode {
	m := syscall.Umask(0o022)
	syscall.Umask(m)
	return os.FileMode(m) & 0o777
}
