package forward

import (
	"math"
	"strings"
	"testing"
)

// TestFamilyDefaults checks the transformers config-class defaults the family table gives
// when config.json omits a field, and the refusals that keep an unsupported variant from
// running as a supported one.
func TestFamilyDefaults(t *testing.T) {
	const dims = `"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":97,"max_position_embeddings":64`
	for _, tc := range []struct {
		name, json string
		check      func(c *Config) bool
		err        string
	}{
		{"mixtral eps, window, routing", `{"model_type":"mixtral",` + dims + `,"intermediate_size":32}`, func(c *Config) bool {
			return c.RMSNormEps == 1e-5 && c.Window == 0 && c.Experts == 8 && c.TopK == 2 && c.NormTopK && c.MoEIntermediate == 32 && c.Rope.Theta == 1e6
		}, ""},
		{"mixtral window on every layer", `{"model_type":"mixtral",` + dims + `,"sliding_window":5}`, func(c *Config) bool {
			return c.Window == 5 && c.Sliding[0] && c.Sliding[1]
		}, ""},
		{"mistral default window", `{"model_type":"mistral",` + dims + `}`, func(c *Config) bool { return c.Window == 4096 }, ""},
		{"gemma ties, scales, gelu", `{"model_type":"gemma",` + dims + `}`, func(c *Config) bool {
			return c.TieEmbeddings && c.NormPlusOne && !c.Sandwich && c.EmbedScale == 8 && c.HiddenAct == "gelu_pytorch_tanh" && c.HeadDim == 256
		}, ""},
		{"gemma2 ties", `{"model_type":"gemma2",` + dims + `}`, func(c *Config) bool { return c.TieEmbeddings && c.Sandwich }, ""},
		{"phi3 partial rotary", `{"model_type":"phi3",` + dims + `,"partial_rotary_factor":0.75}`, func(c *Config) bool {
			return c.Fused && c.RMSNormEps == 1e-5 && c.Rope.rotaryDim == 12
		}, ""},
		{"phi3 su is longrope", `{"model_type":"phi3",` + dims + `,"original_max_position_embeddings":8,"rope_scaling":{"type":"su","short_factor":[1,1,1,1,1,1,1,1],"long_factor":[2,2,2,2,2,2,2,2]}}`,
			func(c *Config) bool { return c.Rope.Type == "longrope" }, ""},
		{"olmo2", `{"model_type":"olmo2",` + dims + `}`, func(c *Config) bool {
			return c.PostNorms && c.QKNorm && c.QKNormFull && c.RMSNormEps == 1e-5 && !c.AttnBias
		}, ""},
		{"granite multipliers", `{"model_type":"granite",` + dims + `,"embedding_multiplier":12,"attention_multiplier":0.25,"residual_multiplier":0.5,"logits_scaling":8,"mlp_bias":true}`,
			func(c *Config) bool {
				return c.EmbedScale == 12 && c.AttnScale == 0.25 && c.ResidualScale == 0.5 && c.LogitsScaling == 8 && c.MLPBias
			}, ""},
		{"granite defaults", `{"model_type":"granite",` + dims + `}`, func(c *Config) bool {
			return c.EmbedScale == 1 && c.AttnScale == 1 && c.ResidualScale == 1 && c.LogitsScaling == 1
		}, ""},
		{"starcoder2 layer norms, biases, ties", `{"model_type":"starcoder2",` + dims + `}`, func(c *Config) bool {
			return c.LayerNorm && c.PlainMLP && c.AttnBias && c.OBias && c.MLPBias && c.TieEmbeddings && c.RMSNormEps == 1e-5 && c.HiddenAct == "gelu_pytorch_tanh"
		}, ""},
		{"starcoder2 use_bias false", `{"model_type":"starcoder2",` + dims + `,"use_bias":false,"norm_epsilon":1e-3}`, func(c *Config) bool {
			return !c.AttnBias && !c.OBias && !c.MLPBias && c.RMSNormEps == 1e-3
		}, ""},
		{"qwen2_moe defaults", `{"model_type":"qwen2_moe",` + dims + `}`, func(c *Config) bool {
			return c.Experts == 60 && c.TopK == 4 && c.MoEIntermediate == 1408 && c.SharedIntermediate == 5632 && c.AttnBias && !c.OBias && !c.NormTopK
		}, ""},
		{"qwen2_moe qkv_bias", `{"model_type":"qwen2_moe",` + dims + `,"qkv_bias":false,"num_experts":4,"num_experts_per_tok":2}`, func(c *Config) bool {
			return !c.AttnBias && c.Experts == 4
		}, ""},
		{"stablelm defaults", `{"model_type":"stablelm",` + dims + `}`, func(c *Config) bool {
			return c.LayerNorm && !c.PlainMLP && !c.AttnBias && !c.OBias && !c.HeadLayerNorm && !c.ParallelResidual && c.RMSNormEps == 1e-5 && c.Rope.rotaryDim == 4
		}, ""},
		{"stablelm options", `{"model_type":"stablelm",` + dims + `,"use_qkv_bias":true,"qk_layernorm":true,"use_parallel_residual":true,"partial_rotary_factor":0.5}`,
			func(c *Config) bool {
				return c.AttnBias && !c.OBias && c.HeadLayerNorm && c.ParallelResidual && c.Rope.rotaryDim == 8
			}, ""},
		{"deepseek_v3 defaults", `{"model_type":"deepseek_v3",` + dims + `}`, func(c *Config) bool {
			a := c.MLA
			return a != nil && a.QLoraRank == 1536 && a.KVLoraRank == 512 && a.NopeDim == 128 && a.RopeDim == 64 && a.VDim == 128 && a.Interleave &&
				c.HeadDim == 64 && c.KVHeads == c.Heads && c.Experts == 256 && c.TopK == 8 && c.Groups == 8 && c.TopKGroups == 4 &&
				c.RoutedScale == 2.5 && c.NormTopK && c.SharedIntermediate == 2048 && !c.MoELayer[1] && c.AttnScale == 1/math.Sqrt(192)
		}, ""},
		{"deepseek_v3 no q lora, yarn mscale", `{"model_type":"deepseek_v3",` + dims + `,"q_lora_rank":null,"n_routed_experts":8,"n_group":2,"topk_group":1,"num_experts_per_tok":2,"rope_parameters":{"rope_type":"yarn","factor":4,"mscale_all_dim":1,"original_max_position_embeddings":16}}`,
			func(c *Config) bool {
				ms := 0.1*math.Log(4) + 1
				return c.MLA.QLoraRank == 0 && math.Abs(c.AttnScale-ms*ms/math.Sqrt(192)) < 1e-15
			}, ""},
		{"deepseek_v3 groups that cannot hold the top-k", `{"model_type":"deepseek_v3",` + dims + `,"n_routed_experts":8,"n_group":4,"topk_group":1,"num_experts_per_tok":3}`, nil,
			"do not split into groups"},
		{"llama partial rotary refused", `{"model_type":"llama",` + dims + `,"partial_rotary_factor":0.5}`, nil, "partial_rotary_factor 0.5 is not supported for llama"},
		{"odd rotary dimension", `{"model_type":"phi3",` + dims + `,"partial_rotary_factor":0.6}`, nil, "must be even"},
		{"unknown activation", `{"model_type":"gemma",` + dims + `,"hidden_act":"relu"}`, nil, `hidden activation "relu" is not supported`},
		{"unsupported family lists the supported", `{"model_type":"falcon","architectures":["FalconForCausalLM"]}`, nil,
			"(FalconForCausalLM) is not supported by the forward pass (supported: deepseek_v3, gemma, gemma2, gemma3_text, gpt_oss, granite, llama, mistral, mixtral, olmo2, phi3, qwen2, qwen2_moe, qwen3, qwen3_moe, stablelm, starcoder2)"},
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
