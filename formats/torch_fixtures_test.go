package formats_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/inspect"
	"github.com/ckpt-dev/ckpt/statedict"
)

// torchListing is what testdata/torch/gen.py records from torch itself for each fixture.
type torchListing struct {
	File       string        `json:"file"`
	Format     string        `json:"format"`
	Dangerous  []string      `json:"dangerous"`
	Tensors    []torchTensor `json:"tensors"`
	NonTensors []struct {
		Name  string          `json:"name"`
		Type  string          `json:"type"`
		Value json.RawMessage `json:"value"`
	} `json:"non_tensors"`
}

type torchTensor struct {
	Name          string    `json:"name"`
	DType         string    `json:"dtype"`
	Shape         []int64   `json:"shape"`
	Strides       []int64   `json:"strides"`
	StorageOffset int64     `json:"storage_offset"`
	Location      string    `json:"location"`
	NBytes        int64     `json:"nbytes"`
	SHA256        string    `json:"sha256"`
	SharesWith    string    `json:"shares_storage_with"`
	QScheme       string    `json:"q_scheme"`
	QScale        *float64  `json:"q_scale"`
	QZeroPoint    *int64    `json:"q_zero_point"`
	QAxis         *int64    `json:"q_axis"`
	QScales       []float64 `json:"q_scales"`
}

func loadListing(t *testing.T, path string) torchListing {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var l torchListing
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return l
}

// TestTorchFixtures checks that every torch.save fixture reads exactly as torch 2.14 reports
// it: the same names in the same order, dtypes, shapes, strides, offsets, saved locations,
// sizes, storage sharing, quantizer parameters, non-tensor values, and the SHA-256 of every
// tensor's bytes.
func TestTorchFixtures(t *testing.T) {
	jsons, _ := filepath.Glob("../testdata/torch/*.json")
	if len(jsons) < 10 {
		t.Fatalf("only %d torch fixtures found", len(jsons))
	}
	for _, jp := range jsons {
		want := loadListing(t, jp)
		if len(want.Dangerous) > 0 {
			continue // checked by the scan tests; never decoded as a checkpoint here
		}
		t.Run(want.File, func(t *testing.T) {
			path := filepath.Join("../testdata/torch", want.File)
			ck, err := formats.Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if ck.Format != want.Format {
				t.Errorf("format %q, torch wrote %q", ck.Format, want.Format)
			}
			rep, err := inspect.Build(context.Background(), ck, inspect.Options{Hash: true})
			if err != nil {
				t.Fatal(err)
			}
			tensors, err := ck.Tensors()
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Tensors) != len(want.Tensors) {
				var got []string
				for _, x := range rep.Tensors {
					got = append(got, x.Name)
				}
				t.Fatalf("%d tensors %v, torch lists %d", len(rep.Tensors), got, len(want.Tensors))
			}
			for i, w := range want.Tensors {
				g, gt := rep.Tensors[i], tensors[i].Tensor
				if g.Name != w.Name || g.DType != w.DType || !reflect.DeepEqual(g.Shape, nz(w.Shape)) ||
					g.Location != w.Location || g.NBytes != w.NBytes || g.SharesStorageWith != w.SharesWith {
					t.Errorf("tensor %d:\n got  %s %s %v %s %d shares=%q\n want %s %s %v %s %d shares=%q", i,
						g.Name, g.DType, g.Shape, g.Location, g.NBytes, g.SharesStorageWith,
						w.Name, w.DType, w.Shape, w.Location, w.NBytes, w.SharesWith)
				}
				if w.SHA256 != "" && g.SHA256 != w.SHA256 {
					t.Errorf("%s: sha256 %s, torch %s", w.Name, g.SHA256, w.SHA256)
				}
				if !reflect.DeepEqual(gt.Strides, nz(w.Strides)) || gt.Offset != w.StorageOffset {
					t.Errorf("%s: strides %v offset %d, torch %v offset %d", w.Name, gt.Strides, gt.Offset, w.Strides, w.StorageOffset)
				}
				checkQuantizer(t, w, gt)
			}
			if len(rep.NonTensors) != len(want.NonTensors) {
				t.Fatalf("%d non-tensor entries, torch lists %d", len(rep.NonTensors), len(want.NonTensors))
			}
			for i, w := range want.NonTensors {
				g := rep.NonTensors[i]
				if g.Name != w.Name || g.Type != w.Type {
					t.Errorf("non-tensor %d: got %s (%s), want %s (%s)", i, g.Name, g.Type, w.Name, w.Type)
					continue
				}
				if w.Value == nil {
					continue
				}
				var wv, gv any
				json.Unmarshal(w.Value, &wv)
				gb, _ := json.Marshal(g)
				var gm map[string]any
				json.Unmarshal(gb, &gm)
				gv = gm["value"]
				if !g.HasValue || !reflect.DeepEqual(gv, wv) {
					t.Errorf("%s = %v, torch %v", w.Name, gv, wv)
				}
			}
		})
	}
}

func nz(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

func checkQuantizer(t *testing.T, w torchTensor, g *statedict.Tensor) {
	t.Helper()
	if w.QScheme == "" {
		if g.Quantizer != nil {
			t.Errorf("%s: unexpected quantizer", w.Name)
		}
		return
	}
	q := g.Quantizer
	if q == nil {
		t.Errorf("%s: no quantizer, torch has %s", w.Name, w.QScheme)
		return
	}
	if q.Scheme != w.QScheme {
		t.Errorf("%s: qscheme %s, torch %s", w.Name, q.Scheme, w.QScheme)
	}
	if w.QScale != nil && (q.Scale != *w.QScale || q.ZeroPoint != *w.QZeroPoint) {
		t.Errorf("%s: scale %v zero point %d, torch %v %d", w.Name, q.Scale, q.ZeroPoint, *w.QScale, *w.QZeroPoint)
	}
	if w.QAxis != nil && q.Axis != *w.QAxis {
		t.Errorf("%s: axis %d, torch %d", w.Name, q.Axis, *w.QAxis)
	}
	if w.QScales != nil && (q.Scales == nil || q.Scales.NumEl() != int64(len(w.QScales))) {
		t.Errorf("%s: per-channel scales do not match torch's %v", w.Name, w.QScales)
	}
}
