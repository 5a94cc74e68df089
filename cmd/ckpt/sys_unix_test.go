//go:build unix

package main

import (
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// stopProcess stops p (SIGSTOP) until it is killed.
func stopProcess(t *testing.T, p *os.Process) {
	t.Helper()
	if err := p.Signal(unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
}

// inode is the inode number of the file st describes.
func inode(st os.FileInfo) uint64 { return st.Sys().(*syscall.Stat_t).Ino }

// maxRSS is the peak resident set of the process ps describes (ru_maxrss: KiB on Linux).
func maxRSS(ps *os.ProcessState) (int64, bool) {
	u, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, false
	}
	return int64(u.Maxrss), true
}
