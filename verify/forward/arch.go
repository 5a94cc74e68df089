package forward

// A decoder-only model is described as data: a Config is the composition of the variants the
// families of transformers differ by — the kind and placement of each norm, how attention
// projects, positions and masks, what the feed-forward block is, how a mixture of experts
// routes — with the name of every weight it reads. A family (families.go) is a function
// from config.json to a Config, and the forward pass (forward.go) and the weight loader
// (load.go) interpret any Config; neither knows a family by name.

// Config is a decoder described as data: the model's configuration as the forward pass
// runs it, built from config.json by the model_type's family with transformers' defaults.
type Config struct {
	ModelType string
	// Hidden is the residual stream's width, Vocab the vocabulary, Layers the decoder
	// layers; MaxPositions is max_position_embeddings (0: unknown).
	Hidden, Vocab, Layers, MaxPositions int

	// Base is the decoder's module prefix in the causal-LM model's state dict ("model.",
	// "transformer.", "gpt_neox."); the weight names below are full state-dict names, and
	// a checkpoint of the bare decoder (its names without Base, as GPT-2's releases store
	// them) is read too.
	Base string
	// Embed is the token embedding [Vocab, EmbedDim]; EmbedDim 0 means Hidden. ProjIn maps
	// EmbedDim to Hidden after the lookup and ProjOut Hidden back to EmbedDim before the head
	// (OPT's word_embed_proj_dim).
	Embed           string
	EmbedDim        int
	ProjIn, ProjOut Linear
	// Positions is a learned absolute position embedding added to the token embedding
	// (GPT-2, OPT), nil for none.
	Positions *Positions
	// EmbedScale multiplies the embeddings (Gemma's √hidden, Granite's
	// embedding_multiplier; 0: none), rounded to float32 first as torch holds it.
	EmbedScale float32
	// EmbedNorm normalizes the embeddings before the first layer (Bloom).
	EmbedNorm *Norm
	Blocks    []*Block
	FinalNorm *Norm
	// HeadTransform runs between FinalNorm and Head (ModernBERT's prediction head: dense,
	// activation, norm); nil for none.
	HeadTransform *HeadTransform
	// Head is the vocabulary projection; a Head without a weight is tied to Embed (its bias,
	// if any, is still Head.B).
	Head Linear
	// LogitScale multiplies and LogitDiv divides the logits (Cohere's logit_scale,
	// Granite's logits_scaling; 0: none); FinalSoftcap caps them as cap·tanh(x/cap).
	LogitScale, LogitDiv float32
	FinalSoftcap         float64
	// MaxTokens bounds the sequence length where positions past it cannot be computed
	// (learned position tables; 0: no bound).
	MaxTokens int
}

// HeadTransform is Norm(Act(Dense(h))), applied to the final hidden states before the
// vocabulary projection.
type HeadTransform struct {
	Dense Linear
	Act   Act
	Norm  *Norm
}

// Positions is an absolute position embedding added to the token embedding at position p:
// row Offset+p of the learned table Weight (OPT offsets by 2), or, without a Weight, row
// Offset+p of the fixed sinusoidal table Sinusoid describes.
type Positions struct {
	Weight   string
	Offset   int
	Sinusoid Sinusoid
	// PadRow, when set, is a row of the sinusoidal table held at zero (XGLM's padding_idx).
	PadRow *int
}

// Sinusoid is a fixed sinusoidal position table.
type Sinusoid uint8

const (
	// NoSinusoid: the positions are learned (Weight).
	NoSinusoid Sinusoid = iota
	// Tensor2Tensor: [sin(p·f_i), cos(p·f_i)] with f_i = exp(−i·ln(10000)/(d/2 − 1)) (XGLM,
	// fairseq).
	Tensor2Tensor
	// Transformer: sines of p/10000^(2⌊i/2⌋/d) at even i, then cosines at odd i (CTRL).
	Transformer
)

// Linear is one projection y = x·Wᵀ + b: W [out, in] as nn.Linear stores it, or [in, out]
// when T (GPT-2's Conv1D). An empty W means no projection; an empty B no bias.
type Linear struct {
	W, B string
	T    bool
}

func (l Linear) ok() bool { return l.W != "" }

// NormKind is how a norm normalizes.
type NormKind uint8

const (
	// RMSNorm: x / sqrt(mean(x²) + eps) · w.
	RMSNorm NormKind = iota
	// LayerNorm: (x − mean) / sqrt(var + eps) · w + b (biased variance).
	LayerNorm
	// L2Norm: x / sqrt(mean(x²) + eps) without a weight (Llama 4's q/k norm).
	L2Norm
)

// Norm is one normalization. Weight empty means no learned scale (OLMo's non-parametric
// LayerNorm, OPT without elementwise_affine); PlusOne applies the weight as 1 + w (Gemma,
// Nemotron's LayerNorm1P).
type Norm struct {
	Kind         NormKind
	Weight, Bias string
	Eps          float64
	PlusOne      bool
}

// Residual is how a block joins its sublayers to the residual stream h.
type Residual uint8

const (
	// Sequential: h += attn(AttnNorm(h)); h += mlp(MLPNorm(h)).
	Sequential Residual = iota
	// Parallel: h += attn(AttnNorm(h)) + mlp(MLPNorm(h)), both from the same h; with no
	// MLPNorm the MLP takes AttnNorm's output too (GPT-J, Phi, Cohere, Falcon).
	Parallel
	// PostNorm: h = AttnNorm(h + attn(h)); h = MLPNorm(h + mlp(h)) (OPT with
	// do_layer_norm_before false).
	PostNorm
)

// Block is one decoder layer.
type Block struct {
	Residual Residual
	// AttnNorm and MLPNorm normalize each sublayer's input (nil: none); AttnOut and MLPOut
	// normalize its output before it joins the residual (Gemma 2's sandwich, OLMo 2's
	// post-norms).
	AttnNorm, MLPNorm, AttnOut, MLPOut *Norm
	// ResidualScale multiplies each sublayer's output before it joins the residual
	// (Granite's residual_multiplier; 0: none).
	ResidualScale float32
	// NormedResidual: the residual is the normalized input, not h (Bloom's
	// apply_residual_connection_post_layernorm).
	NormedResidual bool
	Attn           *Attention
	MLP            *MLP
	// SSM, when set, is the block's token mixer in place of Attn (Mamba); MLP may then be
	// nil (a block of the mixer alone).
	SSM *SSM
}

// SSM is Mamba's selective state-space mixer: In projects to x and a gate z (Inner each);
// x goes through a causal depthwise convolution of Conv taps (ConvW [Inner, 1, Conv],
// ConvB) and Act; XProj gives each position's time-step rank DtRank, B and C (State each),
// DtProj the time steps Δ = softplus(DtProj(·)); the state h [Inner, State] evolves as
// h = exp(Δ·A)·h + Δ·B·x with A = −exp(ALog), the output y = h·C + D·x, times Act(z), then
// Out. BCDtNorm > 0 RMS-normalizes the time-step rank, B and C without weights first
// (Falcon-Mamba's mixer_rms_eps).
type SSM struct {
	Inner, State, Conv, DtRank int
	In, XProj, DtProj, Out     Linear
	ConvW, ConvB, ALog, D      string
	Act                        Act
	BCDtNorm                   float64
}

// Attention is one self-attention sublayer.
type Attention struct {
	Heads, KVHeads, HeadDim int
	// VDim is a value head's width (0: HeadDim; MLA differs).
	VDim int
	QKV  QKV
	O    Linear
	// QNorm and KNorm normalize queries and keys (nil: none).
	QNorm, KNorm *HeadNorm
	// Rope rotates queries and keys (nil: no rotary embedding on this layer).
	Rope *RopeSpec
	// ALiBi are per-head slopes of a linear bias on key positions (nil: none).
	ALiBi []float32
	// Scale multiplies q·k (head_dim^-0.5 for most); Softcap caps the scaled scores as
	// cap·tanh(s/cap) (0: none).
	Scale, Softcap float64
	// Window limits each query to the Window most recent keys (0: full causal); Chunk to
	// keys in its own chunk of Chunk positions (Llama 4's chunked attention; 0: none).
	Window, Chunk int
	// Sinks names a learned per-head logit that joins each softmax and is dropped (gpt-oss).
	Sinks string
	// Clip clamps the projected q, k and v to ±Clip (OLMo's clip_qkv, MPT; 0: none), after
	// the q/k norms when ClipAfterNorm (OLMoE).
	Clip          float64
	ClipAfterNorm bool
	// Gate multiplies the attention output by sigmoid(Gate(x)) before O (none when unset;
	// AFMoE), or by softplus when GateSoftplus; GateHeads: one gate value per head, scaling
	// its whole context (Laguna's g_proj).
	Gate         Linear
	GateSoftplus bool
	GateHeads    bool
	// SubNorm normalizes the attention context (all heads together) before O (BitNet's
	// attn_sub_norm).
	SubNorm *Norm
	// TempTuning scales queries by a position-dependent factor (Llama 4's NoPE layers).
	TempTuning *TempTuning
	// MLA is DeepSeek's multi-head latent attention, in place of QKV.
	MLA *MLA
	// MoA is JetMoE's mixture of attention heads, in place of the query and output
	// projections.
	MoA *MoA
	// Diff is DiffLlama's differential attention (nil: none).
	Diff *DiffAttn
}

// DiffAttn is differential attention: query head h (of n, half = n/2) attends with the
// values of heads h mod half and half + h mod half side by side (2·HeadDim wide); head j <
// half's output is out_j − λ·out_{j+half}, RMS-normalized without weight (Eps) and scaled
// by 1 − Init, where λ = exp(Σ LambdaQ1·LambdaK1) − exp(Σ LambdaQ2·LambdaK2) + Init.
type DiffAttn struct {
	LambdaQ1, LambdaK1, LambdaQ2, LambdaK2 string
	Init, Eps                              float64
}

// MoA is JetMoE's mixture of attention heads: a router picks TopK of Experts experts per
// token (softmax over the chosen logits); slot s of a token's query heads is expert e_s's
// In projection ([E, KVHeads·HeadDim, H]); query head s·KVHeads + j attends with key/value
// head j (KV from the fused KV projection: keys, then values); each slot's context goes
// through its expert's Out ([E, H, KVHeads·HeadDim]), weighted, summed, plus Bias.
type MoA struct {
	Experts, TopK int
	Router        Linear
	In, Out, Bias string
	KV            Linear
}

// FusedLayout is how one fused projection's output rows hold queries, keys and values.
type FusedLayout uint8

const (
	// Concat: all query heads, then all key heads, then all value heads (Phi-3, GPT-2,
	// MPT, GPT-BigCode multi-query, Falcon multi-query).
	Concat FusedLayout = iota
	// PerHead: for each head its query, key and value (GPT-NeoX, Bloom, Persimmon,
	// GPT-BigCode and Falcon without multi-query).
	PerHead
	// Grouped: for each key/value head its group of query heads, then its key and value
	// (Falcon's new decoder architecture).
	Grouped
	// CodeGen: CodeGen's qkv_proj, in mp_num = 4 blocks each holding [q, v, k] of its heads.
	CodeGen
)

// QKV are the query, key and value projections: separate, or one fused weight.
type QKV struct {
	Q, K, V Linear
	Fused   Linear
	Layout  FusedLayout
}

// HeadNorm normalizes queries or keys.
type HeadNorm struct {
	Norm
	// Whole: one norm over the whole projection, all heads together (OLMo 2); otherwise one
	// per head over HeadDim.
	Whole bool
	// PerHead: each head has its own weight (and bias): Weight is [heads, HeadDim] or, when
	// it holds "%d", one tensor per head (StableLM's q_layernorm.norms.N).
	PerHead bool
	// AfterRope applies the norm to the rotated vectors (Llama 4).
	AfterRope bool
}

// RopeStyle is how a rotary embedding pairs the features of a head.
type RopeStyle uint8

const (
	// Halves rotates feature j with feature j + dim/2 (GPT-NeoX's rotate_half).
	Halves RopeStyle = iota
	// Pairs rotates features 2j and 2j+1 (GPT-J's rotate_every_two, Cohere, Llama 4).
	Pairs
	// PairsToHalves rotates pairs (2j, 2j+1) and writes the results de-interleaved, the
	// rotated evens then the odds (DeepSeek's rope_interleave).
	PairsToHalves
	// HalvesInverse rotates like Halves by the opposite angle (NanoChat's rotate_half is
	// cat(x2, −x1)).
	HalvesInverse
)

// RopeSpec is a layer's rotary embedding: the frequencies (Rope), which features they
// rotate (the first Rope.rotaryDim of each head) and how they pair.
type RopeSpec struct {
	Rope  *Rope
	Style RopeStyle
}

// TempTuning scales the queries at position p by log(floor((p+Offset)/Floor) + 1)·Scale +
// 1 (Llama 4's attention temperature tuning with Offset 1; Ministral 3's llama_4_scaling
// with Offset 0).
type TempTuning struct {
	Floor, Scale, Offset float64
}

// MLA is the shape and weights of DeepSeek's multi-head latent attention: queries through a
// rank QLoraRank bottleneck (QA, QANorm, QB; 0: a plain Q), keys and values from a
// KVLoraRank latent (KVA, KVANorm, KVB), each head's query and key NopeDim unrotated plus
// RopeDim rotated features (the rotated key shared by all heads), values VDim per head.
type MLA struct {
	QLoraRank, KVLoraRank, NopeDim, RopeDim, VDim int
	Q, QA, QB, KVA, KVB                           Linear
	QANorm, KVANorm                               *Norm
}

// GateUpLayout is how a fused gate/up projection's output rows hold the two.
type GateUpLayout uint8

const (
	// GateFirst: all gate rows, then all up rows (chunk(2)).
	GateFirst GateUpLayout = iota
	// Interleaved: gate and up alternate row by row (gpt-oss).
	Interleaved
	// UpFirst: all up rows, then all gate rows.
	UpFirst
)

// Act is an activation function: a name of transformers' ACT2FN, or GptOss's clamped
// gated SwiGLU ("gpt_oss_swiglu").
type Act string

// MLP is a feed-forward sublayer: dense (gated act(gate(x))·up(x), or act(up(x)) when
// there is no gate) or a mixture of experts (MoE set).
type MLP struct {
	Gate, Up, Down Linear
	// GateUp is a fused gate and up projection laid out as Layout.
	GateUp Linear
	Layout GateUpLayout
	// Inter is the hidden width.
	Inter int
	Act   Act
	// ActParams names the learned parameters of a parametric activation (Apertus' xIELU:
	// alpha_p, alpha_n, beta, eps).
	ActParams map[string]string
	// SubNorm normalizes the hidden activations before Down (BitNet's ffn_sub_norm).
	SubNorm *Norm
	MoE     *MoE
}

// Scoring is how a router turns logits into expert weights.
type Scoring uint8

const (
	// Softmax over all experts, then the top k (Mixtral, Qwen-MoE, OLMoE).
	Softmax Scoring = iota
	// Sigmoid of each logit, then the top k (DeepSeek-V3, GLM-4-MoE, MiniMax-M2).
	Sigmoid
	// TopKSoftmax: the top k logits, then a softmax over them (gpt-oss, Granite-MoE,
	// JetMoE).
	TopKSoftmax
	// TopKSigmoid: the top k logits, then their sigmoids (Llama 4).
	TopKSigmoid
	// SparseMixer: Phi-MoE's sparsemixer at inference (top-2, masked softmaxes with
	// jitter epsilon).
	SparseMixer
)

// MoE is a mixture-of-experts feed-forward block: a router choosing TopK of Experts
// experts per token, each expert a gated MLP of width Inter, plus optional shared experts.
type MoE struct {
	Experts, TopK, Inter int
	Router               Linear
	Scoring              Scoring
	// NormTopK renormalizes the chosen weights to sum to 1, dividing by the sum plus
	// NormEps, or by max(sum, NormEps) when NormClamp (ERNIE's moe_norm_min).
	NormTopK  bool
	NormEps   float32
	NormClamp bool
	// ScoreBias is added to the scores to choose experts, not to weight them (DeepSeek-V3's
	// e_score_correction_bias).
	ScoreBias string
	// Groups: experts in Groups groups, the TopKGroups best kept per token (a group scored
	// by the sum of its two best biased scores, or its best when GroupMax).
	Groups, TopKGroups int
	GroupMax           bool
	// RoutedScale multiplies the chosen weights (routed_scaling_factor; 0: none).
	RoutedScale float32
	// JitterEps is SparseMixer's router_jitter_noise threshold.
	JitterEps float64
	Act       Act
	Weights   ExpertWeights
	// Shared is an MLP every token runs, added to the experts' output; SharedGate, when
	// set, weights it by sigmoid(SharedGate(x)) (Qwen2-MoE); SharedAverage averages the
	// two rather than adding them (Cohere 2 MoE's "average").
	Shared        *MLP
	SharedGate    Linear
	SharedAverage bool
	// RouterSoftcap caps the router logits as cap·tanh(x/cap) before scoring (Laguna; 0:
	// none).
	RouterSoftcap float64
	// WeightInput multiplies each expert's input rather than its output by the routing
	// weight (Llama 4).
	WeightInput bool
	// Bias is added to the block's output (JetMoE).
	Bias string
}

// ExpertWeights are where a mixture of experts keeps its experts: stacked tensors (GateUp
// [E, 2·Inter, H] as Layout, Down [E, H, Inter]; [E, H, 2·Inter] and [E, Inter, H] when
// Transposed), or per-expert tensors named by patterns with "%d" for the expert. A
// checkpoint may hold either; the stacked names are tried first.
type ExpertWeights struct {
	GateUp, Down            string
	GateUpBias, DownBias    string
	Layout                  GateUpLayout
	Transposed              bool
	PerGate, PerUp, PerDown string
	PerGateUp               string
}
