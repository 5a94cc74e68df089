//go:build !unix

package bucket

// mapBuf returns n bytes (from the Go heap where anonymous mappings are not available).
func mapBuf(n int64) []byte { return make([]byte, n) }

// unmapBuf leaves b to the collector.
func unmapBuf(b []byte) {}
