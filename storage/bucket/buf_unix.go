//go:build unix

package bucket

import "syscall"

// mapBuf returns n bytes of anonymous memory outside the Go heap: prefetched blocks do
// not count towards the collector's target, which would otherwise let the heap grow to
// twice the bytes in flight before collecting.
func mapBuf(n int64) []byte {
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n, n+1) // a capacity of no size class: putBuf leaves it to the collector
	}
	adviseHuge(b)
	return b
}

// unmapBuf returns a buffer of mapBuf's to the system.
func unmapBuf(b []byte) { syscall.Munmap(b) }
