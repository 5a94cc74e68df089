//go:build unix

package kernel

import "syscall"

// cpuSeconds is the process's user+system CPU time: on a shared machine, throughput per
// CPU-second says what the kernel does when it has a core, whatever else runs.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
