package forward

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// family is how one model_type computes: which pieces its decoder layers have and the
// transformers defaults of the config fields it reads.
type family struct {
	modelType    string
	defaultTheta float64
	// headDim is the default head_dim when config.json has none (0: hidden/heads).
	headDim int
	// attnBias, oBias: whether q/k/v and o projections have biases by default (the config's
	// attention_bias overrides both for families that read it).
	attnBias, oBias, readsAttnBias bool
	qkNorm                         bool // per-head RMSNorm of q and k before RoPE (Qwen3)
	sinks                          bool // learned attention-sink logit per head (gpt-oss)
	moe                            moeKind
	// windowAll: sliding_window applies to every layer when set (Mistral); otherwise
	// layer_types decides.
	windowAll bool
	// qwenWindow: sliding_window counts only when use_sliding_window, and layer_types
	// defaults to sliding from max_window_layers on (Qwen2, Qwen3).
	qwenWindow bool
	// gptOssLayers: layer_types defaults to sliding on even layers (gpt-oss).
	gptOssLayers bool
	// defaultRope is the rope_parameters the config class sets when config.json has none.
	defaultRope map[string]any
	// gemma is 1, 2 or 3 for Gemma's decoder: embeddings scaled by √hidden, RMSNorm weights
	// applied as (1 + w), GELU-tanh by default; Gemma 2 adds norms around both blocks,
	// query_pre_attn_scalar and logit soft-capping; Gemma 3 adds q/k norms and a rope of
	// its own for sliding layers.
	gemma int
	// slidingPattern: without layer_types, every pattern-th layer is full attention and
	// the others sliding (Gemma); 0 for none.
	slidingPattern int
	// eps is the default rms_norm_eps (0: 1e-6); tie the default tie_word_embeddings.
	eps float64
	tie bool
	// defaultWindow is the sliding_window when config.json has no such key (Mistral's 4096).
	defaultWindow int
	// qkNormFull: q and k RMSNorms span the whole projection (all heads), before the heads
	// are split (OLMo 2), rather than one head.
	qkNormFull bool
	// postNorms: no norm before attention or MLP; each block's output is normalized before
	// it joins the residual (OLMo 2).
	postNorms bool
	// fused: q/k/v stored as one self_attn.qkv_proj and gate/up as one mlp.gate_up_proj
	// (Phi-3), split by rows on load.
	fused bool
	// granite reads embedding_multiplier, attention_multiplier, residual_multiplier and
	// logits_scaling (Granite).
	granite bool
	// starcoder2: LayerNorm with biases (norm_epsilon), an ungated c_fc/c_proj MLP, and
	// use_bias for every projection's bias (StarCoder2).
	starcoder2 bool
	// mla: DeepSeek's multi-head latent attention (q_a/q_b or q_proj, kv_a_proj_with_mqa,
	// kv_b_proj; rope on qk_rope_head_dim of each head, one rotated key shared by all).
	mla bool
	// stablelm: LayerNorms (layer_norm_eps), partial rotary 0.25 by default, use_qkv_bias,
	// qk_layernorm (a LayerNorm per head, each with its own weight) and
	// use_parallel_residual (StableLM).
	stablelm bool
	// qkvBiasKey names the config field (default attnBias) that sets q/k/v biases alone,
	// o_proj having none: qkv_bias (Qwen2-MoE), use_qkv_bias (StableLM).
	qkvBiasKey string
	// readsMLPBias: the config's mlp_bias adds biases to gate/up/down (Llama, Granite).
	readsMLPBias bool
	// longropeAliases: rope types "su" and "yarn" mean longrope (Phi-3's config class).
	longropeAliases bool
	// partialRotary: the modeling code rotates only the first partial_rotary_factor of each
	// head (Phi-3); elsewhere a partial factor is refused.
	partialRotary bool
}

type moeKind int

const (
	moeNone moeKind = iota
	moeQwen3
	moeGptOss
	// moeMixtral: softmax over all experts, top-k renormalized; every layer; experts named
	// block_sparse_moe.experts.N.w1/w3/w2 (released checkpoints) or stacked under mlp.
	moeMixtral
	// moeQwen2: Qwen3's routing plus a shared expert gated by sigmoid(shared_expert_gate).
	moeQwen2
	// moeDeepSeek: sigmoid scores, group-limited top-k with a score-correction bias, the
	// chosen scores renormalized and scaled by routed_scaling_factor, plus shared experts;
	// the first first_k_dense_replace layers dense (DeepSeek-V3).
	moeDeepSeek
)

// families lists the supported model_type values.
var families = map[string]*family{
	"llama":       {modelType: "llama", defaultTheta: 10000, readsAttnBias: true, readsMLPBias: true},
	"mistral":     {modelType: "mistral", defaultTheta: 10000, windowAll: true, defaultWindow: 4096},
	"qwen2":       {modelType: "qwen2", defaultTheta: 10000, attnBias: true, qwenWindow: true},
	"qwen3":       {modelType: "qwen3", defaultTheta: 10000, headDim: 128, readsAttnBias: true, qkNorm: true, qwenWindow: true},
	"qwen2_moe":   {modelType: "qwen2_moe", defaultTheta: 10000, attnBias: true, qkvBiasKey: "qkv_bias", qwenWindow: true, moe: moeQwen2},
	"qwen3_moe":   {modelType: "qwen3_moe", defaultTheta: 10000, readsAttnBias: true, qkNorm: true, qwenWindow: true, moe: moeQwen3},
	"mixtral":     {modelType: "mixtral", defaultTheta: 1e6, windowAll: true, moe: moeMixtral, eps: 1e-5},
	"phi3":        {modelType: "phi3", defaultTheta: 10000, windowAll: true, fused: true, partialRotary: true, longropeAliases: true, eps: 1e-5},
	"olmo2":       {modelType: "olmo2", defaultTheta: 10000, readsAttnBias: true, qkNorm: true, qkNormFull: true, postNorms: true, eps: 1e-5},
	"deepseek_v3": {modelType: "deepseek_v3", defaultTheta: 10000, readsAttnBias: true, mla: true, moe: moeDeepSeek},
	"stablelm":    {modelType: "stablelm", defaultTheta: 10000, partialRotary: true, stablelm: true, qkvBiasKey: "use_qkv_bias"},
	"starcoder2":  {modelType: "starcoder2", defaultTheta: 10000, windowAll: true, starcoder2: true, tie: true},
	"granite":     {modelType: "granite", defaultTheta: 10000, readsAttnBias: true, readsMLPBias: true, granite: true},
	"gpt_oss": {modelType: "gpt_oss", defaultTheta: 150000, headDim: 64, attnBias: true, oBias: true, readsAttnBias: true,
		sinks: true, moe: moeGptOss, gptOssLayers: true, eps: 1e-5, defaultWindow: 128,
		defaultRope: map[string]any{"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
			"truncate": false, "original_max_position_embeddings": 4096.0}},
	"gemma":       {modelType: "gemma", defaultTheta: 10000, headDim: 256, readsAttnBias: true, gemma: 1, tie: true},
	"gemma2":      {modelType: "gemma2", defaultTheta: 10000, headDim: 256, readsAttnBias: true, gemma: 2, slidingPattern: 2, tie: true, defaultWindow: 4096},
	"gemma3_text": {modelType: "gemma3_text", defaultTheta: 1e6, headDim: 256, readsAttnBias: true, qkNorm: true, gemma: 3, slidingPattern: 6, tie: true, defaultWindow: 4096},
}

// Supported lists the model_type values the forward pass runs, sorted.
func Supported() []string {
	var s []string
	for k := range families {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// Config is what the forward pass reads from a checkpoint's config.json, with transformers'
// defaults filled in for the fields it omits.
type Config struct {
	ModelType       string `json:"model_type"`
	Hidden          int    `json:"hidden_size"`
	Intermediate    int    `json:"intermediate_size"`
	Layers          int    `json:"num_hidden_layers"`
	Heads           int    `json:"num_attention_heads"`
	KVHeads         int    `json:"num_key_value_heads"`
	HeadDim         int    `json:"head_dim"`
	Vocab           int    `json:"vocab_size"`
	MaxPositions    int    `json:"max_position_embeddings"`
	RMSNormEps      float64
	HiddenAct       string
	TieEmbeddings   bool
	AttnBias, OBias bool
	MLPBias         bool
	QKNorm          bool
	Sinks           bool
	// Window is the sliding-window length of the layers where Sliding[i] is set.
	Window  int
	Sliding []bool
	// Rope is the rotary embedding of every layer, or of the full-attention layers when
	// RopeLocal is set (Gemma 3's sliding layers).
	Rope      Rope
	RopeLocal *Rope
	// Gemma: EmbedScale multiplies the embeddings (0: none); NormPlusOne applies RMSNorm
	// weights as 1 + w; Sandwich adds post-attention, pre- and post-feedforward norms.
	EmbedScale            float32
	NormPlusOne, Sandwich bool
	// Granite: ResidualScale multiplies each block's output before it joins the residual
	// and LogitsScaling divides the logits (0: none).
	ResidualScale, LogitsScaling float32
	// QKNormFull: the q/k norms span the whole projection (OLMo 2); PostNorms: blocks are
	// normalized after, not before (OLMo 2); Fused: qkv_proj and gate_up_proj (Phi-3).
	QKNormFull, PostNorms, Fused bool
	// LayerNorm: block norms are LayerNorms with biases, eps in RMSNormEps; PlainMLP: an
	// ungated MLP (StarCoder2).
	LayerNorm, PlainMLP bool
	// HeadLayerNorm: q and k normalized by a bias-free LayerNorm per head, each head its own
	// weight (StableLM's qk_layernorm); ParallelResidual: x + attn(ln(x)) + mlp(ln(x)) with
	// one norm (StableLM's use_parallel_residual).
	HeadLayerNorm, ParallelResidual bool
	// AttnScale multiplies the attention scores (head_dim^-0.5, or
	// query_pre_attn_scalar^-0.5); AttnSoftcap and FinalSoftcap cap scores and logits as
	// cap·tanh(x/cap) (0: none).
	AttnScale, AttnSoftcap, FinalSoftcap float64
	// MoE: Experts experts per MoE layer, TopK routed per token; MoELayer[i] says which
	// layers are MoE; MoEIntermediate is an expert's hidden size.
	Experts, TopK, MoEIntermediate int
	NormTopK                       bool
	// SharedIntermediate is the shared expert's hidden size (Qwen2-MoE, DeepSeek-V3; 0: none).
	SharedIntermediate int
	// DeepSeek-V3's routing: Groups expert groups of which TopKGroups are kept per token,
	// the weights scaled by RoutedScale.
	Groups, TopKGroups int
	RoutedScale        float32
	// MLA is DeepSeek's multi-head latent attention (nil for the others).
	MLA      *MLA
	MoELayer []bool

	fam *family
}

// MLA is the shape of DeepSeek's multi-head latent attention: queries through a rank
// QLoraRank bottleneck (0: a plain q_proj), keys and values from a KVLoraRank latent, each
// head's query and key NopeDim unrotated plus RopeDim rotated features (the rotated key
// shared by all heads), values VDim per head. Interleave: the rotated features are
// interleaved pairs (rope_interleave).
type MLA struct {
	QLoraRank, KVLoraRank, NopeDim, RopeDim, VDim int
	Interleave                                    bool
}

// Rope is the rotary embedding of the model: the inverse frequencies of each rotated pair
// and the factor applied to cos and sin, computed as transformers' modeling_rope_utils does.
type Rope struct {
	Type            string
	Theta           float64
	params          map[string]any
	maxPos          int
	rotaryDim       int // the rotated part of each head (head_dim × partial_rotary_factor)
	AttentionFactor float64
}

// ParseConfig reads config.json.
func ParseConfig(data []byte) (*Config, error) {
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	mt, _ := raw["model_type"].(string)
	fam, ok := families[mt]
	if !ok {
		arch := ""
		if a, ok := raw["architectures"].([]any); ok && len(a) > 0 {
			arch, _ = a[0].(string)
		}
		what := fmt.Sprintf("model_type %q", mt)
		if arch != "" {
			what += fmt.Sprintf(" (%s)", arch)
		}
		return nil, fmt.Errorf("config.json: %s is not supported by the forward pass (supported: %s)", what, strings.Join(Supported(), ", "))
	}
	g := &getter{raw: raw}
	c := &Config{ModelType: mt, fam: fam}
	c.Hidden = g.int("hidden_size", 0)
	c.Intermediate = g.int("intermediate_size", 0)
	c.Layers = g.int("num_hidden_layers", 0)
	c.Heads = g.int("num_attention_heads", 0)
	c.KVHeads = g.int("num_key_value_heads", c.Heads)
	c.Vocab = g.int("vocab_size", 0)
	c.MaxPositions = g.int("max_position_embeddings", 0)
	c.HeadDim = g.int("head_dim", fam.headDim)
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	eps := fam.eps
	if eps == 0 {
		eps = 1e-6
	}
	c.RMSNormEps = g.float("rms_norm_eps", eps)
	c.HiddenAct = g.str("hidden_act", "silu")
	c.AttnScale = 1 / math.Sqrt(float64(c.HeadDim))
	if fam.gemma == 1 {
		// Gemma 1 reads hidden_act only (transformers 5), whose default is the tanh GELU.
		c.HiddenAct = g.str("hidden_act", "gelu_pytorch_tanh")
		c.EmbedScale = float32(math.Sqrt(float64(c.Hidden)))
		c.NormPlusOne = true
	}
	if fam.gemma >= 2 {
		c.HiddenAct = g.str("hidden_activation", g.str("hidden_act", "gelu_pytorch_tanh"))
		c.EmbedScale = float32(math.Sqrt(float64(c.Hidden)))
		c.NormPlusOne, c.Sandwich = true, true
		c.AttnScale = 1 / math.Sqrt(g.float("query_pre_attn_scalar", 256))
		caps := map[int][2]float64{2: {50, 30}, 3: {0, 0}}[fam.gemma]
		c.AttnSoftcap = g.nullableFloat("attn_logit_softcapping", caps[0])
		c.FinalSoftcap = g.nullableFloat("final_logit_softcapping", caps[1])
		if g.bool("use_bidirectional_attention", false) {
			return nil, fmt.Errorf("config.json: use_bidirectional_attention is not supported")
		}
	}
	if fam.granite {
		c.EmbedScale = float32(g.float("embedding_multiplier", 1))
		c.AttnScale = g.float("attention_multiplier", 1)
		c.ResidualScale = float32(g.float("residual_multiplier", 1))
		c.LogitsScaling = float32(g.float("logits_scaling", 1))
	}
	c.QKNormFull, c.PostNorms, c.Fused = fam.qkNormFull, fam.postNorms, fam.fused
	if fam.stablelm {
		c.LayerNorm = true
		c.RMSNormEps = g.float("layer_norm_eps", 1e-5)
		c.HeadLayerNorm = g.bool("qk_layernorm", false)
		c.ParallelResidual = g.bool("use_parallel_residual", false)
	}
	if fam.starcoder2 {
		c.LayerNorm, c.PlainMLP = true, true
		c.RMSNormEps = g.float("norm_epsilon", 1e-5)
		c.HiddenAct = g.str("hidden_act", "gelu_pytorch_tanh")
	}
	c.TieEmbeddings = g.bool("tie_word_embeddings", fam.tie)
	c.AttnBias, c.OBias = fam.attnBias, fam.oBias
	if fam.readsAttnBias {
		c.AttnBias = g.bool("attention_bias", fam.attnBias)
		c.OBias = c.AttnBias
	}
	if fam.qkvBiasKey != "" {
		c.AttnBias, c.OBias = g.bool(fam.qkvBiasKey, fam.attnBias), false
	}
	c.MLPBias = fam.readsMLPBias && g.bool("mlp_bias", false)
	if fam.starcoder2 {
		b := g.bool("use_bias", true)
		c.AttnBias, c.OBias, c.MLPBias = b, b, b
	}
	c.QKNorm, c.Sinks = fam.qkNorm, fam.sinks
	if fam.mla {
		q := g.int("q_lora_rank", 1536)
		if v, ok := raw["q_lora_rank"]; ok && v == nil {
			q = 0
		}
		c.MLA = &MLA{QLoraRank: q, KVLoraRank: g.int("kv_lora_rank", 512), NopeDim: g.int("qk_nope_head_dim", 128),
			RopeDim: g.int("qk_rope_head_dim", 64), VDim: g.int("v_head_dim", 128), Interleave: g.bool("rope_interleave", true)}
		// Every head has its own key and value; the rope runs over qk_rope_head_dim, which
		// DeepseekV3Config sets as head_dim.
		c.KVHeads, c.HeadDim = c.Heads, c.MLA.RopeDim
		c.AttnScale = 1 / math.Sqrt(float64(c.MLA.NopeDim+c.MLA.RopeDim))
		for _, d := range []int{q, c.MLA.KVLoraRank, c.MLA.NopeDim, c.MLA.RopeDim, c.MLA.VDim} {
			if d < 0 || d > 1<<16 {
				return nil, fmt.Errorf("config.json: MLA dimension %d out of range", d)
			}
		}
		if c.MLA.KVLoraRank == 0 || c.MLA.RopeDim == 0 || c.MLA.VDim == 0 {
			return nil, fmt.Errorf("config.json: kv_lora_rank, qk_rope_head_dim and v_head_dim must be positive")
		}
	}
	if g.err != nil {
		return nil, g.err
	}
	// Bounds far above any released model keep a hostile config from sizing allocations.
	for _, f := range []struct {
		name string
		v    int
		max  int
	}{{"hidden_size", c.Hidden, 1 << 20}, {"num_hidden_layers", c.Layers, 1 << 14}, {"num_attention_heads", c.Heads, 1 << 14},
		{"num_key_value_heads", c.KVHeads, 1 << 14}, {"vocab_size", c.Vocab, 1 << 26}, {"head_dim", c.HeadDim, 1 << 16}} {
		if f.v <= 0 || f.v > f.max {
			return nil, fmt.Errorf("config.json: %s must be an integer from 1 to %d, got %d", f.name, f.max, f.v)
		}
	}
	if c.Intermediate < 0 || c.Intermediate > 1<<24 {
		return nil, fmt.Errorf("config.json: intermediate_size %d out of range", c.Intermediate)
	}
	if c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("config.json: num_attention_heads %d is not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	}
	if _, ok := activations[c.HiddenAct]; !ok && mt != "gpt_oss" {
		return nil, fmt.Errorf("config.json: hidden activation %q is not supported (gelu, gelu_pytorch_tanh, silu are)", c.HiddenAct)
	}
	if err := c.window(g); err != nil {
		return nil, err
	}
	if err := c.moe(g); err != nil {
		return nil, err
	}
	if err := c.rope(raw); err != nil {
		return nil, err
	}
	if c.MLA != nil && c.Rope.Type != "default" {
		// DeepseekV3Attention: scaling · mscale² with mscale = yarn_get_mscale(factor,
		// mscale_all_dim) when mscale_all_dim is set.
		mad, _ := c.Rope.params["mscale_all_dim"].(float64)
		f, _ := c.Rope.params["factor"].(float64)
		if mad != 0 {
			ms := 1.0
			if f > 1 {
				ms = 0.1*mad*math.Log(f) + 1
			}
			c.AttnScale = c.AttnScale * ms * ms
		}
	}
	return c, nil
}

// window sets the sliding-window layers as each family's config class does.
func (c *Config) window(g *getter) error {
	win := g.int("sliding_window", 0)
	if c.fam.qwenWindow && !g.bool("use_sliding_window", false) {
		win = 0
	}
	c.Sliding = make([]bool, c.Layers)
	if lt, ok := g.raw["layer_types"].([]any); ok && lt != nil {
		if len(lt) != c.Layers {
			return fmt.Errorf("config.json: layer_types has %d entries for %d layers", len(lt), c.Layers)
		}
		for i, t := range lt {
			switch t {
			case "sliding_attention":
				c.Sliding[i] = true
			case "full_attention":
			default:
				return fmt.Errorf("config.json: layer_types[%d] = %v is not supported (full_attention, sliding_attention)", i, t)
			}
		}
	} else {
		for i := range c.Sliding {
			switch {
			case c.fam.windowAll:
				c.Sliding[i] = true
			case c.fam.qwenWindow:
				c.Sliding[i] = win > 0 && i >= g.int("max_window_layers", 28)
			case c.fam.gptOssLayers:
				c.Sliding[i] = (i+1)%2 == 1
			case c.fam.slidingPattern > 0:
				p := g.int("sliding_window_pattern", c.fam.slidingPattern)
				c.Sliding[i] = p > 0 && (i+1)%p != 0
			}
		}
	}
	if c.fam.windowAll {
		// Mistral masks every layer when sliding_window is set, whatever layer_types says.
		for i := range c.Sliding {
			c.Sliding[i] = true
		}
	}
	if _, ok := g.raw["sliding_window"]; !ok {
		win = c.fam.defaultWindow
	}
	c.Window = win
	if win <= 0 {
		clear(c.Sliding)
	}
	return g.err
}

func (c *Config) moe(g *getter) error {
	switch c.fam.moe {
	case moeNone:
		return nil
	case moeQwen3, moeQwen2:
		// Qwen3MoeConfig's defaults, or Qwen2MoeConfig's.
		def := [3]int{128, 8, 768}
		if c.fam.moe == moeQwen2 {
			def = [3]int{60, 4, 1408}
			c.SharedIntermediate = g.int("shared_expert_intermediate_size", 5632)
		}
		c.Experts = g.int("num_experts", g.int("num_local_experts", def[0]))
		c.TopK = g.int("num_experts_per_tok", def[1])
		c.MoEIntermediate = g.int("moe_intermediate_size", def[2])
		c.NormTopK = g.bool("norm_topk_prob", false)
		step := g.int("decoder_sparse_step", 1)
		var only []int
		if l, ok := g.raw["mlp_only_layers"].([]any); ok {
			for _, v := range l {
				f, _ := v.(float64)
				only = append(only, int(f))
			}
		}
		c.MoELayer = make([]bool, c.Layers)
		for i := range c.MoELayer {
			c.MoELayer[i] = !slices.Contains(only, i) && c.Experts > 0 && step > 0 && (i+1)%step == 0
		}
	case moeMixtral:
		c.Experts = g.int("num_local_experts", 8)
		c.TopK = g.int("num_experts_per_tok", 2)
		c.MoEIntermediate = c.Intermediate
		c.NormTopK = true
		c.MoELayer = make([]bool, c.Layers)
		for i := range c.MoELayer {
			c.MoELayer[i] = true
		}
	case moeDeepSeek:
		c.Experts = g.int("n_routed_experts", 256)
		c.TopK = g.int("num_experts_per_tok", 8)
		c.MoEIntermediate = g.int("moe_intermediate_size", 2048)
		c.NormTopK = g.bool("norm_topk_prob", true)
		c.Groups = g.int("n_group", 8)
		c.TopKGroups = g.int("topk_group", 4)
		c.RoutedScale = float32(g.float("routed_scaling_factor", 2.5))
		c.SharedIntermediate = c.MoEIntermediate * g.int("n_shared_experts", 1)
		first := g.int("first_k_dense_replace", 3)
		c.MoELayer = make([]bool, c.Layers)
		for i := range c.MoELayer {
			c.MoELayer[i] = i >= first
		}
		if c.Groups <= 0 || c.Experts%c.Groups != 0 || c.Experts/c.Groups < 2 || c.TopKGroups <= 0 || c.TopKGroups > c.Groups ||
			c.TopK > c.TopKGroups*(c.Experts/c.Groups) {
			return fmt.Errorf("config.json: %d experts in n_group %d (topk_group %d, top-%d) do not split into groups of at least 2 holding the top-k",
				c.Experts, c.Groups, c.TopKGroups, c.TopK)
		}
	case moeGptOss:
		c.Experts = g.int("num_local_experts", 128)
		c.TopK = g.int("num_experts_per_tok", g.int("experts_per_token", 4))
		c.MoEIntermediate = c.Intermediate
		c.MoELayer = make([]bool, c.Layers)
		for i := range c.MoELayer {
			c.MoELayer[i] = true
		}
	}
	if g.err != nil {
		return g.err
	}
	if c.SharedIntermediate < 0 || c.SharedIntermediate > 1<<24 {
		return fmt.Errorf("config.json: shared_expert_intermediate_size %d out of range", c.SharedIntermediate)
	}
	if c.Experts > 1<<16 || c.MoEIntermediate < 0 || c.MoEIntermediate > 1<<24 {
		return fmt.Errorf("config.json: %d experts of size %d out of range", c.Experts, c.MoEIntermediate)
	}
	if c.TopK <= 0 || c.TopK > c.Experts {
		return fmt.Errorf("config.json: num_experts_per_tok %d must be between 1 and the %d experts", c.TopK, c.Experts)
	}
	return nil
}

// getter reads typed config fields with defaults, keeping the first type error.
type getter struct {
	raw map[string]any
	err error
}

func (g *getter) fail(key string, v any, want string) {
	if g.err == nil {
		g.err = fmt.Errorf("config.json: %s is %v, not %s", key, v, want)
	}
}

func (g *getter) int(key string, def int) int {
	v, ok := g.raw[key]
	if !ok || v == nil {
		return def
	}
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<40 {
		g.fail(key, v, "an integer")
		return def
	}
	return int(f)
}

func (g *getter) float(key string, def float64) float64 {
	v, ok := g.raw[key]
	if !ok || v == nil {
		return def
	}
	f, ok := v.(float64)
	if !ok {
		g.fail(key, v, "a number")
		return def
	}
	return f
}

// nullableFloat is float for a field where null means "none" (0) rather than the default.
func (g *getter) nullableFloat(key string, def float64) float64 {
	if v, ok := g.raw[key]; ok && v == nil {
		return 0
	}
	return g.float(key, def)
}

func (g *getter) bool(key string, def bool) bool {
	v, ok := g.raw[key]
	if !ok || v == nil {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		g.fail(key, v, "a boolean")
		return def
	}
	return b
}

func (g *getter) str(key, def string) string {
	v, ok := g.raw[key]
	if !ok || v == nil {
		return def
	}
	s, ok := v.(string)
	if !ok {
		g.fail(key, v, "a string")
		return def
	}
	return s
}
