package inspect

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/statedict"
)

// FuzzInspect runs whole checkpoints through formats.Open and Build with hashes and the
// training-state analysis, as `ckpt inspect --hash --optimizer` does: never a panic, a hang
// or an unbounded allocation, whatever the file. Views may materialise at most 1 MiB beyond
// their storage here, to keep each run short.
func FuzzInspect(f *testing.F) {
	statedict.MaxViewExpansion = 1 << 20
	var paths []string
	for _, g := range []string{"../testdata/torch/*.pt", "../testdata/hostile/*.pt", "../testdata/hostile/*.pkl", "../testdata/safetensors/*.safetensors", "../testdata/modules/*.pt"} {
		m, _ := filepath.Glob(g)
		paths = append(paths, m...)
	}
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil && len(b) <= 64<<10 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "ckpt.pt")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		ck, err := formats.Open(context.Background(), p)
		if err != nil {
			return
		}
		defer ck.Close()
		rep, err := Build(context.Background(), ck, Options{Hash: true, Training: true})
		if err != nil {
			return
		}
		for _, tt := range rep.Tensors {
			if tt.NBytes < 0 || tt.SHA256 == "" {
				t.Fatalf("tensor %+v", tt)
			}
		}
	})
}
