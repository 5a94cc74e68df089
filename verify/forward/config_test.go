package forward

import (
	"math"
	"strings"
	"testing"
)

// TestFamilyDefaults checks the transformers config-class defaults a family's Config gets
// when config.json omits a field, the legacy spellings config classes still accept, and the
// refusals that keep an unsupported variant from running as a supported one.
func TestFamilyDefaults(t *testing.T) {
	const dims = `"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":4,"vocab_size":97,"max_position_embeddings":64`
	l0 := func(c *Config) *Block { return c.Blocks[0] }
	for _, tc := range []struct {
		name, json string
		check      func(c *Config) bool
		err        string
	}{
		{"mixtral eps, window, routing", `{"model_type":"mixtral",` + dims + `,"intermediate_size":32}`, func(c *Config) bool {
			e := l0(c).MLP.MoE
			return l0(c).AttnNorm.Eps == 1e-5 && l0(c).Attn.Window == 0 && e.Experts == 8 && e.TopK == 2 && e.NormTopK && e.Inter == 32 &&
				l0(c).Attn.Rope.Rope.Theta == 1e6 && e.Scoring == Softmax
		}, ""},
		{"mixtral window on every layer", `{"model_type":"mixtral",` + dims + `,"sliding_window":5}`, func(c *Config) bool {
			return c.Blocks[0].Attn.Window == 5 && c.Blocks[1].Attn.Window == 5
		}, ""},
		{"mistral default window", `{"model_type":"mistral",` + dims + `}`, func(c *Config) bool { return l0(c).Attn.Window == 4096 }, ""},
		{"mistral null window", `{"model_type":"mistral",` + dims + `,"sliding_window":null}`, func(c *Config) bool { return l0(c).Attn.Window == 0 }, ""},
		{"gemma ties, scales, gelu", `{"model_type":"gemma",` + dims + `}`, func(c *Config) bool {
			b := l0(c)
			return !c.Head.ok() && b.AttnNorm.PlusOne && b.AttnOut == nil && c.EmbedScale == 8 && b.MLP.Act == "gelu_pytorch_tanh" && b.Attn.HeadDim == 256
		}, ""},
		{"gemma2 ties, sandwich, caps, alternating windows", `{"model_type":"gemma2",` + dims + `}`, func(c *Config) bool {
			return !c.Head.ok() && l0(c).AttnOut != nil && l0(c).MLPOut != nil && c.FinalSoftcap == 30 && l0(c).Attn.Softcap == 50 &&
				c.Blocks[0].Attn.Window == 4096 && c.Blocks[1].Attn.Window == 0 && l0(c).Attn.Scale == 1.0/16
		}, ""},
		{"gemma3 local rope", `{"model_type":"gemma3_text",` + dims + `,"num_hidden_layers":6,"rope_local_base_freq":500}`, func(c *Config) bool {
			return c.Blocks[0].Attn.Rope.Rope.Theta == 500 && c.Blocks[5].Attn.Rope.Rope.Theta == 1e6 && c.Blocks[5].Attn.Window == 0 && c.FinalSoftcap == 0
		}, ""},
		{"phi3 partial rotary", `{"model_type":"phi3",` + dims + `,"partial_rotary_factor":0.75}`, func(c *Config) bool {
			return l0(c).Attn.QKV.Fused.ok() && l0(c).MLP.GateUp.ok() && l0(c).AttnNorm.Eps == 1e-5 && l0(c).Attn.Rope.Rope.rotaryDim == 12
		}, ""},
		{"phi3 su is longrope", `{"model_type":"phi3",` + dims + `,"original_max_position_embeddings":8,"rope_scaling":{"type":"su","short_factor":[1,1,1,1,1,1,1,1],"long_factor":[2,2,2,2,2,2,2,2]}}`,
			func(c *Config) bool { return l0(c).Attn.Rope.Rope.Type == "longrope" }, ""},
		{"olmo2", `{"model_type":"olmo2",` + dims + `}`, func(c *Config) bool {
			b := l0(c)
			return b.AttnNorm == nil && b.AttnOut != nil && b.MLPOut != nil && b.Attn.QNorm.Whole && b.AttnOut.Eps == 1e-5 && b.Attn.QKV.Q.B == ""
		}, ""},
		{"granite multipliers", `{"model_type":"granite",` + dims + `,"embedding_multiplier":12,"attention_multiplier":0.25,"residual_multiplier":0.5,"logits_scaling":8,"mlp_bias":true}`,
			func(c *Config) bool {
				return c.EmbedScale == 12 && l0(c).Attn.Scale == 0.25 && l0(c).ResidualScale == 0.5 && c.LogitDiv == 8 && l0(c).MLP.Up.B != ""
			}, ""},
		{"granite defaults", `{"model_type":"granite",` + dims + `}`, func(c *Config) bool {
			return c.EmbedScale == 1 && l0(c).Attn.Scale == 1 && l0(c).ResidualScale == 1 && c.LogitDiv == 1
		}, ""},
		{"starcoder2 layer norms, biases, ties", `{"model_type":"starcoder2",` + dims + `}`, func(c *Config) bool {
			b := l0(c)
			return b.AttnNorm.Kind == LayerNorm && b.AttnNorm.Bias != "" && !b.MLP.Gate.ok() && b.Attn.QKV.Q.B != "" && b.Attn.O.B != "" &&
				b.MLP.Up.B != "" && !c.Head.ok() && b.AttnNorm.Eps == 1e-5 && b.MLP.Act == "gelu_pytorch_tanh"
		}, ""},
		{"starcoder2 use_bias false", `{"model_type":"starcoder2",` + dims + `,"use_bias":false,"norm_epsilon":1e-3}`, func(c *Config) bool {
			b := l0(c)
			return b.Attn.QKV.Q.B == "" && b.Attn.O.B == "" && b.MLP.Up.B == "" && b.AttnNorm.Eps == 1e-3
		}, ""},
		{"qwen2_moe defaults", `{"model_type":"qwen2_moe",` + dims + `}`, func(c *Config) bool {
			e := l0(c).MLP.MoE
			return e.Experts == 60 && e.TopK == 4 && e.Inter == 1408 && e.Shared.Inter == 5632 && e.SharedGate.ok() &&
				l0(c).Attn.QKV.Q.B != "" && l0(c).Attn.O.B == "" && !e.NormTopK
		}, ""},
		{"qwen2_moe qkv_bias", `{"model_type":"qwen2_moe",` + dims + `,"qkv_bias":false,"num_experts":4,"num_experts_per_tok":2}`, func(c *Config) bool {
			return l0(c).Attn.QKV.Q.B == "" && l0(c).MLP.MoE.Experts == 4
		}, ""},
		{"stablelm defaults", `{"model_type":"stablelm",` + dims + `}`, func(c *Config) bool {
			b := l0(c)
			return b.AttnNorm.Kind == LayerNorm && b.MLP.Gate.ok() && b.Attn.QKV.Q.B == "" && b.Attn.O.B == "" && b.Attn.QNorm == nil &&
				b.Residual == Sequential && b.AttnNorm.Eps == 1e-5 && b.Attn.Rope.Rope.rotaryDim == 4
		}, ""},
		{"stablelm options", `{"model_type":"stablelm",` + dims + `,"use_qkv_bias":true,"qk_layernorm":true,"use_parallel_residual":true,"partial_rotary_factor":0.5}`,
			func(c *Config) bool {
				b := l0(c)
				return b.Attn.QKV.Q.B != "" && b.Attn.O.B == "" && b.Attn.QNorm.PerHead && b.Residual == Parallel && b.MLPNorm == nil &&
					b.Attn.Rope.Rope.rotaryDim == 8
			}, ""},
		{"deepseek_v3 defaults", `{"model_type":"deepseek_v3",` + dims + `,"num_hidden_layers":4}`, func(c *Config) bool {
			a := c.Blocks[3].Attn
			e := c.Blocks[3].MLP.MoE
			return a.MLA != nil && a.MLA.QLoraRank == 1536 && a.MLA.KVLoraRank == 512 && a.MLA.NopeDim == 128 && a.MLA.RopeDim == 64 &&
				a.MLA.VDim == 128 && a.Rope.Style == PairsToHalves && a.KVHeads == a.Heads && e.Experts == 256 && e.TopK == 8 &&
				e.Groups == 8 && e.TopKGroups == 4 && e.RoutedScale == 2.5 && e.NormTopK && e.Shared.Inter == 2048 &&
				c.Blocks[2].MLP.MoE == nil && a.Scale == 1/math.Sqrt(192)
		}, ""},
		{"deepseek_v3 no q lora, yarn mscale", `{"model_type":"deepseek_v3",` + dims + `,"q_lora_rank":null,"n_routed_experts":8,"n_group":2,"topk_group":1,"num_experts_per_tok":2,"rope_parameters":{"rope_type":"yarn","factor":4,"mscale_all_dim":1,"original_max_position_embeddings":16}}`,
			func(c *Config) bool {
				ms := 0.1*math.Log(4) + 1
				a := l0(c).Attn
				return a.MLA.QLoraRank == 0 && a.MLA.Q.ok() && math.Abs(a.Scale-ms*ms/math.Sqrt(192)) < 1e-15
			}, ""},
		{"deepseek_v3 groups that cannot hold the top-k", `{"model_type":"deepseek_v3",` + dims + `,"n_routed_experts":8,"n_group":4,"topk_group":1,"num_experts_per_tok":3,"first_k_dense_replace":0}`, nil,
			"do not split into groups"},
		{"llama partial rotary refused", `{"model_type":"llama",` + dims + `,"partial_rotary_factor":0.5}`, nil, "partial_rotary_factor 0.5 is not supported for llama"},
		{"odd rotary dimension", `{"model_type":"phi3",` + dims + `,"partial_rotary_factor":0.6}`, nil, "must be even"},
		{"unknown activation", `{"model_type":"gemma",` + dims + `,"hidden_act":"swiglu_x"}`, nil, `hidden activation "swiglu_x" is not supported`},
		{"layer_types of the wrong length", `{"model_type":"qwen3",` + dims + `,"layer_types":["full_attention"]}`, nil, "layer_types has 1 entries for 2 layers"},
		{"a field of the wrong type", `{"model_type":"llama",` + dims + `,"rms_norm_eps":"small"}`, nil, "rms_norm_eps is small, not a number"},
		{"unsupported family", `{"model_type":"bert","architectures":["BertForMaskedLM"]}`, nil,
			`model_type "bert" (BertForMaskedLM) is not supported by the forward pass (supported: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.json))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Errorf("%+v", *c)
			}
		})
	}
}
