package atomicfile

import "golang.org/x/sys/unix"

// renameat2 renames without replacing anything at the new name.
func renameat2(fd1 int, b1 string, fd2 int, b2 string) error {
	return unix.Renameat2(fd1, b1, fd2, b2, unix.RENAME_NOREPLACE)
}
