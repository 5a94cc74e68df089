//go:build !linux

package storage

// mapFits is true: address-space limits are only accounted for on Linux (see
// addrspace_linux.go).
func mapFits(int64) bool { return true }
