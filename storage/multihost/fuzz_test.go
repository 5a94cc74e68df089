package multihost

import (
	"strings"
	"testing"
)

// FuzzParseMarker: a marker's text yields a run of one word or none, never a panic.
func FuzzParseMarker(f *testing.F) {
	f.Add([]byte(MarkerText + "0123456789abcdef\n"))
	f.Add([]byte("ckpt output in progress\n"))
	f.Add([]byte(MarkerText + " a b\nrun c\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		run := ParseMarker(b)
		if strings.ContainsAny(run, "\n") || run != strings.TrimSpace(run) {
			t.Fatalf("run %q", run)
		}
	})
}
