package verify_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/verify"
)

// convertTo converts src to dst as `ckpt convert --to tpu ARGS SRC DST` does (the command
// line recorded in the manifest as the CLI records it), with opts adjusting the options.
func convertTo(t *testing.T, src, dst string, format convert.Format, args []string, opts func(*convert.Options)) {
	t.Helper()
	o := convert.DefaultOptions(src, dst)
	o.Format = format
	o.Args = append(append([]string{"ckpt", "convert", "--to", "tpu", "--format", string(format)}, args...), src, dst)
	if opts != nil {
		opts(&o)
	}
	if _, err := convert.Run(t.Context(), o); err != nil {
		t.Fatal(err)
	}
}

func mustRename(t *testing.T, s string) remap.Rename {
	r, err := remap.ParseRename(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestParityOfConversions converts fixtures in every output format, with casts, renames
// and dequantization, and checks that Parity pairs every tensor and finds them all equal.
func TestParityOfConversions(t *testing.T) {
	bf16 := func(o *convert.Options) { o.Remap.DType = statedict.BFloat16 }
	for _, tc := range []struct {
		name, src string
		format    convert.Format
		dst       string
		args      []string
		opts      func(*convert.Options)
		cast, deq int
	}{
		{"torch", "../testdata/torch/training_cuda.pt", convert.Torch, "out.pt", nil, nil, 0, 0},
		{"dcp", "../testdata/torch/training_cuda.pt", convert.DCP, "out", nil, nil, 0, 0},
		{"safetensors views", "../testdata/torch/views.pt", convert.Safetensors, "out.safetensors", nil, nil, 0, 0},
		{"hf bf16", "../testdata/hf/mistral_sharded", convert.Safetensors, "out", []string{"--dtype", "bfloat16"}, bf16, -1, 0},
		{"torch bf16 training", "../testdata/torch/training_cuda.pt", convert.Torch, "out.pt", []string{"--dtype", "bfloat16"}, bf16, -1, 0},
		{"rename", "../testdata/hf/mistral_sharded", convert.Safetensors, "out.safetensors", []string{"--rename", `^model\.=backbone.`},
			func(o *convert.Options) { o.Remap.Renames = []remap.Rename{mustRename(t, `^model\.=backbone.`)} }, 0, 0},
		{"fp8 dequantized", "../testdata/quantized/fp8_block", convert.Safetensors, "out", []string{"--dequantize"},
			func(o *convert.Options) { o.Dequantize = convert.DequantizeAll }, 0, -1},
		{"fp8 kept, cast", "../testdata/quantized/fp8_block", convert.Torch, "out.pt", []string{"--dtype", "float32"},
			func(o *convert.Options) { o.Remap.DType = statedict.Float32 }, -1, 0},
		{"mxfp4 auto", "../testdata/quantized/mxfp4", convert.Safetensors, "out", []string{"--dequantize=auto", "--tpu-gen", "v6e"},
			func(o *convert.Options) {
				o.Dequantize = convert.DequantizeAuto
				o.Target = &runtime.Target{Device: "tpu", Generation: mustGen(t, "v6e")}
			}, 0, -1},
		{"sharded dcp source", "../testdata/dcp/sharded", convert.Torch, "out.pt", nil, nil, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), tc.dst)
			convertTo(t, tc.src, dst, tc.format, tc.args, tc.opts)
			rep, err := verify.Parity(t.Context(), tc.src, dst, verify.ParityOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() || rep.Pairs == 0 || rep.Equal != rep.Pairs || rep.Manifest == "" {
				t.Fatalf("report %+v", rep)
			}
			if tc.cast < 0 && rep.Cast == 0 || tc.cast == 0 && rep.Cast != 0 || tc.deq < 0 && rep.Dequantized == 0 || tc.deq == 0 && rep.Dequantized != 0 {
				t.Errorf("%d cast, %d dequantized: %+v", rep.Cast, rep.Dequantized, rep)
			}
			// The same pair without the manifest: casts and dequantization are inferred from
			// the destination (renames are not: their tensors do not pair).
			rep, err = verify.Parity(t.Context(), tc.src, dst, verify.ParityOptions{Manifest: "-"})
			if err != nil {
				t.Fatal(err)
			}
			if ok := rep.OK(); ok == (tc.name == "rename") {
				t.Fatalf("without the manifest: OK %v: %+v", ok, rep)
			}
			// And the other way round: the converted checkpoint as the source.
			if tc.name != "rename" && tc.deq == 0 && tc.cast == 0 {
				rep, err = verify.Parity(t.Context(), dst, tc.src, verify.ParityOptions{Manifest: "-"})
				if err != nil {
					t.Fatal(err)
				}
				// The CUDA RNG state convert dropped is the one thing the source has more.
				for _, p := range rep.Problems {
					if p.Kind != "extra" || !strings.HasPrefix(p.Tensor, "rng.cuda") {
						t.Fatalf("reversed: %+v", rep)
					}
				}
			}
		})
	}
}

func mustGen(t *testing.T, name string) *runtime.Generation {
	g, err := runtime.LookupGeneration(name)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestParityFindsOneChangedElement changes one element of one converted tensor and checks
// that Parity names the tensor, the element and both values.
func TestParityFindsOneChangedElement(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		format    convert.Format
		dst       string
		args      []string
		opts      func(*convert.Options)
	}{
		{"safetensors", "../testdata/torch/shufflenet_cuda.pt", convert.Safetensors, "out.safetensors", nil, nil},
		{"torch bf16", "../testdata/torch/training_cuda.pt", convert.Torch, "out.pt", []string{"--dtype", "bfloat16"},
			func(o *convert.Options) { o.Remap.DType = statedict.BFloat16 }},
		{"fp8 dequantized", "../testdata/quantized/fp8_block", convert.Safetensors, "out.safetensors", []string{"--dequantize"},
			func(o *convert.Options) { o.Dequantize = convert.DequantizeAll }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), tc.dst)
			convertTo(t, tc.src, dst, tc.format, tc.args, tc.opts)
			victim := largestTensor(t, dst)
			flipTensorByte(t, dst, victim)
			rep, err := verify.Parity(t.Context(), tc.src, dst, verify.ParityOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() || len(rep.Problems) != 1 {
				t.Fatalf("problems %+v, want one", rep.Problems)
			}
			p := rep.Problems[0]
			if p.Tensor != victim || p.Kind != "value" || p.Differ != 1 || p.Want == p.Got || len(p.Index) == 0 {
				t.Fatalf("problem %+v, want one element of %s", p, victim)
			}
			if err := rep.Err(); !errors.Is(err, verify.ErrFailed) || !strings.Contains(err.Error(), victim) {
				t.Fatalf("error %v", err)
			}
			t.Log(p)
		})
	}
}

// largestTensor names the largest floating-point tensor of a checkpoint (its bytes are
// unique in the file).
func largestTensor(t *testing.T, path string) string {
	data, meta := tensorsOf(t, path)
	best := ""
	for n, b := range data {
		if meta[n].DType.Kind() != statedict.KindFloat {
			continue
		}
		if best == "" || len(b) > len(data[best]) || len(b) == len(data[best]) && n < best {
			best = n
		}
	}
	return best
}
