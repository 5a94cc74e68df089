package forward

import "golang.org/x/sys/unix"

// totalMemory is the machine's physical memory in bytes (0 when unknown).
func totalMemory() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}
