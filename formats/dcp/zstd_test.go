package dcp

import (
	"bytes"
	"encoding/binary"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// rleFrame is a zstd frame of blocks RLE blocks of 128 KiB of zeros each: 4 bytes per
// block, the most a zstd stream regenerates per byte.
func rleFrame(blocks int) []byte {
	b := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38} // magic, no content size, 128 KiB window
	for i := range blocks {
		h := uint32(1)<<1 | uint32(128<<10)<<3 // RLE, 128 KiB
		if i == blocks-1 {
			h |= 1
		}
		b = append(b, byte(h), byte(h>>8), byte(h>>16), 0)
	}
	return b
}

// zstdFixture is the DCP folder torch wrote with its ZStandard extension, and a tensor
// chunk's entry in it with its compressed bytes.
func zstdFixture(t testing.TB) (*Metadata, *StorageEntry, []byte) {
	const dir = "../../testdata/ecosystem/dcp/zstd/"
	b, err := os.ReadFile(dir + MetadataFile)
	if err != nil {
		t.Fatal(err)
	}
	md, err := ReadMetadata(b, dir+MetadataFile)
	if err != nil {
		t.Fatal(err)
	}
	for i := range md.Storage {
		e := &md.Storage[i]
		if it, ok := md.Item(e.FQN); ok && it.Tensor != nil && e.Offsets != nil && len(e.TransformDescriptors) > 0 {
			data, err := os.ReadFile(dir + e.RelativePath)
			if err != nil {
				t.Fatal(err)
			}
			return md, e, data[e.Offset : e.Offset+e.Length]
		}
	}
	t.Fatal("no compressed tensor chunk")
	return nil, nil, nil
}

// TestInflateBound: a compressed item inflates to no more than it can legitimately hold
// (issue 29, class 6) — a metadata claiming more than a zstd stream of its size regenerates
// is refused before anything inflates, bytes that do not start as a torch.save archive stop
// at the first bytes, and a chunk whose archive declares other than the metadata says stops
// when its data.pkl has arrived; the item torch wrote inflates as it is.
func TestInflateBound(t *testing.T) {
	md, e, b := zstdFixture(t)
	plain, err := md.Inflate(e, b)
	if err != nil || !bytes.HasPrefix(plain, []byte("PK\x03\x04")) {
		t.Fatalf("torch's item: %d bytes, %v", len(plain), err)
	}
	limit, chunk := md.limits(e, len(b))

	bomb := rleFrame(49152) // 192 KiB inflating to 6 GiB of zeros
	var seen int64
	for _, c := range []struct {
		name        string
		data        []byte
		limit, size int64
		says        string
	}{
		{"a metadata claiming a TiB", bomb, 1 << 40, 1<<40 - archiveOverhead, "regenerate at most"},
		{"6 GiB of zeros where the metadata says 6 GiB", bomb, 6<<30 + archiveOverhead, 6 << 30, "not a torch.save archive"},
		{"the chunk's archive where the metadata says 1000 times more", b, chunk*1000 + archiveOverhead, chunk * 1000, "the item's archive declares"},
		{"the chunk's archive under a limit it exceeds", b, 64, 64 - archiveOverhead, "more than 64 bytes"},
	} {
		seen = 0
		_, err := inflateItem(c.data, c.limit, c.size, func(p []byte) { seen += int64(len(p)) })
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want %q", c.name, err, c.says)
		}
		if seen > 1<<20 {
			t.Errorf("%s: %d bytes inflated before stopping", c.name, seen)
		}
	}
	if _, err := inflateItem(b, limit, chunk, func([]byte) {}); err != nil {
		t.Errorf("torch's item: %v", err)
	}
	// The ends a scan keeps are the item's.
	ends, err := md.InflateEnds(e, b, 100, 200)
	if err != nil || ends.Len != int64(len(plain)) || !bytes.Equal(ends.Head, plain[:100]) || !bytes.Equal(ends.Tail, plain[len(plain)-200:]) {
		t.Errorf("ends %d %v", ends.Len, err)
	}
}

// FuzzDecompress: an item inflates to at most its limit and starts as a zip archive, or
// fails; never a panic, never more memory than the limit allows.
func FuzzDecompress(f *testing.F) {
	enc, _ := zstd.NewWriter(nil)
	f.Add(enc.EncodeAll(bytes.Repeat([]byte{0}, 1<<16), nil), int64(1<<10), int64(-1))
	f.Add(enc.EncodeAll([]byte("PK\x03\x04 torch.save archive"), nil), int64(1<<20), int64(16))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd}, int64(10), int64(-1))
	f.Add(rleFrame(3), int64(1<<20), int64(-1))
	if b, err := os.ReadFile("../../testdata/ecosystem/dcp/zstd/__0_0.distcp"); err == nil {
		for i := 0; i+4 <= len(b) && i < 1<<16; i++ {
			if binary.LittleEndian.Uint32(b[i:]) == 0xFD2FB528 {
				f.Add(b[i:min(len(b), i+4096)], int64(1<<22), int64(-1))
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, limit, chunk int64) {
		limit = min(max(limit, 0), 1<<22)
		out, err := decompress(b, limit, chunk)
		if err == nil && (int64(len(out)) > limit || len(out) >= 4 && !bytes.HasPrefix(out, []byte("PK\x03\x04"))) {
			t.Fatalf("%d bytes (limit %d) starting % x", len(out), limit, out[:min(len(out), 4)])
		}
	})
}

func TestCompressedTransforms(t *testing.T) {
	if _, err := compressed([]string{"stream.zstd/2"}); err == nil {
		t.Fatal("an unknown ZStandard version was accepted")
	}
	if _, err := compressed([]string{"stream.aes/1"}); err == nil {
		t.Fatal("an unknown transform was accepted")
	}
}
