package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

func TestTarget(t *testing.T) {
	tg, err := NewTarget(Spec{Topology: "v5p-16", Mesh: "fsdp=4,tp=2"})
	if err != nil {
		t.Fatal(err)
	}
	if tg.Generation.Name != "v5p" || tg.Ranks() != 8 || tg.Device != "tpu" {
		t.Errorf("generation %s, %d ranks, device %s", tg.Generation, tg.Ranks(), tg.Device)
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
	cpu, err := NewTarget(Spec{Device: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	if p, err := cpu.Place("w", []int64{2}, statedict.Float32, "cuda:0"); err != nil || p.Device != "cpu" || p.Sharding != nil {
		t.Errorf("cpu: %+v %v", p, err)
	}
	// A topology alone shards fsdp over every device.
	if v6e, err := NewTarget(Spec{Topology: "v6e-8"}); err != nil || v6e.Mesh.String() != "fsdp=8" || v6e.Generation.Name != "v6e" {
		t.Errorf("v6e-8: %+v %v", v6e, err)
	}
	// A mesh without a topology: CPU ranks.
	if _, err := NewTarget(Spec{Device: "cpu", Mesh: "fsdp=4,tp=2"}); err != nil {
		t.Errorf("cpu mesh: %v", err)
	}
	for _, tc := range []struct {
		spec       Spec
		field, why string
	}{
		{Spec{Device: "cuda"}, "device", "tpu or cpu"},
		{Spec{Generation: "v6e", Topology: "v5p-16"}, "generation", "does not match"},
		{Spec{Generation: "v9"}, "generation", "one of v4"},
		{Spec{Topology: "v3-8"}, "topology", "TPU generation"},
		{Spec{Topology: "v5p-16", Mesh: "fsdp=3"}, "mesh", "3 ranks"},
		{Spec{Mesh: "pp=2"}, "mesh", "pipeline"},
		{Spec{Plan: &Plan{}}, "plan", "needs one"},
		{Spec{MapLocation: "gpu"}, "map_location", "not a device tag"},
	} {
		_, err := NewTarget(tc.spec)
		var se *SpecError
		if !errors.As(err, &se) || se.Field != tc.field || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("NewTarget(%+v): %v, want a %s error saying %q", tc.spec, err, tc.field, tc.why)
		}
	}
}

// TestSpecRoundTrip: a target's Spec builds the same target, through JSON as a manifest
// records it.
func TestSpecRoundTrip(t *testing.T) {
	plan, err := ParsePlan([]byte(`{"rules": [{"match": "lm_head", "placements": {"tp": "Replicate()"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	plan.Path = "plan.json"
	for _, s := range []Spec{
		{Device: "tpu"},
		{Device: "cpu", MapLocation: "cuda:1=tpu,cuda:0=cpu"},
		{Device: "tpu", Generation: "v6e"},
		{Device: "tpu", Topology: "v5p-32", Mesh: "dp=2,fsdp=4,tp=2", Plan: plan},
		{Device: "tpu", Topology: "tpu7x:2,2,1,2"},
	} {
		tg, err := NewTarget(s)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		b, err := json.Marshal(tg.Spec())
		if err != nil {
			t.Fatal(err)
		}
		var back Spec
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		tg2, err := NewTarget(back)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !reflect.DeepEqual(tg.Spec(), tg2.Spec()) || tg2.Ranks() != tg.Ranks() || fmt.Sprint(tg2.Topology) != fmt.Sprint(tg.Topology) {
			t.Errorf("%+v: rebuilt from %s as %+v", s, b, tg2.Spec())
		}
		if s.Plan != nil {
			sh, err := tg2.Plan.Sharding("lm_head.weight", []int64{8, 8}, tg2.Mesh)
			if err != nil || sh.Placements[2] != Replicate {
				t.Errorf("rebuilt plan places lm_head on %v (%v)", sh.Placements, err)
			}
		}
	}
	for _, bad := range []string{
		`{"device":"tpu","plan":{"rules":[{"match":"(","placements":{"tp":"Replicate()"}}]}}`,
		`{"device":"tpu","plan":{"rules":[],"extra":1}}`,
	} {
		var s Spec
		if err := json.Unmarshal([]byte(bad), &s); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
