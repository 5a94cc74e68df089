package atomicfile

import (
	"os"

	"golang.org/x/sys/windows"
)

// lock takes an exclusive lock on f's first byte without waiting; closing f releases it,
// and so does Windows when the process ends, however it ends.
func lock(f *os.File) error {
	return windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, new(windows.Overlapped))
}
