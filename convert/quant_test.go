package convert_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

const quantizedDir = "../testdata/quantized"

// expectedQuant is testdata/quantized/expected.json: per fixture, the groups and the
// SHA-256 of each group as the reference code dequantizes it, by dtype.
type expectedQuant map[string]struct {
	Groups []struct {
		Name    string   `json:"name"`
		Shape   []int64  `json:"shape"`
		Members []string `json:"members"`
	} `json:"groups"`
	Aux    []string                     `json:"aux"`
	SHA256 map[string]map[string]string `json:"sha256"`
}

func loadExpected(t *testing.T) expectedQuant {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(quantizedDir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e expectedQuant
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// tensorsOf opens a checkpoint and returns its tensors' contiguous bytes and dtypes by name.
func tensorsOf(t *testing.T, path string) (map[string][]byte, map[string]*statedict.Tensor) {
	t.Helper()
	ck, err := formats.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	ts, err := ck.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	data, meta := map[string][]byte{}, map[string]*statedict.Tensor{}
	for _, nt := range ts {
		var buf bytes.Buffer
		if _, err := nt.Tensor.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		data[nt.Name], meta[nt.Name] = buf.Bytes(), nt.Tensor
	}
	return data, meta
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestConvertDequantizes unpacks every fixture with --dequantize (default dtype and each
// --dtype) into a Hugging Face folder: each group becomes one tensor under transformers'
// post-load name, bit-identical to the reference dequantization; scales and runtime-only
// scales are gone, other tensors unchanged, and the quantization config removed.
func TestConvertDequantizes(t *testing.T) {
	expected := loadExpected(t)
	for name, want := range expected {
		for _, dtype := range []string{"keep", "bfloat16", "float16", "float32"} {
			t.Run(name+"/"+dtype, func(t *testing.T) {
				src := filepath.Join(quantizedDir, name)
				dst := filepath.Join(t.TempDir(), "out")
				opts := convert.Options{Src: src, Dst: dst + "/", Format: formats.SafetensorsFile, Target: tpuTarget(t),
					Plan: plan.Options{Dequantize: quant.DequantizeAll}}
				outDType := "bfloat16"
				if dtype != "keep" {
					opts.Plan.DType, _ = statedict.ParseDType(dtype)
					outDType = dtype
				}
				sum, err := convert.Run(t.Context(), opts)
				if err != nil {
					t.Fatal(err)
				}
				if q := sum.Quantization; q == nil || len(q.Dequantized) != len(want.Groups) || q.DType != outDType {
					t.Fatalf("quantization report %+v", sum.Quantization)
				}
				got, meta := tensorsOf(t, dst)
				srcData, srcMeta := tensorsOf(t, src)
				stored := map[string]bool{} // group members and runtime-only scales
				for _, a := range want.Aux {
					stored[a] = true
				}
				logical := map[string]bool{}
				for _, g := range want.Groups {
					for _, m := range g.Members {
						stored[m] = true
					}
					logical[g.Name] = true
					tm := meta[g.Name]
					if tm == nil {
						t.Errorf("%s missing", g.Name)
						continue
					}
					if tm.DType.String() != outDType || !slices.Equal(tm.Shape, g.Shape) {
						t.Errorf("%s: %s %v, want %s %v", g.Name, tm.DType, tm.Shape, outDType, g.Shape)
					}
					if sha(got[g.Name]) != want.SHA256[g.Name][outDType] {
						t.Errorf("%s: bytes differ from the reference dequantization to %s", g.Name, outDType)
					}
				}
				for n := range stored {
					if _, ok := got[n]; ok && !logical[n] {
						t.Errorf("%s was not dropped", n)
					}
				}
				for n, b := range srcData {
					switch {
					case stored[n]:
					case meta[n] == nil:
						t.Errorf("%s lost", n)
					case dtype == "keep" && (!bytes.Equal(got[n], b) || meta[n].DType != srcMeta[n].DType):
						t.Errorf("%s changed", n)
					}
				}
				cfg, err := os.ReadFile(filepath.Join(dst, "config.json"))
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(cfg), "quantization_config") {
					t.Errorf("config.json keeps the quantization config:\n%s", cfg)
				}
				if _, err := os.Stat(filepath.Join(dst, quant.HFQuantConfFile)); err == nil {
					t.Error("hf_quant_config.json was copied")
				}
			})
		}
	}
}

// tpuTarget is `--to tpu`'s target: every storage tagged "tpu".
func tpuTarget(t *testing.T) *runtime.Target {
	t.Helper()
	tg, err := runtime.NewTarget(runtime.Spec{Device: runtime.TPU})
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// TestConvertKeepsQuantized checks the pass-through: without --dequantize codes, scales,
// runtime-only scales and config files arrive byte for byte even under --dtype, which
// casts the other floating-point tensors only.
func TestConvertKeepsQuantized(t *testing.T) {
	expected := loadExpected(t)
	for _, name := range []string{"fp8_ct", "fp8_modelopt", "nvfp4_modelopt", "mxfp4"} {
		t.Run(name, func(t *testing.T) {
			src := filepath.Join(quantizedDir, name)
			dst := filepath.Join(t.TempDir(), "out")
			sum, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: dst, Format: formats.SafetensorsFile, Target: tpuTarget(t),
				Plan: plan.Options{DType: statedict.Float32}})
			if err != nil {
				t.Fatal(err)
			}
			if q := sum.Quantization; q == nil || len(q.Kept) != len(expected[name].Groups) || len(q.Dequantized) > 0 {
				t.Fatalf("quantization report %+v", sum.Quantization)
			}
			quantized := map[string]bool{}
			for _, g := range expected[name].Groups {
				for _, m := range g.Members {
					quantized[m] = true
				}
			}
			for _, a := range expected[name].Aux {
				quantized[a] = true
			}
			got, meta := tensorsOf(t, dst)
			srcData, srcMeta := tensorsOf(t, src)
			for n, b := range srcData {
				switch {
				case quantized[n] && (!bytes.Equal(got[n], b) || meta[n].DType != srcMeta[n].DType):
					t.Errorf("%s: quantized member changed (%s → %s)", n, srcMeta[n].DType, meta[n].DType)
				case !quantized[n] && srcMeta[n].DType.IsFloatingPoint() && meta[n].DType != statedict.Float32:
					t.Errorf("%s: %s not cast to float32", n, meta[n].DType)
				}
			}
			for _, f := range []string{quant.ConfigFile, quant.HFQuantConfFile} {
				want, err := os.ReadFile(filepath.Join(src, f))
				if err != nil {
					continue
				}
				if got, err := os.ReadFile(filepath.Join(dst, f)); err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s not copied unchanged: %v", f, err)
				}
			}
		})
	}
}

// TestConvertDequantizeAuto checks --dequantize=auto: FP8 e4m3fn stays on v7x only, FP4
// never stays, and a checkpoint it would split is refused.
func TestConvertDequantizeAuto(t *testing.T) {
	tests := []struct {
		fixture string
		gen     string
		unpack  bool
		err     string
	}{
		{"fp8_modelopt", "tpu7x", false, ""},
		{"fp8_modelopt", "v6e", true, ""},
		{"fp8_ct", "v5e", true, ""},
		{"mxfp4", "tpu7x", true, ""},
		{"nvfp4_ct", "v5p", true, ""},
		{"modelopt_mixed", "tpu7x", false, "cannot describe"},
		{"fp8_block", "v6e", false, "cannot describe"}, // e5m2 is native there, e4m3fn not
		{"fp8_block", "tpu7x", false, ""},              // both are native on TPU7x
		{"modelopt_mixed", "", false, "needs its TPU generation"},
	}
	for _, tc := range tests {
		t.Run(tc.fixture+"/"+tc.gen, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out")
			target := &runtime.Target{Device: "tpu"}
			if tc.gen != "" {
				g, err := runtime.LookupGeneration(tc.gen)
				if err != nil {
					t.Fatal(err)
				}
				target.Generation = g
			}
			sum, err := convert.Run(t.Context(), convert.Options{Src: filepath.Join(quantizedDir, tc.fixture), Dst: dst, Format: formats.SafetensorsFile,
				Plan: plan.Options{Dequantize: quant.DequantizeAuto}, Target: target})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if q := sum.Quantization; (len(q.Dequantized) > 0) != tc.unpack || (len(q.Kept) > 0) == tc.unpack {
				t.Fatalf("report %+v", q)
			}
			cfg, _ := os.ReadFile(filepath.Join(dst, "config.json"))
			if strings.Contains(string(cfg), "quantization_config") == tc.unpack {
				t.Errorf("config.json quantization_config present: %v, unpacked: %v", !tc.unpack, tc.unpack)
			}
		})
	}
}

// writeFolder writes a Hugging Face folder holding tensors and, unless empty, config.json.
func writeFolder(t *testing.T, config string, tensors []statedict.NamedTensor) string {
	t.Helper()
	dir := t.TempDir()
	var infos []safetensors.TensorInfo
	for _, nt := range tensors {
		info, err := safetensors.TensorInfoFor(nt.Name, nt.Tensor)
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	var buf bytes.Buffer
	w, err := safetensors.NewWriter(&buf, infos, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, nt := range tensors {
		if err := w.WriteTensor(nt.Name, nt.Tensor); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func tensor(dt statedict.DType, shape ...int64) *statedict.Tensor {
	n := int64(dt.Size())
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	return &statedict.Tensor{DType: dt, Shape: shape, Strides: statedict.ContiguousStrides(shape),
		Storage: statedict.NewMappedStorage("t", "cpu", dt, data)}
}

// TestConvertRefusesRawCodes checks that quantized-looking tensors without a config, or a
// config the tensors contradict, are never unpacked or cast as if they were weights: an
// error when dequantizing or casting, a warning and untouched bytes otherwise.
func TestConvertRefusesRawCodes(t *testing.T) {
	codes := []statedict.NamedTensor{
		{Name: "l.weight", Tensor: tensor(statedict.Float8E4M3FN, 8, 8)},
		{Name: "l.weight_scale_inv", Tensor: tensor(statedict.Float32, 1, 1)},
	}
	noConfig := writeFolder(t, "", codes)
	wrongConfig := writeFolder(t, `{"quantization_config": {"quant_method": "fp8"}}`,
		[]statedict.NamedTensor{{Name: "l.weight", Tensor: tensor(statedict.BFloat16, 8, 8)}})
	absent := writeFolder(t, `{"quantization_config": {"quant_method": "fp8", "weight_block_size": [8, 8]}}`,
		append(slices.Clone(codes), statedict.NamedTensor{Name: "m.weight_scale_inv", Tensor: tensor(statedict.Float32, 1, 1)}))
	tests := []struct {
		name, src  string
		dequantize quant.Mode
		dtype      statedict.DType
		err        string
	}{
		{"no config, dequantize", noConfig, quant.DequantizeAll, statedict.Invalid, "no quantization config"},
		{"no config, cast", noConfig, quant.DequantizeNone, statedict.BFloat16, "no quantization config"},
		{"no config, pass through", noConfig, quant.DequantizeNone, statedict.Invalid, ""},
		{"config without quantized tensors", wrongConfig, quant.DequantizeAll, statedict.Invalid, "no quantized tensors"},
		{"config naming an absent weight", absent, quant.DequantizeAll, statedict.Invalid, "needs m.weight"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out")
			sum, err := convert.Run(t.Context(), convert.Options{Src: tc.src, Dst: dst, Format: formats.SafetensorsFile,
				Plan: plan.Options{DType: tc.dtype, Dequantize: tc.dequantize}})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				if _, err := os.Stat(dst); err == nil {
					t.Error("a refused conversion left output")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(sum.Warnings) == 0 || !strings.Contains(strings.Join(sum.Messages(), "\n"), "no quantization config") {
				t.Errorf("warnings %v", sum.Warnings)
			}
			got, _ := tensorsOf(t, dst)
			want, _ := tensorsOf(t, tc.src)
			for n, b := range want {
				if !bytes.Equal(got[n], b) {
					t.Errorf("%s changed", n)
				}
			}
		})
	}
}
