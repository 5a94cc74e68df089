package convert_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/statedict"
)

// TestConfigDType: casting an HF folder with --dtype rewrites config.json's dtype to match
// (transformers loads a model in the dtype its config names) and nothing else; without a
// cast, or when the config already names the dtype, config.json is copied byte for byte.
func TestConfigDType(t *testing.T) {
	for _, tc := range []struct {
		src     string
		dtype   statedict.DType
		changed string
	}{
		{"mistral_sharded", statedict.BFloat16, "float32 → bfloat16"},
		{"mistral_sharded", statedict.Invalid, ""},
		{"qwen3_moe_sharded", statedict.BFloat16, ""},
		{"qwen3_moe_sharded", statedict.Float16, "bfloat16 → float16"},
	} {
		t.Run(tc.src+"/"+tc.dtype.String(), func(t *testing.T) {
			src := filepath.Join("../testdata/hf", tc.src)
			dst := filepath.Join(t.TempDir(), "out")
			sum, err := convert.Run(t.Context(), convert.Options{Src: src, Dst: dst, Format: formats.SafetensorsFile, Plan: plan.Options{DType: tc.dtype}})
			if err != nil {
				t.Fatal(err)
			}
			if sum.ConfigDType != tc.changed {
				t.Errorf("ConfigDType %q, want %q", sum.ConfigDType, tc.changed)
			}
			before, _ := os.ReadFile(filepath.Join(src, "config.json"))
			after, err := os.ReadFile(filepath.Join(dst, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.changed == "" {
				if !bytes.Equal(before, after) {
					t.Fatal("config.json changed")
				}
				return
			}
			var b, a map[string]any
			json.Unmarshal(before, &b)
			json.Unmarshal(after, &a)
			if a["dtype"] != tc.dtype.String() {
				t.Errorf("dtype %v, want %s", a["dtype"], tc.dtype)
			}
			delete(a, "dtype")
			delete(b, "dtype")
			if !reflect.DeepEqual(a, b) {
				t.Errorf("config.json changed beyond its dtype:\n%s", after)
			}
		})
	}
}
