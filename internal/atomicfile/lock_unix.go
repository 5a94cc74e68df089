//go:build unix

package atomicfile

import (
	"os"

	"golang.org/x/sys/unix"
)

// lock takes an exclusive advisory lock on f without waiting; closing f releases it, and
// so does the kernel when the process dies, however it dies.
func lock(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) }
