package bucket

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// TestBlocksAdviseHuge: a block of BlockSize is a mapping the kernel may back with
// transparent huge pages (smaps: THPeligible 1) where THP is on at all; a small buffer
// is left alone.
func TestBlocksAdviseHuge(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		t.Skipf("transparent huge pages are off here (%q, %v)", mode, err)
	}
	eligible := func(b []byte) string {
		t.Helper()
		f, err := os.Open("/proc/self/smaps")
		if err != nil {
			t.Skip(err)
		}
		defer f.Close()
		addr := uintptr(unsafe.Pointer(&b[0]))
		in := false
		for sc := bufio.NewScanner(f); sc.Scan(); {
			line := sc.Text()
			var lo, hi uintptr
			if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && strings.Contains(line, " ") {
				in = lo <= addr && addr < hi
				continue
			}
			if v, ok := strings.CutPrefix(line, "THPeligible:"); ok && in {
				return strings.TrimSpace(v)
			}
		}
		t.Fatalf("no smaps entry for %#x", addr)
		return ""
	}
	big := mapBuf(BlockSize)
	defer unmapBuf(big)
	if got := eligible(big); got != "1" {
		t.Errorf("a block of %d bytes: THPeligible %s", BlockSize, got)
	}
	small := mapBuf(minStream)
	defer unmapBuf(small)
	if got := eligible(small); got != "0" {
		t.Errorf("a buffer of %d bytes: THPeligible %s", minStream, got)
	}
}
