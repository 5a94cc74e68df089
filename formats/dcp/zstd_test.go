package dcp

import (
	"bytes"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// FuzzDecompress: an item inflates to at most its limit, or fails; never a panic, never
// more memory than the limit allows.
func FuzzDecompress(f *testing.F) {
	enc, _ := zstd.NewWriter(nil)
	f.Add(enc.EncodeAll(bytes.Repeat([]byte{0}, 1<<16), nil), int64(1<<10))
	f.Add(enc.EncodeAll([]byte("torch.save archive"), nil), int64(1<<20))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd}, int64(10))
	f.Fuzz(func(t *testing.T, b []byte, limit int64) {
		limit = min(max(limit, 0), 1<<22)
		out, err := decompress(b, limit)
		if err == nil && int64(len(out)) > limit {
			t.Fatalf("%d bytes past the limit %d", len(out), limit)
		}
	})
}

func TestDecompressBound(t *testing.T) {
	enc, _ := zstd.NewWriter(nil)
	bomb := enc.EncodeAll(make([]byte, 8<<20), nil)
	if _, err := decompress(bomb, 1<<20); err == nil {
		t.Fatal("an item inflating past its bound was accepted")
	}
	if out, err := decompress(bomb, 8<<20); err != nil || len(out) != 8<<20 {
		t.Fatalf("%d, %v", len(out), err)
	}
	if _, err := compressed([]string{"stream.zstd/2"}); err == nil {
		t.Fatal("an unknown ZStandard version was accepted")
	}
	if _, err := compressed([]string{"stream.aes/1"}); err == nil {
		t.Fatal("an unknown transform was accepted")
	}
}
