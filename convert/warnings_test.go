package convert_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
)

// TestWarningsOncePerKind: a training checkpoint converted to safetensors loses its
// non-tensor training state; that is said once, with the count and where the values were,
// every value listed in Items — and Strict makes it an error that writes nothing (issue 15,
// item 3).
func TestWarningsOncePerKind(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "out.safetensors")
	opts := convert.DefaultOptions("../testdata/torch/training_cuda.pt", dst)
	sum, err := convert.Run(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, w := range sum.Warnings {
		kinds[w.Kind]++
		if w.Kind == "values_not_written" {
			if len(w.Items) != 51 || !w.Dropped || !strings.Contains(w.Message, "51 values not written") || !strings.Contains(w.Message, "optimizer (32), scheduler (10)") {
				t.Errorf("values_not_written: %d items, message %q", len(w.Items), w.Message)
			}
		}
	}
	if kinds["values_not_written"] != 1 || kinds["cuda_rng_dropped"] != 1 || len(sum.Warnings) != 2 {
		t.Errorf("warnings by kind %v (%d in all), want one of each", kinds, len(sum.Warnings))
	}
	strictDst := filepath.Join(t.TempDir(), "strict.safetensors")
	opts = convert.DefaultOptions("../testdata/torch/training_cuda.pt", strictDst)
	opts.Strict = true
	if _, err := convert.Run(t.Context(), opts); !errors.Is(err, convert.ErrDataDropped) {
		t.Fatalf("strict: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Dir(strictDst)); len(left) != 0 {
		t.Errorf("a strict conversion that failed left %d files", len(left))
	}
	// A torch output keeps everything but the CUDA RNG state, kept too when asked.
	opts = convert.DefaultOptions("../testdata/torch/training_cuda.pt", filepath.Join(t.TempDir(), "out.pt"))
	opts.Strict, opts.Plan.KeepCUDARNG = true, true
	if _, err := convert.Run(t.Context(), opts); err != nil {
		t.Errorf("strict torch output: %v", err)
	}
}
