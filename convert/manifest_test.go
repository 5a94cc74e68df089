package convert_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/statedict"
)

// TestManifestHashesOutput checks the manifest against the output itself: every tensor it
// lists is in the output under that name, with that dtype, shape and byte count, and its
// xxhash64 is the hash of the tensor's bytes as read back from the output. The hashes are
// fed while writing (file ranges, casts, dequantization, views gathered for DCP), so this
// covers each path by which bytes reach an output.
func TestManifestHashesOutput(t *testing.T) {
	type variant struct {
		name, dst string
		format    formats.Layout
		dtype     statedict.DType
	}
	variants := []variant{
		{name: "torch", format: formats.TorchFile, dst: "out.pt"},
		{name: "torch-bf16", format: formats.TorchFile, dst: "out.pt", dtype: statedict.BFloat16},
		{name: "safetensors", format: formats.SafetensorsFile, dst: "out.safetensors"},
		{name: "folder-f16", format: formats.SafetensorsFile, dst: "out", dtype: statedict.Float16},
		{name: "dcp", format: formats.DCPFolder, dst: "out"},
		{name: "dcp-bf16", format: formats.DCPFolder, dst: "out", dtype: statedict.BFloat16},
	}
	srcs := []string{"../testdata/torch/views.pt", "../testdata/torch/training_cuda.pt", "../testdata/torch/shufflenet_cuda.pt"}
	for _, src := range srcs {
		for _, v := range variants {
			if v.format == formats.SafetensorsFile && filepath.Base(src) == "training_cuda.pt" {
				continue // a training checkpoint's optimizer state has no safetensors form
			}
			t.Run(filepath.Base(src)+"/"+v.name, func(t *testing.T) {
				checkManifest(t, convert.Options{Src: src, Format: v.format, Plan: plan.Options{DType: v.dtype}}, v.dst)
			})
		}
	}
	for _, name := range []string{"fp8_block", "mxfp4", "nvfp4_ct"} {
		t.Run(name+"/dequantize", func(t *testing.T) {
			checkManifest(t, convert.Options{Src: filepath.Join(quantizedDir, name), Format: formats.SafetensorsFile,
				Plan: plan.Options{Dequantize: quant.DequantizeAll}}, "out")
		})
	}
}

// checkManifest converts with opts into dst (a name in a new temporary folder) and compares
// the manifest with the output read back.
func checkManifest(t *testing.T, opts convert.Options, dst string) {
	t.Helper()
	opts.Dst = filepath.Join(t.TempDir(), dst)
	sum, err := convert.Run(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sum.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	var m manifest.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Tensors) == 0 {
		t.Fatal("manifest lists no tensors")
	}
	got, meta := tensorsOf(t, opts.Dst)
	for _, mt := range m.Tensors {
		data, ok := got[mt.Name]
		if !ok {
			t.Errorf("%s: in the manifest, not in the output", mt.Name)
			continue
		}
		if want := fmt.Sprintf("%016x", xxhash.Sum64(data)); mt.XXHash64 != want {
			t.Errorf("%s: manifest xxhash64 %s, output bytes hash to %s", mt.Name, mt.XXHash64, want)
		}
		if mt.NBytes != int64(len(data)) || fmt.Sprint(mt.Shape) != fmt.Sprint(meta[mt.Name].Shape) {
			t.Errorf("%s: manifest says %d bytes, shape %v; output has %d bytes, shape %v",
				mt.Name, mt.NBytes, mt.Shape, len(data), meta[mt.Name].Shape)
		}
	}
}
