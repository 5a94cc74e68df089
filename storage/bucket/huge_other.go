//go:build unix && !linux

package bucket

// adviseHuge does nothing: transparent huge pages are Linux's.
func adviseHuge([]byte) {}
