package verify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/verify"
)

// TestCheckIntact checks that an untouched output of every format passes Check with every
// manifest tensor hashed.
func TestCheckIntact(t *testing.T) {
	for _, tc := range []struct {
		src    string
		format formats.Layout
		dst    string
	}{
		{"../testdata/torch/training_cuda.pt", formats.TorchFile, "out.pt"},
		{"../testdata/torch/shufflenet_cuda.pt", formats.SafetensorsFile, "out.safetensors"},
		{"../testdata/torch/views.pt", formats.SafetensorsFile, "out"},
		{"../testdata/torch/training_cuda.pt", formats.DCPFolder, "out"},
	} {
		t.Run(string(tc.format)+"/"+tc.dst, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), tc.dst)
			if _, err := convert.Run(t.Context(), convert.Options{Src: tc.src, Dst: dst, Format: tc.format}); err != nil {
				t.Fatal(err)
			}
			rep, err := verify.Check(context.Background(), dst, "")
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() || rep.Checked != rep.Tensors || rep.Tensors == 0 || rep.Bytes == 0 {
				t.Fatalf("report %+v", rep)
			}
		})
	}
}

// TestCheckFindsDamage damages a converted safetensors file or its manifest in each way
// Check must notice, and checks the problem it reports.
func TestCheckFindsDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dst string, m *manifest.Manifest)
		want   verify.CheckProblem
	}{
		{"flipped byte", func(t *testing.T, dst string, m *manifest.Manifest) {
			flipTensorByte(t, dst, m.Tensors[3].Name)
		}, verify.CheckProblem{Kind: "xxhash64"}},
		{"dtype", func(t *testing.T, dst string, m *manifest.Manifest) { m.Tensors[3].DType = "float16" },
			verify.CheckProblem{Kind: "dtype", Want: "float16", Got: "float32"}},
		{"shape", func(t *testing.T, dst string, m *manifest.Manifest) { m.Tensors[3].Shape = []int64{1, 2, 3} },
			verify.CheckProblem{Kind: "shape", Want: []int64{1, 2, 3}}},
		{"missing", func(t *testing.T, dst string, m *manifest.Manifest) {
			m.Tensors = append(m.Tensors, manifest.Tensor{Name: "not.there", DType: "float32"})
		}, verify.CheckProblem{Tensor: "not.there", Kind: "missing"}},
		{"extra", func(t *testing.T, dst string, m *manifest.Manifest) { m.Tensors = slices.Delete(m.Tensors, 3, 4) },
			verify.CheckProblem{Kind: "extra"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out.safetensors")
			if _, err := convert.Run(t.Context(), convert.Options{Src: "../testdata/torch/shufflenet_cuda.pt", Dst: dst, Format: formats.SafetensorsFile}); err != nil {
				t.Fatal(err)
			}
			mpath := dst + "." + manifest.Name
			var m manifest.Manifest
			b, _ := os.ReadFile(mpath)
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			victim := m.Tensors[3].Name
			tc.damage(t, dst, &m)
			b, _ = json.Marshal(m)
			if err := os.WriteFile(mpath, b, 0o644); err != nil {
				t.Fatal(err)
			}
			rep, err := verify.Check(context.Background(), dst, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Problems) != 1 {
				t.Fatalf("problems %+v, want one", rep.Problems)
			}
			p, want := rep.Problems[0], tc.want
			if want.Tensor == "" {
				want.Tensor = victim
			}
			if p.Tensor != want.Tensor || p.Kind != want.Kind || want.Want != nil && !reflect.DeepEqual(p.Want, want.Want) || want.Got != nil && !reflect.DeepEqual(p.Got, want.Got) {
				t.Errorf("problem %+v, want %+v", p, want)
			}
		})
	}
}

// flipTensorByte flips one bit in the middle of the named tensor's bytes in a file, found by
// their content.
func flipTensorByte(t *testing.T, path, name string) {
	t.Helper()
	data, _ := tensorsOf(t, path)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, data[name])
	if len(data[name]) < 16 || at < 0 || bytes.Contains(b[at+1:], data[name]) {
		t.Fatalf("tensor %s's bytes are not found once in %s", name, path)
	}
	b[at+len(data[name])/2] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tensorsOf reads every tensor of the checkpoint at path as contiguous bytes, by name.
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
