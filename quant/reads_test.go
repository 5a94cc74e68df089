package quant_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/statedict"
)

// TestRandomReads checks that a dequantized storage gives the same bytes however it
// is read: in one piece (split over goroutines), in small serial pieces, and at random
// offsets and lengths that cut rows, tiles, packed bytes and elements. The groups are
// every fixture's plus larger ones whose reads go parallel.
func TestRandomReads(t *testing.T) {
	groups := syntheticGroups(t)
	for _, name := range []string{"fp8_block", "fp8_fbgemm", "fp8_ct", "modelopt_mixed", "mxfp4", "nvfp4_ct", "nvfp4_modelopt"} {
		ck, err := formats.Open(context.Background(), filepath.Join(fixturesDir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		groups = append(groups, detect(t, ck).Groups...)
	}
	r := rand.New(rand.NewPCG(7, 8))
	for _, g := range groups {
		for _, dt := range outDTypes {
			out, err := g.Dequantize(dt)
			if err != nil {
				t.Fatal(err)
			}
			whole := dequantized(t, g, dt)
			st := out.Storage
			serial := make([]byte, 0, len(whole))
			piece := make([]byte, 4099) // odd: cuts elements
			for off := int64(0); off < st.Size; off += int64(len(piece)) {
				n, _ := st.ReadAt(piece, off)
				serial = append(serial, piece[:n]...)
			}
			if !bytes.Equal(serial, whole) {
				t.Errorf("%s %s: serial 4099-byte reads differ from one whole read", g.Name, dt)
			}
			for range 50 {
				off := r.Int64N(st.Size)
				p := make([]byte, 1+r.Int64N(min(st.Size-off, 1<<20)))
				if _, err := st.ReadAt(p, off); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(p, whole[off:off+int64(len(p))]) {
					t.Errorf("%s %s: %d bytes at %d differ", g.Name, dt, len(p), off)
					break
				}
			}
		}
	}
}

// TestDequantizeRejects checks the output dtypes and source views dequantization refuses.
func TestDequantizeRejects(t *testing.T) {
	cfg, err := quant.ParseConfig([]byte(`{"quantization_config": {"quant_method": "fp8", "weight_block_size": null}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := zeros(f8, 4, 4)
	transposed := *w
	transposed.Strides = []int64{1, 4}
	for _, tc := range []struct {
		name   string
		weight *statedict.Tensor
		dtype  statedict.DType
	}{
		{"float64 output", w, statedict.Float64},
		{"strided codes", &transposed, statedict.BFloat16},
	} {
		plan, err := quant.Detect(cfg, []named{{Name: "a.weight", Tensor: tc.weight}, {Name: "a.weight_scale_inv", Tensor: zeros(f32, 1)}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := plan.Groups[0].Dequantize(tc.dtype); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}
