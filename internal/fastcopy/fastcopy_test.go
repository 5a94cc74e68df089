package fastcopy

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestFileInterleaves checks that buffered writes and kernel-copied ranges land in order and
// byte-exact, for ranges below and above the kernel-copy threshold and at odd offsets.
func TestFileInterleaves(t *testing.T) {
	dir := t.TempDir()
	src := make([]byte, 3<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	srcPath := filepath.Join(dir, "src")
	if err := os.WriteFile(srcPath, src, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	f := NewFile(out)
	var want bytes.Buffer
	pieces := []struct{ off, n int }{{0, 10}, {17, 1 << 20}, {5, 100 << 10}, {3<<20 - 70000, 70000}, {1, 3}}
	for i, p := range pieces {
		hdr := []byte{byte(i), 'h'}
		f.Write(hdr)
		want.Write(hdr)
		rng := Range{Data: src[p.off : p.off+p.n], Path: srcPath, Off: int64(p.off)}
		n, err := Write(f, rng)
		if err != nil || n != int64(p.n) {
			t.Fatalf("range %d: %d, %v", i, n, err)
		}
		want.Write(src[p.off : p.off+p.n])
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out.Close()
	got, _ := os.ReadFile(filepath.Join(dir, "out"))
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("output differs (%d bytes, want %d)", len(got), want.Len())
	}
}
