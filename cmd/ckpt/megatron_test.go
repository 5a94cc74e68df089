package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestConvertMegatronParallelToTPU: `ckpt convert --to tpu --topology v5p-8 --format dcp`
// of a Megatron-LM TP=2 × PP=2 save with the distributed optimizer merges it and splits
// every weight and its fp32 main copy and Adam moments over the slice's 4 devices, the
// optimizer state tied by parameter name; a save whose replicated norm differs between
// ranks is refused naming the norm and the two ranks, and leaves no output behind.
func TestConvertMegatronParallelToTPU(t *testing.T) {
	dir := t.TempDir()
	out, err := run(t, "convert", "--json", "--to", "tpu", "--topology", "v5p-8", "--format", "dcp", "../../testdata/ecosystem/megatron/llama_tp2pp2", filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		SrcFormat string `json:"src_format"`
		Sharding  struct {
			Ranks, Sharded int
		} `json:"sharding"`
		Remap struct {
			Optimizers []struct {
				Model    string `json:"model"`
				MappedBy string `json:"mapped_by"`
				Params   int    `json:"params"`
			} `json:"optimizers"`
		} `json:"remap"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// 35 weights, each with fp32_param, exp_avg and exp_avg_sq.
	if sum.SrcFormat != "megatron" || sum.Sharding.Ranks != 4 || sum.Sharding.Sharded != 35*4 {
		t.Errorf("summary %+v\n%s", sum, out)
	}
	if o := sum.Remap.Optimizers; len(o) != 1 || o[0].Model != "model" || o[0].MappedBy != "fqn" || o[0].Params != 35 {
		t.Errorf("optimizer state tied as %+v, want its 35 parameters by name onto model", o)
	}
	dst := filepath.Join(dir, "bad")
	_, err = run(t, "convert", "--to", "tpu", "--topology", "v5p-8", "--format", "dcp", "../../testdata/ecosystem/megatron/hostile/replica", dst)
	if err == nil || !strings.Contains(err.Error(), "decoder.layers.1.self_attention.linear_qkv.layer_norm_weight") || !strings.Contains(err.Error(), "replicas differ: the copy on mp_rank_01_000 and the one on mp_rank_00_000") {
		t.Errorf("a differing replica: %v", err)
	}
	if m, _ := filepath.Glob(dst + "*"); len(m) != 0 {
		t.Errorf("left behind %v", m)
	}
}
