//go:build unix && !linux

package atomicfile

import "golang.org/x/sys/unix"

// renameat2 is not available here: renameNoReplace checks, then renames.
func renameat2(int, string, int, string) error { return unix.ENOSYS }
