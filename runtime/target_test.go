package runtime

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

func TestTarget(t *testing.T) {
	top, _ := ParseTopology("v5p-16")
	m, _ := ParseMesh("fsdp=4,tp=2")
	tg, err := NewTarget("tpu", nil, top, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tg.Generation.Name != "v5p" || tg.Ranks() != 8 {
		t.Errorf("generation %s, %d ranks", tg.Generation, tg.Ranks())
	}
	p, err := tg.Place("model.layers.0.self_attn.o_proj.weight", []int64{16, 16}, statedict.BFloat16, "cuda:3")
	if err != nil || p.Device != "tpu" || p.Sharding.String() != "(Shard(dim=0), Shard(dim=1))" {
		t.Errorf("o_proj: %+v %v", p, err)
	}
	// Rank 3 is fsdp 1, tp 1: rows 4–7 of columns 8–15.
	c, err := p.Sharding.Chunk([]int64{16, 16}, tg.Mesh, 3)
	if err != nil || fmt.Sprint(c) != "{[4 8] [4 8]}" {
		t.Errorf("rank 3: %v %v", c, err)
	}
	st, err := tg.PlaceState("model.layers.0.self_attn.o_proj.weight", []int64{16, 16}, nil, statedict.Float32, "cuda:3")
	if err != nil || !st.Sharding.Replicated() {
		t.Errorf("step: %+v %v", st, err)
	}
	if p, _ := tg.Place("w", []int64{2}, statedict.Float32, "meta"); p.Device != "meta" {
		t.Errorf("meta storage placed on %s", p.Device)
	}

	// No mesh: a device tag only.
	cpu, err := NewTarget("cpu", nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := cpu.Place("w", []int64{2}, statedict.Float32, "cuda:0"); err != nil || p.Device != "cpu" || p.Sharding != nil {
		t.Errorf("cpu: %+v %v", p, err)
	}
	// A mesh without a topology: CPU ranks.
	if _, err := NewTarget("cpu", nil, nil, m, nil); err != nil {
		t.Errorf("cpu mesh: %v", err)
	}
	v6e, _ := LookupGeneration("v6e")
	bad, _ := ParseMesh("fsdp=3")
	for _, tc := range []struct {
		dev  string
		gen  *Generation
		top  *Topology
		mesh *Mesh
		plan *Plan
		why  string
	}{
		{"cuda", nil, nil, nil, nil, "tpu or cpu"},
		{"tpu", v6e, top, nil, nil, "does not match"},
		{"tpu", nil, top, bad, nil, "3 ranks"},
		{"tpu", nil, nil, nil, &Plan{}, "needs a mesh"},
	} {
		if _, err := NewTarget(tc.dev, tc.gen, tc.top, tc.mesh, tc.plan); err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("NewTarget(%s, %v, %v, %v): %v, want %q", tc.dev, tc.gen, tc.top, tc.mesh, err, tc.why)
		}
	}
}
