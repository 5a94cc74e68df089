package verify_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/verify"
)

// convertTo converts src to dst as `ckpt convert --to tpu ARGS SRC DST` does (the command
// line recorded in the manifest as the CLI records it), with opts adjusting the options.
func convertTo(t testing.TB, src, dst string, format formats.Layout, args []string, opts func(*convert.Options)) {
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

func mustRename(t testing.TB, s string) remap.Rename {
	r, err := remap.ParseRename(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestParityOfConversions converts fixtures in every output format, with casts, renames
// and dequantization, and checks that Parity pairs every tensor and finds them all equal.
func TestParityOfConversions(t *testing.T) {
	bf16 := func(o *convert.Options) { o.Plan.DType = statedict.BFloat16 }
	for _, tc := range []struct {
		name, src string
		format    formats.Layout
		dst       string
		args      []string
		opts      func(*convert.Options)
		cast, deq int
	}{
		{"torch", "../testdata/torch/training_cuda.pt", formats.TorchFile, "out.pt", nil, nil, 0, 0},
		{"dcp", "../testdata/torch/training_cuda.pt", formats.DCPFolder, "out", nil, nil, 0, 0},
		{"safetensors views", "../testdata/torch/views.pt", formats.SafetensorsFile, "out.safetensors", nil, nil, 0, 0},
		{"hf bf16", "../testdata/hf/mistral_sharded", formats.SafetensorsFile, "out", []string{"--dtype", "bfloat16"}, bf16, -1, 0},
		{"torch bf16 training", "../testdata/torch/training_cuda.pt", formats.TorchFile, "out.pt", []string{"--dtype", "bfloat16"}, bf16, -1, 0},
		{"rename", "../testdata/hf/mistral_sharded", formats.SafetensorsFile, "out.safetensors", []string{"--rename", `^model\.=backbone.`},
			func(o *convert.Options) { o.Plan.Renames = []remap.Rename{mustRename(t, `^model\.=backbone.`)} }, 0, 0},
		{"fp8 dequantized", "../testdata/quantized/fp8_block", formats.SafetensorsFile, "out", []string{"--dequantize"},
			func(o *convert.Options) { o.Plan.Dequantize = quant.DequantizeAll }, 0, -1},
		{"fp8 kept, cast", "../testdata/quantized/fp8_block", formats.TorchFile, "out.pt", []string{"--dtype", "float32"},
			func(o *convert.Options) { o.Plan.DType = statedict.Float32 }, -1, 0},
		{"mxfp4 auto", "../testdata/quantized/mxfp4", formats.SafetensorsFile, "out", []string{"--dequantize=auto", "--tpu-gen", "v6e"},
			func(o *convert.Options) {
				o.Plan.Dequantize = quant.DequantizeAuto
				o.Target = &runtime.Target{Device: "tpu", Generation: mustGen(t, "v6e")}
			}, 0, -1},
		{"sharded dcp source", "../testdata/dcp/sharded", formats.TorchFile, "out.pt", nil, nil, 0, 0},
		{"numpy and namespace", "../testdata/torch/numpy_args.pt", formats.DCPFolder, "out", nil, nil, 0, 0},
		{"optimizer and schedulers", "../testdata/optim/llama_cuda.pt", formats.DCPFolder, "out", []string{"--optimizer-dtype", "bfloat16"},
			func(o *convert.Options) { o.Plan.OptimizerDType = statedict.BFloat16 }, -1, 0},
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
			if tc.name != "rename" && tc.name != "numpy and namespace" && tc.deq == 0 && tc.cast == 0 {
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
		format    formats.Layout
		dst       string
		args      []string
		opts      func(*convert.Options)
	}{
		{"safetensors", "../testdata/torch/shufflenet_cuda.pt", formats.SafetensorsFile, "out.safetensors", nil, nil},
		{"torch bf16", "../testdata/torch/training_cuda.pt", formats.TorchFile, "out.pt", []string{"--dtype", "bfloat16"},
			func(o *convert.Options) { o.Plan.DType = statedict.BFloat16 }},
		{"fp8 dequantized", "../testdata/quantized/fp8_block", formats.SafetensorsFile, "out.safetensors", []string{"--dequantize"},
			func(o *convert.Options) { o.Plan.Dequantize = quant.DequantizeAll }},
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

// TestParityAgainstRecordedOptions edits the conversion a manifest records and checks that
// Parity holds the output to it: a cast the output lacks is a dtype problem, a rename it
// lacks leaves every renamed tensor missing and the old names extra. The command line is
// for people: editing it changes nothing.
func TestParityAgainstRecordedOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(m *manifest.Manifest)
		kind string
		n    int
	}{
		{"cast not done", func(m *manifest.Manifest) { m.Conversion.DType = "bfloat16" }, "dtype", 6},
		{"rename not done", func(m *manifest.Manifest) {
			m.Conversion.Renames = []manifest.Rename{{Pattern: `^model\.`, Replacement: "m."}}
		}, "missing", 6},
		{"the command line is not read", func(m *manifest.Manifest) {
			m.Args = append(m.Args[:len(m.Args)-2:len(m.Args)-2], "--dtype", "bfloat16", "--rename", `^model\.=m.`, "a", "b")
		}, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "../testdata/hf/mistral_sharded"
			dst := filepath.Join(t.TempDir(), "out.safetensors")
			convertTo(t, src, dst, formats.SafetensorsFile, nil, nil)
			m := readManifest(t, dst)
			tc.edit(m)
			writeManifest(t, dst, m)
			rep, err := verify.Parity(t.Context(), src, dst, verify.ParityOptions{})
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			for _, p := range rep.Problems {
				kinds[p.Kind]++
			}
			if tc.kind == "" && !rep.OK() || tc.kind != "" && kinds[tc.kind] < tc.n {
				t.Fatalf("problems %v: %+v", kinds, rep.Problems)
			}
		})
	}
}

// TestParityShardedDestination compares a converted checkpoint with a DCP directory four
// ranks wrote (FSDP2 and DTensor shards, reassembled by formats/dcp), then changes one
// element in one rank's file and checks the tensor is named.
func TestParityShardedDestination(t *testing.T) {
	src := filepath.Join(t.TempDir(), "whole.pt")
	convertTo(t, "../testdata/dcp/sharded", src, formats.TorchFile, nil, nil)
	sharded := filepath.Join(t.TempDir(), "sharded")
	if err := os.CopyFS(sharded, os.DirFS("../testdata/dcp/sharded")); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Parity(t.Context(), src, sharded, verify.ParityOptions{Manifest: "-"})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Pairs == 0 {
		t.Fatalf("%+v", rep)
	}
	// model.l1.weight [16, 8] float32: rank 2 holds rows 8–11.
	_, meta := tensorsOf(t, src)
	w := meta["model.l1.weight"]
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	row := buf.Bytes()[9*8*4 : 10*8*4] // row 9: rank 2's second row
	path := filepath.Join(sharded, "__2_0.distcp")
	b, _ := os.ReadFile(path)
	at := bytes.Index(b, row)
	if at < 0 {
		t.Fatal("row 9 of model.l1.weight not found in rank 2's file")
	}
	b[at+3*4+3] ^= 0x40 // element [9, 3]: its exponent
	os.WriteFile(path, b, 0o644)
	rep, err = verify.Parity(t.Context(), src, sharded, verify.ParityOptions{Manifest: "-"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || rep.Problems[0].Tensor != "model.l1.weight" || fmt.Sprint(rep.Problems[0].Index) != "[9 3]" {
		t.Fatalf("problems %+v", rep.Problems)
	}
}

// TestParityTrainerFolder converts a Hugging Face Trainer checkpoint folder, whose
// training-state files are converted alongside the weights, and checks each of them too.
func TestParityTrainerFolder(t *testing.T) {
	src := filepath.Join(t.TempDir(), "checkpoint-500")
	if err := os.CopyFS(src, os.DirFS("../testdata/hf/mistral_sharded")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile("../testdata/torch/training_cuda.pt")
	os.WriteFile(filepath.Join(src, "optimizer.pt"), b, 0o644)
	dst := filepath.Join(t.TempDir(), "out")
	convertTo(t, src, dst, formats.SafetensorsFile, []string{"--dtype", "bfloat16"}, func(o *convert.Options) { o.Plan.DType = statedict.BFloat16 })
	rep, err := verify.Parity(t.Context(), src, dst, verify.ParityOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.Alongside) != 1 || rep.Alongside[0].Pairs == 0 || rep.Cast == 0 {
		t.Fatalf("%+v", rep)
	}
	flipTensorByte(t, filepath.Join(dst, "optimizer.pt"), "optimizer.state.0.exp_avg")
	rep, err = verify.Parity(t.Context(), src, dst, verify.ParityOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || !strings.Contains(rep.Err().Error(), "optimizer.state.0.exp_avg") {
		t.Fatalf("%+v", rep.Alongside[0])
	}
}

func readManifest(t *testing.T, dst string) *manifest.Manifest {
	t.Helper()
	p, err := manifest.Find(context.Background(), dst)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Read(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func writeManifest(t *testing.T, dst string, m *manifest.Manifest) {
	t.Helper()
	p, _ := manifest.Find(context.Background(), dst)
	var buf bytes.Buffer
	if err := manifest.Write(&buf, m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestParityZeROOptimizer: a DeepSpeed ZeRO folder converted with --zero-optimizer (the
// model and the optimizer state consolidated by parameter name) passes parity: verify opens
// the source as the recorded conversion did, not as weights alone.
func TestParityZeROOptimizer(t *testing.T) {
	src := "../testdata/ecosystem/zero/zero2"
	dst := filepath.Join(t.TempDir(), "out.pt")
	o := convert.Options{Src: src, Dst: dst, Format: formats.TorchFile, Plan: plan.Options{ZeROOptimizer: true},
		Args: []string{"ckpt", "convert", "--to", "tpu", "--format", "torch", "--zero-optimizer", src, dst}}
	if _, err := convert.Run(t.Context(), o); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Parity(t.Context(), src, dst, verify.ParityOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Pairs == 0 {
		t.Fatalf("%d pairs, problems: %+v", rep.Pairs, rep.Problems)
	}
}
