package convert_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
)

// TestFolderLeavesOtherWeightsOut converts a Hugging Face folder that also holds weights in
// another layout (as Mistral's repositories hold consolidated.safetensors, and older ones
// pytorch_model.bin): the output carries the configuration files but not those, and the
// summary says they were left out.
func TestFolderLeavesOtherWeightsOut(t *testing.T) {
	src := t.TempDir()
	fixture := "../testdata/hf/mistral_sharded"
	entries, _ := os.ReadDir(fixture)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(fixture, e.Name()))
		os.WriteFile(filepath.Join(src, e.Name()), b, 0o644)
	}
	shard, _ := os.ReadFile(filepath.Join(fixture, "model-00001-of-00004.safetensors"))
	os.WriteFile(filepath.Join(src, "consolidated.safetensors"), shard, 0o644)
	pt, _ := os.ReadFile("../testdata/torch/views.pt")
	os.WriteFile(filepath.Join(src, "pytorch_model.bin"), pt, 0o644)
	dst := filepath.Join(t.TempDir(), "out")
	sum, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: dst, Format: formats.SafetensorsFile})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadDir(dst)
	var names []string
	for _, e := range out {
		names = append(names, e.Name())
	}
	if want := []string{"ckpt-manifest.json", "config.json", "generation_config.json", "model.safetensors"}; !slices.Equal(names, want) {
		t.Errorf("output holds %v, want %v", names, want)
	}
	warned := strings.Join(sum.Messages(), "\n")
	if !strings.Contains(warned, "consolidated.safetensors, pytorch_model.bin") {
		t.Errorf("warnings %q do not name the files left out", warned)
	}
}
