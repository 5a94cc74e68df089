package forward

import (
	"fmt"
	"maps"
	"math"
)

// Rope is a rotary embedding: the inverse frequencies of each rotated pair and the factor
// applied to cos and sin, computed as transformers' modeling_rope_utils does.
type Rope struct {
	Type            string
	Theta           float64
	params          map[string]any
	maxPos          int
	rotaryDim       int // the rotated part of each head (head_dim × partial_rotary_factor)
	AttentionFactor float64
}

// ropeOpts are a family's rotary defaults, as its config class applies them.
type ropeOpts struct {
	headDim int
	// partial is the default partial_rotary_factor (0: 1), partialKeys the config fields
	// that set it besides partial_rotary_factor (GPT-NeoX's rotary_pct).
	partial     float64
	partialKeys []string
	// partialOK: the modeling code rotates part of each head when the factor is below 1;
	// elsewhere (Llama's) a factor below 1 fails in transformers and is refused.
	partialOK bool
	// thetaKeys are config fields that set rope_theta besides rope_theta (rotary_emb_base).
	thetaKeys []string
	// longropeAliases: rope types "su" and "yarn" mean longrope (Phi-3's config class).
	longropeAliases bool
	// params are the rope_parameters the config class sets when config.json has none
	// (gpt-oss' yarn).
	params map[string]any
}

// ropeParams is the configuration's rope parameter dict, as RotaryEmbeddingConfigMixin's
// convert_rope_params_to_dict finds it: legacy rope_scaling wins over rope_parameters.
func (g *getter) ropeParams(o ropeOpts) map[string]any {
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		if v, ok := g.lookup(key); ok {
			if m, ok := v.(map[string]any); ok && len(m) > 0 {
				return maps.Clone(m)
			}
		}
	}
	if o.params != nil {
		return maps.Clone(o.params)
	}
	return map[string]any{}
}

// ropeTheta is the configuration's top-level rope_theta (or a legacy alias), else the
// class's default_theta.
func (g *getter) ropeTheta(o ropeOpts, def float64) float64 {
	for _, k := range append([]string{"rope_theta"}, o.thetaKeys...) {
		if v, ok := g.lookup(k); ok && v != nil {
			return g.float(k, def)
		}
	}
	return def
}

// rope resolves the rotary embedding of a family with one rope for every layer.
func (g *getter) rope(o ropeOpts) (*Rope, error) {
	return g.resolveRope(g.ropeParams(o), o, g.theta(""))
}

// layerRopes resolves one rotary embedding per layer type when rope_parameters holds a dict
// per type ({"full_attention": {...}, "sliding_attention": {...}}, as standardize_rope_params
// keeps them), else the one rope for all. thetas gives each type's default theta.
func (g *getter) layerRopes(o ropeOpts, thetas map[string]float64) (map[string]*Rope, error) {
	rp := g.ropeParams(o)
	per := map[string]map[string]any{}
	for lt := range thetas {
		if d, ok := rp[lt].(map[string]any); ok {
			per[lt] = maps.Clone(d)
		}
	}
	out := map[string]*Rope{}
	for lt, th := range thetas {
		d := per[lt]
		if len(per) == 0 {
			d = maps.Clone(rp)
		} else if d == nil {
			d = map[string]any{}
		}
		r, err := g.resolveRope(d, o, th)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", lt, err)
		}
		out[lt] = r
	}
	return out, nil
}

// resolveRope completes one rope parameter dict as standardize_rope_params does (type,
// theta, partial factor, original_max_position_embeddings) and checks it.
func (g *getter) resolveRope(rp map[string]any, o ropeOpts, defTheta float64) (*Rope, error) {
	if v, ok := rp["rope_theta"]; !ok || v == nil {
		rp["rope_theta"] = g.ropeTheta(o, defTheta)
	}
	typ, _ := rp["rope_type"].(string)
	if typ == "" {
		typ, _ = rp["type"].(string)
	}
	if typ == "" {
		typ = "default"
	}
	if o.longropeAliases && (typ == "su" || typ == "yarn") {
		typ = "longrope"
	}
	maxPos := g.int("max_position_embeddings", 0)
	switch typ {
	case "llama3", "yarn", "longrope":
		if g.has("original_max_position_embeddings") {
			rp["original_max_position_embeddings"] = float64(g.int("original_max_position_embeddings", 0))
		} else if _, ok := rp["original_max_position_embeddings"]; !ok {
			rp["original_max_position_embeddings"] = float64(maxPos)
		}
	case "default", "linear", "dynamic":
	default:
		return nil, fmt.Errorf("rope type %q is not supported (default, linear, dynamic, yarn, longrope, llama3)", typ)
	}
	// The factor: a declared partial_rotary_factor field of the config class wins (the
	// attribute standardize_rope_params copies over the dict's); otherwise the dict's own
	// (convert_rope_params_to_dict only sets a default), then a top-level field (or a
	// legacy one such as rotary_pct), then the class default.
	factor, set := 0.0, false
	if g.cls != nil {
		if _, declared := g.cls.Defaults["partial_rotary_factor"]; declared {
			if v := g.value("partial_rotary_factor"); v != nil {
				factor, set = g.float("partial_rotary_factor", 1), true
			}
		}
	}
	if !set {
		if f, ok := rp["partial_rotary_factor"].(float64); ok {
			factor, set = f, true
		}
	}
	if !set {
		for _, k := range append([]string{"partial_rotary_factor"}, o.partialKeys...) {
			if v, ok := g.lookup(k); ok && v != nil {
				factor, set = g.float(k, 1), true
				break
			}
		}
	}
	if !set {
		factor = o.partial
		if factor == 0 {
			factor = 1
		}
	}
	if !(factor > 0 && factor <= 1) {
		return nil, fmt.Errorf("partial_rotary_factor %g must be in (0, 1]", factor)
	}
	if factor != 1 && !o.partialOK {
		return nil, fmt.Errorf("partial_rotary_factor %g is not supported for %s (its modeling code rotates whole heads)", factor, g.modelType())
	}
	theta, ok := rp["rope_theta"].(float64)
	if !ok || theta <= 1 {
		return nil, fmt.Errorf("rope_theta %v must be a number above 1", rp["rope_theta"])
	}
	if o.headDim <= 0 || o.headDim > maxHeadDim {
		return nil, fmt.Errorf("head dimension %d out of range", o.headDim)
	}
	// int(head_dim * partial_rotary_factor), as modeling_rope_utils computes it.
	dim := int(float64(o.headDim) * factor)
	if dim%2 != 0 || dim == 0 {
		return nil, fmt.Errorf("rotary dimension %d (of head_dim %d) must be even and positive", dim, o.headDim)
	}
	r := &Rope{Type: typ, Theta: theta, params: rp, maxPos: maxPos, rotaryDim: dim}
	if _, err := r.InvFreq(1); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Rope) num(key string, def float64, required bool) (float64, error) {
	v, ok := r.params[key]
	if !ok || v == nil {
		if required {
			return 0, fmt.Errorf("rope %s needs %s", r.Type, key)
		}
		return def, nil
	}
	f, ok := v.(float64)
	if !ok {
		return 0, fmt.Errorf("rope parameter %s is %v, not a number", key, v)
	}
	return f, nil
}

// powers returns base^(2i/dim) for i < dim/2 in float32, as
// `base ** (torch.arange(0, dim, 2).float() / dim)`.
func powers(base float64, dim int) []float32 {
	p := make([]float32, dim/2)
	for i := range p {
		e := float32(2*i) / float32(dim)
		p[i] = float32(math.Pow(base, float64(e)))
	}
	return p
}

// InvFreq returns the inverse frequencies for a sequence of seqLen positions (dynamic and
// longrope scaling depend on it) and sets AttentionFactor, the scale of cos and sin.
func (r *Rope) InvFreq(seqLen int) ([]float32, error) {
	dim := r.rotaryDim
	r.AttentionFactor = 1
	pw := powers(r.Theta, dim)
	inv := make([]float32, len(pw))
	for i, p := range pw {
		inv[i] = 1 / p
	}
	switch r.Type {
	case "default":
	case "linear":
		f, err := r.num("factor", 0, true)
		if err != nil {
			return nil, err
		}
		for i := range inv {
			inv[i] /= float32(f)
		}
	case "dynamic":
		if alpha, _ := r.num("alpha", 0, false); alpha != 0 && seqLen <= r.maxPos {
			// HunYuan's NTK-alpha rope: theta·alpha^(d/(d−2)), until the sequence outgrows
			// max_position_embeddings and dynamic_rope_update recomputes it as plain dynamic.
			base := r.Theta * math.Pow(alpha, float64(dim)/float64(dim-2))
			for i, p := range powers(base, dim) {
				inv[i] = 1 / p
			}
			break
		}
		f, err := r.num("factor", 0, true)
		if err != nil {
			return nil, err
		}
		seq := float64(max(seqLen, r.maxPos))
		mp := float64(r.maxPos)
		if mp <= 0 {
			return nil, fmt.Errorf("dynamic rope needs max_position_embeddings")
		}
		base := r.Theta * math.Pow(f*seq/mp-(f-1), float64(dim)/float64(dim-2))
		for i, p := range powers(base, dim) {
			inv[i] = 1 / p
		}
	case "llama3":
		var v [4]float64
		for i, k := range []string{"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"} {
			f, err := r.num(k, 0, true)
			if err != nil {
				return nil, err
			}
			v[i] = f
		}
		factor, low, high, old := float32(v[0]), v[1], v[2], v[3]
		lowWave, highWave := float32(old/low), float32(old/high)
		for i, f := range inv {
			wave := float32(2*math.Pi) / f
			l := f
			if wave > lowWave {
				l = f / factor
			}
			smooth := (float32(old)/wave - float32(low)) / float32(high-low)
			smoothed := (1-smooth)*l/factor + smooth*l
			if !(wave < highWave) && !(wave > lowWave) {
				l = smoothed
			}
			inv[i] = l
		}
	case "yarn":
		return r.yarn(pw)
	case "longrope":
		return r.longrope(pw, seqLen)
	}
	return inv, nil
}

func (r *Rope) yarn(pw []float32) ([]float32, error) {
	dim := r.rotaryDim
	orig, err := r.num("original_max_position_embeddings", 0, true)
	if err != nil {
		return nil, err
	}
	factor, err := r.num("factor", 0, false)
	if err != nil {
		return nil, err
	}
	if factor == 0 {
		factor = float64(r.maxPos) / orig
	}
	mscale, _ := r.num("mscale", 0, false)
	mscaleAll, _ := r.num("mscale_all_dim", 0, false)
	getMscale := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	if af, ok := r.params["attention_factor"].(float64); ok {
		r.AttentionFactor = af
	} else if mscale != 0 && mscaleAll != 0 {
		r.AttentionFactor = getMscale(factor, mscale) / getMscale(factor, mscaleAll)
	} else {
		r.AttentionFactor = getMscale(factor, 1)
	}
	betaFast, _ := r.num("beta_fast", 0, false)
	betaSlow, _ := r.num("beta_slow", 0, false)
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	truncate := true
	if t, ok := r.params["truncate"].(bool); ok {
		truncate = t
	}
	corr := func(rot float64) float64 {
		return float64(dim) * math.Log(orig/(rot*2*math.Pi)) / (2 * math.Log(r.Theta))
	}
	low, high := corr(betaFast), corr(betaSlow)
	if truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = max(low, 0), min(high, float64(dim-1))
	if low == high {
		high += 0.001
	}
	inv := make([]float32, len(pw))
	for i, p := range pw {
		extra := 1 / p
		inter := 1 / (float32(factor) * p)
		ramp := (float32(i) - float32(low)) / float32(high-low)
		ramp = min(max(ramp, 0), 1)
		ef := 1 - ramp
		inv[i] = inter*(1-ef) + extra*ef
	}
	return inv, nil
}

func (r *Rope) longrope(pw []float32, seqLen int) ([]float32, error) {
	orig, err := r.num("original_max_position_embeddings", 0, true)
	if err != nil {
		return nil, err
	}
	factor, err := r.num("factor", 0, false)
	if err != nil {
		return nil, err
	}
	if factor == 0 {
		factor = float64(r.maxPos) / orig
	}
	if af, ok := r.params["attention_factor"].(float64); ok {
		r.AttentionFactor = af
	} else if factor > 1 {
		r.AttentionFactor = math.Sqrt(1 + math.Log(factor)/math.Log(orig))
	}
	key := "short_factor"
	if float64(seqLen) > orig {
		key = "long_factor"
	}
	list, ok := r.params[key].([]any)
	if !ok || len(list) != len(pw) {
		return nil, fmt.Errorf("longrope %s must list %d numbers", key, len(pw))
	}
	inv := make([]float32, len(pw))
	for i, v := range list {
		f, ok := v.(float64)
		if !ok {
			return nil, fmt.Errorf("longrope %s[%d] is %v, not a number", key, i, v)
		}
		inv[i] = 1 / (float32(f) * pw[i])
	}
	return inv, nil
}
