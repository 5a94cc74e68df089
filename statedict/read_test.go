package statedict_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// TestReadTensors reads file-backed, in-memory and strided tensors on several workers and
// checks every sink got exactly what Tensor.WriteTo writes, and that cancelling stops it.
func TestReadTensors(t *testing.T) {
	data := make([]byte, 3<<20+77)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	path := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fileBacked := func(off, n int64) *statedict.Tensor {
		st := statedict.NewMappedStorage("f", "cpu", statedict.Uint8, data[off:off+n])
		st.File, st.Offset, st.FileBacked = path, off, true
		return &statedict.Tensor{DType: statedict.Uint8, Shape: []int64{n}, Strides: []int64{1}, Storage: st}
	}
	mem := statedict.NewMappedStorage("m", "cpu", statedict.Float32, data[:1<<20])
	strided := &statedict.Tensor{DType: statedict.Float32, Shape: []int64{256, 128}, Strides: []int64{1, 512}, Storage: mem}
	var tensors []statedict.NamedTensor
	for i, tt := range []*statedict.Tensor{fileBacked(0, int64(len(data))), fileBacked(5, 1000), strided,
		{DType: statedict.Float32, Shape: []int64{1000}, Strides: []int64{1}, Storage: mem}, fileBacked(1<<20+3, 2<<20)} {
		tensors = append(tensors, statedict.NamedTensor{Name: string(rune('a' + i)), Tensor: tt})
	}
	for _, piece := range []int{0, 4096, 1000} {
		got := make([]*bytes.Buffer, len(tensors))
		released := 0
		err := statedict.ReadTensors(context.Background(), tensors, func(i int) io.Writer {
			got[i] = &bytes.Buffer{}
			return got[i]
		}, statedict.ReadOptions{Workers: 3, Piece: piece, ReleaseEvery: 1 << 16, Release: func() { released++ }})
		if err != nil {
			t.Fatal(err)
		}
		for i, nt := range tensors {
			want, _ := nt.Tensor.Bytes()
			if sha256.Sum256(got[i].Bytes()) != sha256.Sum256(want) {
				t.Errorf("piece %d: tensor %s: %d bytes differ from WriteTo's %d", piece, nt.Name, got[i].Len(), len(want))
			}
		}
		if released == 0 {
			t.Errorf("piece %d: bytes read through the mapping were never released", piece)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := statedict.ReadTensors(ctx, tensors, func(int) io.Writer { return io.Discard }, statedict.ReadOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled read: %v", err)
	}
}
