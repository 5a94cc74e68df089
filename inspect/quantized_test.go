package inspect_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/inspect"
	"github.com/ckpt-dev/ckpt/statedict"
)

// TestQuantizedSection checks the quantized section of the report: groups as logical
// tensors with scheme and logical shape beside the unchanged list of stored tensors, an
// error for codes without a config, and no section for a plain checkpoint.
func TestQuantizedSection(t *testing.T) {
	ck, err := formats.Open(context.Background(), "../testdata/quantized/mxfp4")
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	r, err := inspect.Build(context.Background(), ck, inspect.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := r.Quantized
	if q == nil || q.Method != "mxfp4" || len(q.Groups) != 2 || q.Error != "" {
		t.Fatalf("quantized section %+v", q)
	}
	g := q.Groups[0]
	if g.Name != "model.layers.0.mlp.experts.down_proj" || g.Scheme != "mxfp4" || !slices.Equal(g.Shape, []int64{2, 32, 96}) ||
		g.CodeDType != "uint8" || !slices.Equal(g.Stored, []string{"model.layers.0.mlp.experts.down_proj_blocks", "model.layers.0.mlp.experts.down_proj_scales"}) {
		t.Errorf("group %+v", g)
	}
	if len(r.Tensors) != 7 || r.Tensors[0].Name != "model.layers.0.mlp.experts.down_proj_bias" {
		t.Errorf("the tensors list is not the stored tensors: %d, first %s", len(r.Tensors), r.Tensors[0].Name)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"quantized":{"method":"mxfp4","config":["config.json"],"groups":[{"name":"model.layers.0.mlp.experts.down_proj","scheme":"mxfp4","shape":[2,32,96]`) {
		t.Errorf("JSON: %s", b)
	}

	codes := statedict.NewDict("")
	for name, dt := range map[string]statedict.DType{"l.weight": statedict.Float8E4M3FN, "l.weight_scale_inv": statedict.Float32} {
		codes.Set(name, &statedict.Tensor{DType: dt, Shape: []int64{1}, Strides: []int64{1},
			Storage: statedict.NewMappedStorage(name, "cpu", dt, make([]byte, dt.Size()))})
	}
	r, err = inspect.Build(context.Background(), &statedict.Checkpoint{Format: "safetensors", Root: codes}, inspect.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Quantized == nil || !strings.Contains(r.Quantized.Error, "no quantization config") {
		t.Errorf("codes without config: %+v", r.Quantized)
	}

	plain, err := formats.Open(context.Background(), "../testdata/torch/views.pt")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if r, err = inspect.Build(context.Background(), plain, inspect.Options{}); err != nil || r.Quantized != nil {
		t.Errorf("plain checkpoint: %v %+v", err, r.Quantized)
	}
}
