package runtime

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// llamaConfig is the part of a Hugging Face config.json that fixes a Llama-family model's
// tensor shapes.
type llamaConfig struct {
	vocab, hidden, intermediate, layers, heads, kvHeads, headDim int64
	qkNorm                                                       bool // Qwen3's per-head q_norm / k_norm
}

// Qwen/Qwen3-8B config.json: vocab_size 151936, hidden_size 4096, intermediate_size 12288,
// num_hidden_layers 36, num_attention_heads 32, num_key_value_heads 8, head_dim 128,
// tie_word_embeddings false.
var qwen3_8B = llamaConfig{151936, 4096, 12288, 36, 32, 8, 128, true}

// meta-llama/Meta-Llama-3-70B config.json: vocab_size 128256, hidden_size 8192,
// intermediate_size 28672, num_hidden_layers 80, num_attention_heads 64,
// num_key_value_heads 8 (head_dim 8192/64 = 128), untied embeddings.
var llama3_70B = llamaConfig{128256, 8192, 28672, 80, 64, 8, 128, false}

// specs lists the model's bfloat16 state dict in Hugging Face names, and with adam its
// AdamW state: float32 exp_avg and exp_avg_sq of each parameter's shape, and a float32
// scalar step.
func (c llamaConfig) specs(adam bool) []TensorSpec {
	var out []TensorSpec
	add := func(name string, shape ...int64) {
		out = append(out, TensorSpec{Name: name, DType: statedict.BFloat16, Shape: shape, Role: RoleWeight})
	}
	add("model.embed_tokens.weight", c.vocab, c.hidden)
	for i := range c.layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"self_attn.q_proj.weight", c.heads*c.headDim, c.hidden)
		add(p+"self_attn.k_proj.weight", c.kvHeads*c.headDim, c.hidden)
		add(p+"self_attn.v_proj.weight", c.kvHeads*c.headDim, c.hidden)
		add(p+"self_attn.o_proj.weight", c.hidden, c.heads*c.headDim)
		if c.qkNorm {
			add(p+"self_attn.q_norm.weight", c.headDim)
			add(p+"self_attn.k_norm.weight", c.headDim)
		}
		add(p+"mlp.gate_proj.weight", c.intermediate, c.hidden)
		add(p+"mlp.up_proj.weight", c.intermediate, c.hidden)
		add(p+"mlp.down_proj.weight", c.hidden, c.intermediate)
		add(p+"input_layernorm.weight", c.hidden)
		add(p+"post_attention_layernorm.weight", c.hidden)
	}
	add("model.norm.weight", c.hidden)
	add("lm_head.weight", c.vocab, c.hidden)
	if !adam {
		return out
	}
	n := len(out)
	for i, w := range out[:n] {
		for _, k := range []string{"exp_avg", "exp_avg_sq"} {
			out = append(out, TensorSpec{Name: fmt.Sprintf("optimizer.state.%d.%s", i, k), DType: statedict.Float32, Shape: w.Shape, Role: RoleOptimizer, Param: w.Name})
		}
		out = append(out, TensorSpec{Name: fmt.Sprintf("optimizer.state.%d.step", i), DType: statedict.Float32, Role: RoleOptimizer, Param: w.Name})
	}
	return out
}

// TestPlanMemoryLlamaFamily is the table of hand-computed per-device sizes. Every row uses
// the rule, not the code:
//
// Parameter counts. Qwen3-8B, per layer: q 4096·4096 = 16,777,216; k, v 1024·4096 =
// 4,194,304 each; o 16,777,216; gate, up, down 12288·4096 = 50,331,648 each; two norms of
// 4096; q_norm, k_norm of 128: 192,946,432, × 36 layers = 6,946,071,552; embed_tokens and
// lm_head 151936·4096 = 622,329,856 each; model.norm 4096. Total 8,190,735,360; bf16
// 16,381,470,720 B. Llama-3-70B, per layer: q, o 8192² = 67,108,864; k, v 1024·8192 =
// 8,388,608; gate, up, down 28672·8192 = 234,881,024; two norms of 8192: 855,654,400, × 80 =
// 68,452,352,000; embed_tokens, lm_head 128256·8192 = 1,050,673,152 each; norm 8192. Total
// 70,553,706,496; bf16 141,107,412,992 B. AdamW moments: 2 × 4 B per parameter.
//
// Padding. With fsdp=N every dimension divides evenly, so each device holds 1/N of every
// tensor. The 2-D shards keep whole (8,128) and (16,128) tiles: their rows (q 4096/N, k
// 1024/N, gate 12288/N, embed 151936/8 = 18992 = 16·1187, /16 = 9496 = 8·1187; Llama
// 128256/8 = 16032 = 16·1002, /16 = 8016 = 8·1002, …) are multiples of 8 — of 16 where
// TPU7x needs it — and columns multiples of 128. Only vectors pad, to 1024 elements:
//   - Qwen3, N=8: norms 4096/8 = 512, q_norm/k_norm 128/8 = 16. Per layer 4·1024 − (512+512+
//     16+16) = 3040 extra elements, × 36 = 109,440, + model.norm 512: 109,952 elements:
//     219,904 B in bf16, 439,808 B per fp32 moment.
//   - Qwen3, N=16: per layer 4096 − (256+256+8+8) = 3568, × 36 = 128,448, + 768: 129,216
//     elements: 258,432 B bf16, 516,864 B per fp32 moment.
//   - Llama, N=8: norms 8192/8 = 1024, no padding. N=16: 512 each: per layer 2·512, × 80 =
//     81,920, + 512: 82,432 elements: 164,864 B bf16, 329,728 B per fp32 moment.
//
// The step scalars are host memory. HBM per device: v5e 16 GiB = 17,179,869,184; v6e 32 GiB
// = 34,359,738,368; v5p 95 GiB = 102,005,473,280; TPU7x 192 GiB / 2 = 103,079,215,104.
func TestPlanMemoryLlamaFamily(t *testing.T) {
	for _, tc := range []struct {
		model                     llamaConfig
		adam                      bool
		topology, mesh            string
		weightsRaw, weightsPadded int64
		optimRaw, optimPadded     int64
		fits                      bool
	}{
		// Qwen3-8B weights: 16,381,470,720 / 8 = 2,047,683,840 raw, + 219,904.
		{qwen3_8B, false, "v5e-8", "fsdp=8", 2_047_683_840, 2_047_903_744, 0, 0, true},
		{qwen3_8B, false, "v6e-8", "fsdp=8", 2_047_683_840, 2_047_903_744, 0, 0, true},
		{qwen3_8B, false, "tpu7x-8", "fsdp=8", 2_047_683_840, 2_047_903_744, 0, 0, true},
		// v5p-32 is 16 chips: / 16 = 1,023,841,920, + 258,432.
		{qwen3_8B, false, "v5p-32", "fsdp=16", 1_023_841_920, 1_024_100_352, 0, 0, true},
		// fsdp=4,tp=4: norms (36·8448 + 4096 = 308,224 elements) are replicated on tp, so
		// / 4; the rest / 16: (8,190,735,360 − 308,224) / 16 + 308,224 / 4 = 511,901,696 +
		// 77,056 elements = 1,023,957,504 B. q_norm/k_norm shards of 32 pad to 1024: 2·992
		// · 36 · 2 B = 142,848. Every 1-D shard takes 1024 elements and every 2-D one 1/16,
		// as with fsdp=16: the same padded total.
		{qwen3_8B, false, "v5p-32", "fsdp=4,tp=4", 1_023_957_504, 1_024_100_352, 0, 0, true},
		// With AdamW: moments 8,190,735,360 · 8 / 8 = 8,190,735,360, + 2 · 439,808 = 879,616;
		// total 10,239,518,720 padded.
		{qwen3_8B, true, "v5e-8", "fsdp=8", 2_047_683_840, 2_047_903_744, 8_190_735_360, 8_191_614_976, true},
		{qwen3_8B, true, "v6e-8", "fsdp=8", 2_047_683_840, 2_047_903_744, 8_190_735_360, 8_191_614_976, true},
		{qwen3_8B, true, "tpu7x-8", "fsdp=8", 2_047_683_840, 2_047_903_744, 8_190_735_360, 8_191_614_976, true},
		// / 16: 4,095,367,680, + 2 · 516,864 = 1,033,728.
		{qwen3_8B, true, "v5p-32", "fsdp=16", 1_023_841_920, 1_024_100_352, 4_095_367_680, 4_096_401_408, true},
		// Llama-3-70B weights: 141,107,412,992 / 8 = 17,638,426,624 > 16 GiB on v5e.
		{llama3_70B, false, "v5e-8", "fsdp=8", 17_638_426_624, 17_638_426_624, 0, 0, false},
		{llama3_70B, false, "v6e-8", "fsdp=8", 17_638_426_624, 17_638_426_624, 0, 0, true},
		{llama3_70B, false, "tpu7x-8", "fsdp=8", 17_638_426_624, 17_638_426_624, 0, 0, true},
		{llama3_70B, false, "v5p-32", "fsdp=16", 8_819_213_312, 8_819_378_176, 0, 0, true},
		// tp=8 on TPU7x: 161 norms of 8192 replicated (2,637,824 B), the rest / 8:
		// (141,107,412,992 − 2,637,824) / 8 + 2,637,824. Shards: q, o^T 1024 rows, k 128,
		// gate 3584, embed 16032 — multiples of 16, and columns of 128.
		{llama3_70B, false, "tpu7x-8", "tp=8", 17_640_734_720, 17_640_734_720, 0, 0, true},
		// With AdamW: 70,553,706,496 per device on 8, total 88,192,133,120 — over v6e's
		// 32 GiB, under TPU7x's 96 GiB.
		{llama3_70B, true, "v5e-8", "fsdp=8", 17_638_426_624, 17_638_426_624, 70_553_706_496, 70_553_706_496, false},
		{llama3_70B, true, "v6e-8", "fsdp=8", 17_638_426_624, 17_638_426_624, 70_553_706_496, 70_553_706_496, false},
		{llama3_70B, true, "tpu7x-8", "fsdp=8", 17_638_426_624, 17_638_426_624, 70_553_706_496, 70_553_706_496, true},
		// / 16: 35,276,853,248, + 2 · 329,728 = 659,456.
		{llama3_70B, true, "v5p-32", "fsdp=16", 8_819_213_312, 8_819_378_176, 35_276_853_248, 35_277_512_704, true},
	} {
		name := map[bool]string{true: "Llama-3-70B", false: "Qwen3-8B"}[tc.model == llama3_70B]
		if tc.adam {
			name += "+AdamW"
		}
		name += " on " + tc.topology + " " + tc.mesh
		t.Run(name, func(t *testing.T) {
			mp := planFor(t, tc.model.specs(tc.adam), tc.topology, tc.mesh)
			d := mp.Devices[mp.Fullest]
			want := DeviceMemory{Rank: 0, Weights: Bytes{tc.weightsRaw, tc.weightsPadded}, Optimizer: Bytes{tc.optimRaw, tc.optimPadded},
				Total: Bytes{tc.weightsRaw + tc.optimRaw, tc.weightsPadded + tc.optimPadded}}
			if d != want {
				t.Errorf("fullest device %+v,\n                want %+v", d, want)
			}
			if mp.Fits != tc.fits {
				t.Errorf("fits = %v, want %v", mp.Fits, tc.fits)
			}
			if !mp.Fits && mp.Over != d.Total.Padded-mp.HBMPerDevice {
				t.Errorf("over by %d", mp.Over)
			}
			// Even splits: every device holds the same.
			for _, o := range mp.Devices {
				if o.Total != d.Total {
					t.Errorf("rank %d holds %+v, rank 0 %+v", o.Rank, o.Total, d.Total)
					break
				}
			}
		})
	}
}

func planFor(t *testing.T, specs []TensorSpec, topology, mesh string, opts ...func(*MemoryOptions)) *MemoryPlan {
	t.Helper()
	top, err := ParseTopology(topology)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseMesh(mesh)
	if err != nil {
		t.Fatal(err)
	}
	o := MemoryOptions{Topology: top, Mesh: m}
	for _, f := range opts {
		f(&o)
	}
	mp, err := PlanMemory(specs, o)
	if err != nil {
		t.Fatal(err)
	}
	return mp
}

// TestSuggestions: what the plan proposes when a checkpoint does not fit, each change
// planned. The fitting results are rows of the table above.
func TestSuggestions(t *testing.T) {
	find := func(mp *MemoryPlan, change string) *Suggestion {
		for i, s := range mp.Suggestions {
			if strings.Contains(s.Change, change) {
				return &mp.Suggestions[i]
			}
		}
		t.Fatalf("no %q among %+v", change, mp.Suggestions)
		return nil
	}
	// Llama-3-70B weights on v5e-8: only more devices can help; fsdp=16 on 16 chips holds
	// 8,819,378,176 padded (the v5p-32 fsdp=16 row: same tiles).
	mp := planFor(t, llama3_70B.specs(false), "v5e-8", "fsdp=8")
	if len(mp.Suggestions) != 1 {
		t.Errorf("suggestions %+v", mp.Suggestions)
	}
	if s := find(mp, "2× the devices"); s.Topology != "v5litepod-16" || s.Mesh != "fsdp=16" || !s.Fits || s.Fullest.Padded != 8_819_378_176 {
		t.Errorf("%+v", s)
	}
	// With AdamW on v6e-8: weights only (17,638,426,624) fit; or 705,537,064,960 B over 16
	// devices is 44.1e9 > 32 GiB, over 32 devices 22.05e9: v6e-32.
	mp = planFor(t, llama3_70B.specs(true), "v6e-8", "fsdp=8")
	if s := find(mp, "optimizer state out"); !s.Fits || s.Fullest.Padded != 17_638_426_624 || !s.DropOptimizer {
		t.Errorf("%+v", s)
	}
	if s := find(mp, "4× the devices"); s.Topology != "v6e-32" || s.Mesh != "fsdp=32" || !s.Fits {
		t.Errorf("%+v", s)
	}
	// Plain data parallelism on v6e-8: every device holds all 141 GB. FSDP over the 8
	// devices fits (the fsdp=8 row); adding FSDP under dp=8 needs fsdp=8 (17.6e9; fsdp=4
	// is 35,276,853,248 > 34,359,738,368): v6e-64.
	mp = planFor(t, llama3_70B.specs(false), "v6e-8", "dp=8")
	if d := mp.Devices[0].Total.Raw; d != 141_107_412_992 || mp.Fits {
		t.Errorf("dp=8 holds %d per device", d)
	}
	if s := find(mp, "FSDP"); s.Mesh != "fsdp=8" || s.Topology != "v6e-8" || !s.Fits || s.Fullest.Padded != 17_638_426_624 {
		t.Errorf("%+v", s)
	}
	if s := find(mp, "8× the devices"); s.Topology != "v6e-64" || s.Mesh != "fsdp=8,dp=8" || !s.Fits {
		t.Errorf("%+v", s)
	}
	// float32 Qwen3-8B on one v5e chip (32.8 GB): bfloat16 weights fit — 16,381,470,720 B
	// plus q_norm/k_norm padded from 128 to 1024 elements, 72 · 896 · 2 B = 129,024 —, and
	// so do 4 chips (no 2-chip v5e slice exists) with fsdp=4.
	specs := qwen3_8B.specs(false)
	for i := range specs {
		specs[i].DType = statedict.Float32
	}
	mp = planFor(t, specs, "v5e-1", "fsdp=1")
	if s := find(mp, "bfloat16"); s.WeightDType != "bfloat16" || !s.Fits || s.Fullest.Padded != 16_381_599_744 {
		t.Errorf("%+v", s)
	}
	if s := find(mp, "4× the devices"); s.Topology != "v5litepod-4" || s.Mesh != "fsdp=4" || !s.Fits {
		t.Errorf("%+v", s)
	}
}

// BenchmarkPlanMemory plans Llama-3-70B with AdamW (2169 tensors) over the 4096 devices
// of a v5p-8192 slice with fsdp=512,tp=8: the largest plan ckpt plan is asked for.
func BenchmarkPlanMemory(b *testing.B) {
	specs := llama3_70B.specs(true)
	top, _ := ParseTopology("v5p-8192")
	m, _ := ParseMesh("fsdp=512,tp=8")
	for b.Loop() {
		if _, err := PlanMemory(specs, MemoryOptions{Topology: top, Mesh: m}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRankZeroIsFullest: under torch.chunk splits the first chunk along every dimension is
// the largest, so rank 0 holds at least as many raw and padded bytes of every tensor as any
// other rank, however uneven the shapes; PlanMemory's suggestions rely on it.
func TestRankZeroIsFullest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	v5e, _ := LookupGeneration("v5e")
	v7, _ := LookupGeneration("tpu7x")
	meshes := []string{"a=3", "a=2,b=3", "a=4,b=2,c=3", "a=5,b=2"}
	for range 2000 {
		m, _ := ParseMesh(meshes[rng.IntN(len(meshes))])
		shape := make([]int64, 1+rng.IntN(3))
		for i := range shape {
			shape[i] = int64(rng.IntN(40))
		}
		s := Sharding{Placements: make([]Placement, m.NDim())}
		for i := range s.Placements {
			if rng.IntN(3) > 0 {
				s.Placements[i] = Shard(rng.IntN(len(shape)))
			}
		}
		if rng.IntN(2) == 0 {
			s.Order = rng.Perm(m.NDim())
		}
		p := placed{spec: &TensorSpec{Shape: shape}, dtype: statedict.BFloat16, s: s}
		sizes := make([]int64, len(shape))
		for _, g := range []*Generation{v5e, v7} {
			zero := p.share(g, m, make([]int, m.NDim()), sizes)
			for r := range m.Size() {
				if b := p.share(g, m, m.Coord(r), sizes); b.Raw > zero.Raw || b.Padded > zero.Padded {
					t.Fatalf("%v %v on %s: rank %d holds %+v, rank 0 %+v", shape, s, m, r, b, zero)
				}
			}
		}
	}
}
