//go:build unix

package convert_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/verify"
)

// TestManyShardsFewDescriptors converts a Hugging Face folder of more shards than the
// process may open files (RLIMIT_NOFILE lowered for the test) to every format and back, and
// checks each output against its manifest: no step may hold one descriptor per shard.
func TestManyShardsFewDescriptors(t *testing.T) {
	dir := t.TempDir()
	shards := filepath.Join(dir, "shards")
	sum, err := convert.Run(t.Context(), convert.Options{Src: "../testdata/torch/shufflenet_cuda.pt", Dst: shards, Format: formats.SafetensorsFile, MaxShardSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd to count open descriptors")
	}
	if len(sum.Files) < len(open)+100 {
		t.Fatalf("only %d shards: too few to matter", len(sum.Files))
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = uint64(len(open) + 48) // far fewer than the shards
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	steps := []struct {
		src, dst string
		format   formats.Layout
	}{
		{shards, "one.pt", formats.TorchFile},
		{shards, "dcp", formats.DCPFolder},
		{filepath.Join(dir, "dcp"), "back", formats.SafetensorsFile},
		{shards, "one.safetensors", formats.SafetensorsFile},
	}
	for _, s := range steps {
		dst := filepath.Join(dir, s.dst)
		if _, err := convert.Run(t.Context(), convert.Options{Src: s.src, Dst: dst, Format: s.format}); err != nil {
			t.Fatalf("%s → %s: %v", filepath.Base(s.src), s.dst, err)
		}
		rep, err := verify.Check(context.Background(), dst, "")
		if err != nil || !rep.OK() || rep.Checked != 338 {
			t.Fatalf("%s: check %+v, %v", s.dst, rep, err)
		}
	}
}
