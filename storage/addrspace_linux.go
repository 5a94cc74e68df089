package storage

import (
	"bytes"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"syscall"
)

// mapFits reports whether a local file of size bytes may be memory-mapped without taking
// address space the heap is counting on. Under an address-space limit (ulimit -v, prlimit
// --as) ckpt sets the garbage collector's memory limit at start from the room the runtime
// left (cmd/ckpt, fitAddressSpace); a mapping made later eats into that same room, and
// the heap then runs out below the limit the collector aims for (a 381 MB DCP data file
// mapped under 1.25-2 GiB left the heap 41 MB). So under a limit a file is mapped only if
// it fits in half of what the room holds beyond the collector's limit — the heap may still
// grow to that limit in new 64 MiB arenas, and the rest covers arena granularity and the
// randomized heap base — and is read with pread otherwise (as bucket objects are: the
// readers only lose their zero-copy path). The alternative, lowering the collector's limit
// by each mapping, would starve the heap of exactly the room a large file needs. Without
// a limit, or without a memory limit set, every file is mapped.
func mapFits(size int64) bool {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_AS, &rl) != nil || rl.Cur == ^uint64(0) || rl.Cur > 1<<62 {
		return true
	}
	heap := debug.SetMemoryLimit(-1)
	if heap == math.MaxInt64 {
		return true
	}
	statm, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return true
	}
	f := bytes.Fields(statm)
	if len(f) == 0 {
		return true
	}
	pages, err := strconv.ParseInt(string(f[0]), 10, 64)
	if err != nil {
		return true
	}
	room := int64(rl.Cur) - pages*int64(os.Getpagesize())
	return size <= (room-heap)/2
}
