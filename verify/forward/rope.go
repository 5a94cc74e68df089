package forward

import (
	"fmt"
	"maps"
	"math"
)

// rope resolves the rotary embedding parameters as transformers' RotaryEmbeddingConfigMixin
// does (convert_rope_params_to_dict, standardize_rope_params): legacy rope_scaling wins over
// rope_parameters, rope_theta falls back to the top level and then to the class default, and
// llama3/yarn/longrope take original_max_position_embeddings from the top level or
// max_position_embeddings.
func (c *Config) rope(raw map[string]any) error {
	if c.fam.gemma == 3 {
		return c.gemma3Rope(raw)
	}
	var rp map[string]any
	for _, key := range []string{"rope_scaling", "rope_parameters"} {
		if m, ok := raw[key].(map[string]any); ok && len(m) > 0 {
			rp = maps.Clone(m)
			break
		}
	}
	if rp == nil {
		rp = maps.Clone(c.fam.defaultRope)
	}
	if rp == nil {
		rp = map[string]any{}
	}
	if _, ok := rp["rope_theta"]; !ok {
		if t, ok := raw["rope_theta"]; ok {
			rp["rope_theta"] = t
		} else {
			rp["rope_theta"] = c.fam.defaultTheta
		}
	}
	r, err := c.resolveRope(raw, rp)
	if err != nil {
		return err
	}
	c.Rope = *r
	return nil
}

// gemma3Rope follows Gemma3TextConfig.convert_rope_params_to_dict: rope_parameters holds one
// dict per layer type; legacy rope_scaling updates the full-attention one, rope_theta
// (default 1e6) and rope_local_base_freq (default 1e4) give their thetas.
func (c *Config) gemma3Rope(raw map[string]any) error {
	per := map[string]map[string]any{}
	if m, ok := raw["rope_parameters"].(map[string]any); ok {
		for _, lt := range []string{"full_attention", "sliding_attention"} {
			if d, ok := m[lt].(map[string]any); ok {
				per[lt] = maps.Clone(d)
			}
		}
	}
	for _, lt := range []string{"full_attention", "sliding_attention"} {
		if per[lt] == nil {
			per[lt] = map[string]any{"rope_type": "default"}
		}
	}
	if m, ok := raw["rope_scaling"].(map[string]any); ok {
		maps.Copy(per["full_attention"], m)
	}
	for lt, key := range map[string]string{"full_attention": "rope_theta", "sliding_attention": "rope_local_base_freq"} {
		if _, ok := per[lt]["rope_theta"]; !ok {
			if t, ok := raw[key]; ok {
				per[lt]["rope_theta"] = t
			} else {
				per[lt]["rope_theta"] = map[string]float64{"full_attention": 1e6, "sliding_attention": 1e4}[lt]
			}
		}
	}
	full, err := c.resolveRope(raw, per["full_attention"])
	if err != nil {
		return err
	}
	local, err := c.resolveRope(raw, per["sliding_attention"])
	if err != nil {
		return err
	}
	c.Rope, c.RopeLocal = *full, local
	return nil
}

// resolveRope completes one rope parameter dict (rope_theta already set) and checks it.
func (c *Config) resolveRope(raw, rp map[string]any) (*Rope, error) {
	typ, _ := rp["rope_type"].(string)
	if typ == "" {
		typ, _ = rp["type"].(string)
	}
	if typ == "" {
		typ = "default"
	}
	if c.fam.longropeAliases && (typ == "su" || typ == "yarn") {
		// Phi3Config.convert_rope_params_to_dict: the early Phi-3 names of LongRoPE.
		typ = "longrope"
	}
	switch typ {
	case "llama3", "yarn", "longrope":
		if v, ok := raw["original_max_position_embeddings"]; ok {
			rp["original_max_position_embeddings"] = v
		} else if _, ok := rp["original_max_position_embeddings"]; !ok {
			rp["original_max_position_embeddings"] = float64(c.MaxPositions)
		}
	case "default", "linear", "dynamic":
	default:
		return nil, fmt.Errorf("config.json: rope type %q is not supported (default, linear, dynamic, yarn, longrope, llama3)", typ)
	}
	dim := c.HeadDim
	if c.fam.stablelm {
		// StableLmConfig's default partial_rotary_factor.
		dim = int(float64(c.HeadDim) * 0.25)
	}
	for _, src := range []map[string]any{rp, raw} {
		if f, ok := src["partial_rotary_factor"].(float64); ok {
			if f != 1 && !c.fam.partialRotary {
				return nil, fmt.Errorf("config.json: partial_rotary_factor %g is not supported for %s", f, c.ModelType)
			}
			if !(f > 0 && f <= 1) {
				return nil, fmt.Errorf("config.json: partial_rotary_factor %g must be in (0, 1]", f)
			}
			// int(head_dim * partial_rotary_factor), as modeling_rope_utils computes it.
			dim = int(float64(c.HeadDim) * f)
			break
		}
	}
	theta, ok := rp["rope_theta"].(float64)
	if !ok || theta <= 1 {
		return nil, fmt.Errorf("config.json: rope_theta %v must be a number above 1", rp["rope_theta"])
	}
	if dim%2 != 0 || dim == 0 {
		return nil, fmt.Errorf("config.json: rotary dimension %d (of head_dim %d) must be even and positive", dim, c.HeadDim)
	}
	r := &Rope{Type: typ, Theta: theta, params: rp, maxPos: c.MaxPositions, rotaryDim: dim}
	if _, err := r.InvFreq(1); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Rope) num(key string, def float64, required bool) (float64, error) {
	v, ok := r.params[key]
	if !ok || v == nil {
		if required {
			return 0, fmt.Errorf("config.json: rope %s needs %s", r.Type, key)
		}
		return def, nil
	}
	f, ok := v.(float64)
	if !ok {
		return 0, fmt.Errorf("config.json: rope parameter %s is %v, not a number", key, v)
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
		f, err := r.num("factor", 0, true)
		if err != nil {
			return nil, err
		}
		seq := float64(max(seqLen, r.maxPos))
		mp := float64(r.maxPos)
		if mp <= 0 {
			return nil, fmt.Errorf("config.json: dynamic rope needs max_position_embeddings")
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
		return nil, fmt.Errorf("config.json: longrope %s must list %d numbers", key, len(pw))
	}
	inv := make([]float32, len(pw))
	for i, v := range list {
		f, ok := v.(float64)
		if !ok {
			return nil, fmt.Errorf("config.json: longrope %s[%d] is %v, not a number", key, i, v)
		}
		inv[i] = 1 / (float32(f) * pw[i])
	}
	return inv, nil
}
