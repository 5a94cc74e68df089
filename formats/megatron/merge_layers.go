package megatron

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// split is how Megatron's tensor-parallel layers hold a parameter over the ranks.
type split uint8

const (
	// replicated: every rank holds the whole tensor (norms, row-parallel biases, position
	// embeddings); the merge keeps one copy and checks the others equal it.
	replicated split = iota + 1
	// vocab: VocabParallelEmbedding and the output layer: rows of the padded vocabulary,
	// rank after rank; the merge drops the padding rows.
	vocab
	// qkv: the fused query-key-value projection (column parallel): rows of whole query
	// groups — each group's query heads, then one key and one value head — rank after rank.
	qkv
	// fc1: the MLP's first projection (column parallel); with a gated linear unit (SwiGLU)
	// each rank holds its slice of the gate, then its slice of the up projection.
	fc1
	// row: row-parallel weights (attention output, MLP second projection): columns, rank
	// after rank.
	row
	// extraState: Transformer Engine's _extra_state (FP8 metadata), one per module and rank;
	// kept when every rank holds the same.
	extraState
	// tiedHead: the last pipeline stage's copy of the word embeddings when embeddings and
	// output are tied (output_layer.weight, word_embeddings_for_head.weight): checked equal
	// to the embeddings and not kept (a one-stage model has no such entry).
	tiedHead
)

func (s split) String() string {
	return [...]string{"", "replicated", "vocabulary-parallel", "query-key-value", "column-parallel", "row-parallel", "extra state", "tied output copy"}[s]
}

// layerRules say how each entry of a transformer layer splits, by its name after the
// layer's prefix: Megatron-core's GPTModel (local and Transformer Engine specs) and the
// legacy megatron.legacy.model names (before and after the 2023 norm renames).
var layerRules = compile([]rule{
	{`(input_layernorm|pre_mlp_layernorm)\.(weight|bias)`, replicated},
	{`self_attention\.linear_qkv\.layer_norm_(weight|bias)`, replicated},
	{`mlp\.linear_fc1\.layer_norm_(weight|bias)`, replicated},
	{`self_attention\.(q|k)_layernorm\.(weight|bias)`, replicated},
	{`self_attention\.(linear_proj|dense)\.bias`, replicated},
	{`mlp\.(linear_fc2|dense_4h_to_h)\.bias`, replicated},
	{`(input|post_attention)_(norm|layernorm)\.(weight|bias)`, replicated},
	{`self_attention\.(linear_qkv|query_key_value)\.(weight|bias)`, qkv},
	{`mlp\.(linear_fc1|dense_h_to_4h)\.(weight|bias)`, fc1},
	{`self_attention\.(linear_proj|dense)\.weight`, row},
	{`mlp\.(linear_fc2|dense_4h_to_h)\.weight`, row},
	{`(.+\.)?_extra_state`, extraState},
})

// modelRules say how the entries outside the transformer layers split.
var modelRules = compile([]rule{
	{`(language_model\.)?embedding\.word_embeddings\.weight`, vocab},
	{`(language_model\.)?embedding\.position_embeddings\.weight`, replicated},
	{`decoder\.final_layernorm\.(weight|bias)`, replicated},
	{`language_model\.encoder\.final_(norm|layernorm)\.(weight|bias)`, replicated},
	{`(language_model\.)?output_layer\.weight`, vocab},
	{`word_embeddings_for_head\.weight`, tiedHead},
	{`(.+\.)?_extra_state`, extraState},
})

// layerName matches a transformer layer's entry: its prefix, local index and the rest.
var layerName = regexp.MustCompile(`^(decoder\.layers\.|language_model\.encoder\.layers\.)(\d{1,9})\.(.+)$`)

// embeddingName matches the word embeddings a tied head copies.
var embeddingName = regexp.MustCompile(`^(language_model\.)?embedding\.word_embeddings\.weight$`)

// outputName matches the output layer, a copy of the embeddings on the last stage when
// they are tied.
var outputName = regexp.MustCompile(`^(language_model\.)?output_layer\.weight$`)

type rule struct {
	match string
	split split
}

type compiledRule struct {
	re    *regexp.Regexp
	split split
}

func compile(rs []rule) []compiledRule {
	out := make([]compiledRule, len(rs))
	for i, r := range rs {
		out[i] = compiledRule{regexp.MustCompile(`^` + r.match + `$`), r.split}
	}
	return out
}

func match(rs []compiledRule, name string) (split, bool) {
	for _, r := range rs {
		if r.re.MatchString(name) {
			return r.split, true
		}
	}
	return 0, false
}

// entryOf is how a rank's model entry splits, and for a layer's entry its local index and
// the prefix and rest of its name; ok is false for an entry ckpt cannot prove it merges.
type entryOf struct {
	split        split
	layer        int64 // -1 outside the transformer layers
	prefix, rest string
}

func classify(name string) (entryOf, bool) {
	if m := layerName.FindStringSubmatch(name); m != nil {
		i, err := strconv.ParseInt(m[2], 10, 64)
		s, ok := match(layerRules, m[3])
		return entryOf{s, i, m[1], m[3]}, ok && err == nil
	}
	s, ok := match(modelRules, name)
	return entryOf{split: s, layer: -1}, ok
}

// groupRule finds, among the saved param_groups, the groups Megatron builds for weight
// decay: the one with wd_mult 1 (weight decay) and the one with wd_mult 0 (biases and 1-D
// parameters; q/k layernorms excepted under apply_wd_to_qk_layernorm), as _get_param_groups
// builds them with its standard overrides — or, from releases before wd_mult (2022),
// _get_params_for_weight_decay_optimization's two groups, weight decay then none (weight_decay
// 0). -1 for a group not saved. Groups the rule does not account for (lr_mult, a decoupled
// learning rate, expert-parallel parameters, other weight-decay multipliers) are refused:
// their parameters cannot be told from the saved state.
func groupRule(groups []*statedict.Dict) (decay, noDecay int, err error) {
	if !slices.ContainsFunc(groups, func(g *statedict.Dict) bool { _, ok := g.Get("wd_mult"); return ok }) {
		if wd, ok := number(groups[len(groups)-1], "weight_decay", 0); len(groups) != 2 || !ok || wd != 0 {
			return 0, 0, fmt.Errorf("%w: %d param_groups without wd_mult and not the weight-decay / no-weight-decay pair Megatron builds: ckpt cannot tell which parameters each holds", ckpterr.ErrUnsupported, len(groups))
		}
		return 0, 1, nil
	}
	decay, noDecay = -1, -1
	for i, g := range groups {
		wd, ok := number(g, "wd_mult", 1)
		lr, ok2 := number(g, "lr_mult", 1)
		dec, _ := g.Get("is_decoupled_lr")
		ep, _ := g.Get("is_expert_parallel")
		switch {
		case !ok || !ok2 || lr != 1 || (dec != nil && dec != false) || (ep != nil && ep != false):
			return 0, 0, fmt.Errorf("%w: param_groups[%d] (lr_mult, decoupled learning rate or expert parallel): ckpt cannot tell which parameters Megatron put in it", ckpterr.ErrUnsupported, i)
		case wd == 1 && decay < 0:
			decay = i
		case wd == 0 && noDecay < 0:
			noDecay = i
		default:
			return 0, 0, fmt.Errorf("%w: param_groups[%d] has wd_mult %v: ckpt cannot tell which parameters Megatron put in it", ckpterr.ErrUnsupported, i, wd)
		}
	}
	return decay, noDecay, nil
}

// groupOf is the group of the parameter called name (globally or on a rank: the rule reads
// its last part and its rank only) of ndim dimensions.
func groupOf(name string, ndim int, wdQKNorm bool, decay, noDecay int) (int, error) {
	skip := strings.HasSuffix(name, ".bias") || ndim == 1
	if wdQKNorm && (strings.Contains(name, "q_layernorm.") || strings.Contains(name, "k_layernorm.")) {
		skip = false
	}
	if skip && noDecay < 0 {
		return 0, fmt.Errorf("%w: %s takes no weight decay, but no param group has wd_mult 0", ckpterr.ErrCorrupt, name)
	}
	if !skip && decay < 0 {
		return 0, fmt.Errorf("%w: %s takes weight decay, but no param group has wd_mult 1", ckpterr.ErrCorrupt, name)
	}
	if skip {
		return noDecay, nil
	}
	return decay, nil
}

// assignGroups says which of the saved param_groups each parameter of the merged model is
// in (groupRule).
func assignGroups(groups []*statedict.Dict, m *merger) (map[string]int, error) {
	decay, noDecay, err := groupRule(groups)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, e := range m.entries {
		if e.split == extraState {
			continue
		}
		t, err := weightOf(m.grid[e.stage][0], e.local, "")
		if err != nil {
			return nil, err
		}
		if out[e.name], err = groupOf(e.name, len(t.Shape), m.args.wdQKNorm, decay, noDecay); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// number reads a group option that is a number, def when it is absent.
func number(d *statedict.Dict, key string, def float64) (float64, bool) {
	v, ok := d.Get(key)
	if !ok {
		return def, true
	}
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	}
	return 0, false
}
