package forward

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"sort"
	"strings"
)

// defaultsJSON is what each supported model_type's transformers config class declares:
// field defaults, attribute aliases and default_theta, written by
// testdata/forward/defaults.py (TestDefaultsTable keeps it current).
//
//go:embed defaults.json
var defaultsJSON []byte

// classDefaults is one config class's entry of defaults.json.
type classDefaults struct {
	Class        string            `json:"class"`
	Defaults     map[string]any    `json:"defaults"`
	AttributeMap map[string]string `json:"attribute_map"`
	DefaultTheta any               `json:"default_theta"`
}

var classes = func() map[string]*classDefaults {
	var m map[string]*classDefaults
	if err := json.Unmarshal(defaultsJSON, &m); err != nil {
		panic("forward: defaults.json: " + err.Error())
	}
	return m
}()

// Supported lists the model_type values the forward pass runs, sorted.
func Supported() []string {
	var s []string
	for k := range families {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// ParseConfig reads config.json into the Config its model_type's family describes, with
// transformers' defaults for the fields it omits.
func ParseConfig(data []byte) (*Config, error) {
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	mt, _ := raw["model_type"].(string)
	fam, ok := families[mt]
	outer := ""
	if !ok {
		// A multimodal model's language model (Gemma 3's, Llama 4's) runs as its text
		// decoder: text_config, with the composite's tie_word_embeddings.
		if tc, isMap := raw["text_config"].(map[string]any); isMap {
			tmt, _ := tc["model_type"].(string)
			if f, found := families[tmt]; found {
				sub := maps.Clone(tc)
				if v, set := raw["tie_word_embeddings"]; set {
					sub["tie_word_embeddings"] = v
				}
				fam, ok, raw, mt, outer = f, true, sub, tmt, mt
			}
		}
	}
	if !ok {
		return nil, fmt.Errorf("config.json: %s is not supported by the forward pass (supported: %s)", describe(raw), strings.Join(Supported(), ", "))
	}
	g := &getter{raw: raw, cls: classes[mt]}
	c, err := fam(g)
	if err == nil {
		err = g.err
	}
	if err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	c.ModelType = mt
	if outer == "gemma3" {
		// Gemma3ForConditionalGeneration leaves its logits uncapped (only Gemma3ForCausalLM
		// applies final_logit_softcapping).
		c.FinalSoftcap = 0
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return c, nil
}

// IsUnsupported reports whether err is ParseConfig's refusal of a model_type the forward
// pass has no family for.
func IsUnsupported(err error) bool {
	return err != nil && strings.Contains(err.Error(), "is not supported by the forward pass")
}

// describe names a configuration by its model_type and first architecture.
func describe(raw map[string]any) string {
	mt, _ := raw["model_type"].(string)
	what := fmt.Sprintf("model_type %q", mt)
	if a, ok := raw["architectures"].([]any); ok && len(a) > 0 {
		if arch, _ := a[0].(string); arch != "" {
			what += fmt.Sprintf(" (%s)", arch)
		}
	}
	return what
}

// Limits far above any released model keep a hostile config from sizing allocations.
const (
	maxHidden  = 1 << 20
	maxLayers  = 1 << 14
	maxHeads   = 1 << 14
	maxVocab   = 1 << 26
	maxHeadDim = 1 << 16
	maxInter   = 1 << 24
	maxExperts = 1 << 16
	maxWidth   = 1 << 26 // any one projection's output features
)

func bounded(name string, v, max int) error {
	if v <= 0 || v > max {
		return fmt.Errorf("%s must be an integer from 1 to %d, got %d", name, max, v)
	}
	return nil
}

// check validates the dimensions a family derived: every size positive and bounded, heads
// grouping evenly, rotary dimensions fitting the heads.
func (c *Config) check() error {
	for _, f := range []struct {
		name   string
		v, max int
	}{{"hidden_size", c.Hidden, maxHidden}, {"num_hidden_layers", c.Layers, maxLayers}, {"vocab_size", c.Vocab, maxVocab}} {
		if err := bounded(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	if c.EmbedDim < 0 || c.EmbedDim > maxHidden {
		return fmt.Errorf("embedding width %d out of range", c.EmbedDim)
	}
	if len(c.Blocks) != c.Layers {
		return fmt.Errorf("%d layers described for num_hidden_layers %d", len(c.Blocks), c.Layers)
	}
	for i, b := range c.Blocks {
		if err := b.check(); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return nil
}

func (b *Block) check() error {
	if s := b.SSM; s != nil {
		if b.Attn != nil {
			return fmt.Errorf("a block with both attention and a state-space mixer")
		}
		for _, f := range []struct {
			name   string
			v, max int
		}{{"intermediate_size", s.Inner, maxInter}, {"state_size", s.State, maxHeadDim}, {"conv_kernel", s.Conv, maxHeadDim},
			{"time_step_rank", s.DtRank, maxInter}} {
			if err := bounded(f.name, f.v, f.max); err != nil {
				return err
			}
		}
		if _, ok := activations[s.Act]; !ok || activations[s.Act] == nil {
			return fmt.Errorf("mixer activation %q is not supported", s.Act)
		}
		if b.MLP == nil {
			if b.Residual != Sequential {
				return fmt.Errorf("a block without a feed-forward sublayer must be sequential")
			}
			return nil
		}
		return b.MLP.check()
	}
	a := b.Attn
	if a == nil || b.MLP == nil {
		return fmt.Errorf("no attention or feed-forward block")
	}
	for _, f := range []struct {
		name   string
		v, max int
	}{{"num_attention_heads", a.Heads, maxHeads}, {"num_key_value_heads", a.KVHeads, maxHeads}, {"head_dim", a.HeadDim, maxHeadDim}} {
		if err := bounded(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	if a.VDim < 0 || a.VDim > maxHeadDim {
		return fmt.Errorf("value head dimension %d out of range", a.VDim)
	}
	if a.Heads%a.KVHeads != 0 {
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", a.Heads, a.KVHeads)
	}
	if a.Heads*max(a.HeadDim, a.VDim) > maxWidth {
		return fmt.Errorf("%d heads of %d features are too wide", a.Heads, a.HeadDim)
	}
	if a.ALiBi != nil && len(a.ALiBi) != a.Heads {
		return fmt.Errorf("%d ALiBi slopes for %d heads", len(a.ALiBi), a.Heads)
	}
	if a.Window < 0 || a.Chunk < 0 {
		return fmt.Errorf("sliding window %d or attention chunk %d is negative", a.Window, a.Chunk)
	}
	if r := a.Rope; r != nil {
		d := r.Rope.rotaryDim
		if d%2 != 0 || d <= 0 || d > a.HeadDim {
			return fmt.Errorf("rotary dimension %d (of head_dim %d) must be even, positive and at most head_dim", d, a.HeadDim)
		}
	}
	if m := a.MLA; m != nil {
		for _, d := range []int{m.QLoraRank, m.KVLoraRank, m.NopeDim, m.RopeDim, m.VDim} {
			if d < 0 || d > maxHeadDim {
				return fmt.Errorf("MLA dimension %d out of range", d)
			}
		}
		if m.KVLoraRank == 0 || m.RopeDim == 0 || m.VDim == 0 || m.RopeDim%2 != 0 {
			return fmt.Errorf("kv_lora_rank, v_head_dim and an even qk_rope_head_dim must be positive")
		}
	}
	return b.MLP.check()
}

func (m *MLP) check() error {
	if e := m.MoE; e != nil {
		if err := bounded("the number of experts", e.Experts, maxExperts); err != nil {
			return err
		}
		if err := bounded("the expert intermediate size", e.Inter, maxInter); err != nil {
			return err
		}
		if e.TopK <= 0 || e.TopK > e.Experts {
			return fmt.Errorf("num_experts_per_tok %d must be between 1 and the %d experts", e.TopK, e.Experts)
		}
		if e.Scoring == SparseMixer && e.TopK != 2 {
			return fmt.Errorf("sparsemixer routing takes 2 experts per token, not %d", e.TopK)
		}
		if e.Groups > 1 {
			per := e.Experts / max(e.Groups, 1)
			if e.Experts%e.Groups != 0 || per < 2 && !e.GroupMax || e.TopKGroups <= 0 || e.TopKGroups > e.Groups || e.TopK > e.TopKGroups*per {
				return fmt.Errorf("%d experts in n_group %d (topk_group %d, top-%d) do not split into groups holding the top-k",
					e.Experts, e.Groups, e.TopKGroups, e.TopK)
			}
		}
		if e.Shared != nil {
			return e.Shared.check()
		}
		return nil
	}
	if err := bounded("intermediate_size", m.Inter, maxInter); err != nil {
		return err
	}
	if _, ok := activations[m.Act]; !ok {
		return fmt.Errorf("hidden activation %q is not supported (%s are)", m.Act, strings.Join(activationNames(), ", "))
	}
	return nil
}

// getter reads typed config fields: config.json's value (under the field's name or its
// attribute_map alias), else the config class's declared default (defaults.json), else the
// caller's default for fields the class derives. It keeps the first type error.
type getter struct {
	raw map[string]any
	cls *classDefaults
	err error
}

// names are the keys a field may be stored under: its own and its attribute_map aliases.
func (g *getter) names(key string) []string {
	keys := []string{key}
	if g.cls != nil {
		if a, ok := g.cls.AttributeMap[key]; ok {
			keys = append(keys, a)
		}
		for from, to := range g.cls.AttributeMap {
			if to == key {
				keys = append(keys, from)
			}
		}
	}
	return keys
}

// lookup is config.json's value of key (nil for null) and whether config.json has it.
func (g *getter) lookup(key string) (any, bool) {
	for _, k := range g.names(key) {
		if v, ok := g.raw[k]; ok {
			return v, true
		}
	}
	return nil, false
}

// has reports whether config.json sets key (null included).
func (g *getter) has(key string) bool {
	_, ok := g.lookup(key)
	return ok
}

// value is key's value: config.json's, else the class default; nil when neither or null.
func (g *getter) value(key string) any {
	if v, ok := g.lookup(key); ok {
		return v
	}
	if g.cls != nil {
		for _, k := range g.names(key) {
			if v, ok := g.cls.Defaults[k]; ok {
				return v
			}
		}
	}
	return nil
}

func (g *getter) fail(key string, v any, want string) {
	if g.err == nil {
		g.err = fmt.Errorf("%s is %v, not %s", key, v, want)
	}
}

func (g *getter) int(key string, def int) int {
	v := g.value(key)
	if v == nil {
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
	v := g.value(key)
	if v == nil {
		return def
	}
	f, ok := v.(float64)
	if !ok {
		g.fail(key, v, "a number")
		return def
	}
	return f
}

func (g *getter) bool(key string, def bool) bool {
	v := g.value(key)
	if v == nil {
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
	v := g.value(key)
	if v == nil {
		return def
	}
	s, ok := v.(string)
	if !ok {
		g.fail(key, v, "a string")
		return def
	}
	return s
}

// perLayer is an integer field that may also be a list with one value per layer
// (HunYuan-MoE's num_experts and moe_topk), read for layer i.
func (g *getter) perLayer(key string, i int) int {
	if l, ok := g.value(key).([]any); ok {
		v := g.ints(key)
		if i >= len(v) {
			g.fail(key, l, fmt.Sprintf("a list of at least %d values", i+1))
			return 0
		}
		return v[i]
	}
	return g.int(key, 0)
}

// ints is a list of integers (mlp_only_layers, no_rope_layers); nil when absent.
func (g *getter) ints(key string) []int {
	v := g.value(key)
	if v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok || len(l) > maxLayers {
		g.fail(key, v, "a list of integers")
		return nil
	}
	out := make([]int, 0, len(l))
	for _, x := range l {
		f, ok := x.(float64)
		if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<40 {
			g.fail(key, v, "a list of integers")
			return nil
		}
		out = append(out, int(f))
	}
	return out
}

// strs is a list of strings (layer_types); nil when absent.
func (g *getter) strs(key string) []string {
	v := g.value(key)
	if v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok || len(l) > maxLayers {
		g.fail(key, v, "a list of strings")
		return nil
	}
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, ok := x.(string)
		if !ok {
			g.fail(key, v, "a list of strings")
			return nil
		}
		out = append(out, s)
	}
	return out
}

// sub is a getter over a nested configuration (MPT's attn_config), its defaults the nested
// class's.
func (g *getter) sub(key string) *getter {
	s := &getter{raw: map[string]any{}}
	if v, ok := g.lookup(key); ok && v != nil {
		m, ok := v.(map[string]any)
		if !ok {
			g.fail(key, v, "an object")
		} else {
			s.raw = m
		}
	}
	if g.cls != nil {
		if d, ok := g.cls.Defaults[key].(map[string]any); ok {
			s.cls = &classDefaults{Defaults: d}
		}
	}
	return s
}

// rename reads a legacy field old as new when config.json sets it (BloomConfig's n_embed).
func (g *getter) rename(old, new string) {
	if v, ok := g.raw[old]; ok && v != nil {
		g.raw[new] = v
	}
}

// modelType is config.json's model_type.
func (g *getter) modelType() string {
	s, _ := g.raw["model_type"].(string)
	return s
}

// theta is the class's default_theta (a number, or one of a dict's by key).
func (g *getter) theta(key string) float64 {
	if g.cls == nil {
		return 10000
	}
	switch t := g.cls.DefaultTheta.(type) {
	case float64:
		return t
	case map[string]any:
		if f, ok := t[key].(float64); ok {
			return f
		}
	}
	return 10000
}
