package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/internal/regular"
)

// AxisKind is what a mesh axis is for; it decides the built-in placements along it. Mesh
// axes are recognized by name (AxisKinds).
type AxisKind string

// The axis kinds of torchtitan's meshes.
const (
	// KindDP replicates everything (DDP, or HSDP's replicate dimension).
	KindDP AxisKind = "dp"
	// KindFSDP shards every tensor's dimension 0 (FSDP2's fully_shard), after any tensor
	// or expert parallelism has cut it.
	KindFSDP AxisKind = "fsdp"
	// KindTP is Megatron-style tensor parallelism (TPRules).
	KindTP AxisKind = "tp"
	// KindEP is expert parallelism: stacked MoE expert weights split by expert (EPRules).
	KindEP AxisKind = "ep"
	// KindCP is context parallelism, which splits activations: parameters are replicated.
	KindCP AxisKind = "cp"
)

// AxisKinds maps the mesh axis names ckpt recognizes to their kinds (torchtitan's
// dp_replicate / dp_shard names included).
var AxisKinds = map[string]AxisKind{
	"dp": KindDP, "ddp": KindDP, "dp_replicate": KindDP,
	"fsdp": KindFSDP, "dp_shard": KindFSDP,
	"tp": KindTP,
	"ep": KindEP,
	"cp": KindCP,
}

// Rule places the tensors whose names match Match along one mesh axis. A Shard rule only
// applies to tensors that have the dimension; others fall through to the next rule.
type Rule struct {
	Match string
	Place Placement
	// Late marks FSDP-style shards, applied after the other axes' shards have cut the
	// tensor (FSDP2 wraps a model that TP or EP already parallelized).
	Late bool
	re   *regexp.Regexp
}

// AxisPlan is the rule table of one axis kind: the first rule matching a tensor's name wins;
// Default places the rest, DefaultWithFSDP instead when the mesh also has an fsdp axis.
type AxisPlan struct {
	Kind            AxisKind
	Rules           []Rule
	Default         Rule
	DefaultWithFSDP *Rule
}

func rules(place Placement, patterns ...string) []Rule {
	out := make([]Rule, len(patterns))
	for i, p := range patterns {
		out[i] = Rule{Match: p, Place: place}
	}
	return out
}

// TPRules is the Megatron-style tensor-parallel plan of the Llama family (Llama, Qwen2/3,
// Mistral, Mixtral experts), for Hugging Face names and Meta / torchtitan names, as
// torchtitan's parallelize_llama and transformers' base_model_tp_plan shard them with
// torch.distributed.tensor.parallel styles: ColwiseParallel puts a Linear's weight and bias
// on Shard(0), RowwiseParallel its weight on Shard(1) and bias on Replicate, and a
// RowwiseParallel embedding — the vocabulary-parallel embedding — on Shard(0). Everything
// else (norms, q_norm/k_norm, routers, stacked experts, whose fused gate_up_proj cannot be
// cut as one block) is replicated. Mixtral's per-expert block_sparse_moe.experts.N.w1/w3/w2
// match the Meta names. Phi-3's fused qkv_proj and gate_up_proj are replicated too: a
// column split of [q; k; v] rows would hand a device some of q and none of v, so they are
// left to FSDP (their o_proj and down_proj stay row-parallel, which is still exact).
var TPRules = slices.Concat(
	// column-parallel: attention q/k/v, MLP gate/up
	rules(Shard(0),
		`(^|\.)(q_proj|k_proj|v_proj|gate_proj|up_proj)\.(weight|bias)$`,
		`(^|\.)(wq|wk|wv|w1|w3)\.(weight|bias)$`),
	// row-parallel: attention output, MLP down
	rules(Shard(1), `(^|\.)(o_proj|down_proj|wo|w2)\.weight$`),
	rules(Replicate, `(^|\.)(o_proj|down_proj|wo|w2)\.bias$`),
	// vocabulary-parallel embedding and output projection
	rules(Shard(0),
		`(^|\.)(embed_tokens|tok_embeddings)\.weight$`,
		`(^|\.)(lm_head|output)\.weight$`),
)

// EPRules puts stacked MoE expert weights ([experts, …] parameters of an experts module:
// transformers' gate_up_proj/down_proj, torchtitan's w1/w2/w3) on Shard(0) of the ep axis.
// Per-expert tensors (experts.7.w1.weight) are whole tensors, which a DTensor placement
// cannot put on some ranks only; tensor parallelism splits them instead.
var EPRules = rules(Shard(0), `(^|\.)experts\.(gate_up_proj|down_proj|gate_proj|up_proj|w1|w2|w3)(_bias)?$`)

// BuiltinAxes are the built-in axis plans. torchtitan borrows the ep axis from the FSDP
// dimension, so with an fsdp axis in the mesh the tensors EP leaves alone are FSDP-sharded
// across the ep ranks too.
var BuiltinAxes = []*AxisPlan{
	{Kind: KindDP, Default: Rule{Place: Replicate}},
	{Kind: KindFSDP, Default: Rule{Place: Shard(0), Late: true}},
	{Kind: KindTP, Rules: TPRules, Default: Rule{Place: Replicate}},
	{Kind: KindEP, Rules: EPRules, Default: Rule{Place: Replicate}, DefaultWithFSDP: &Rule{Place: Shard(0), Late: true}},
	{Kind: KindCP, Default: Rule{Place: Replicate}},
}

func init() {
	for _, a := range BuiltinAxes {
		for i := range a.Rules {
			a.Rules[i].re = regexp.MustCompile(a.Rules[i].Match)
		}
	}
}

// Plan decides every tensor's Sharding on a mesh: the rules of a plan file first, then the
// built-in table of each axis's kind. The zero Plan is the built-in one.
type Plan struct {
	// Path is the plan file's path, empty for the built-in plan.
	Path string
	// Rules are the plan file's rules, in file order.
	Rules []FileRule
}

// FileRule is one rule of a plan file: tensors whose names match Match take Placements on
// the mesh axes named there (by mesh axis name); other axes keep their built-in placement.
type FileRule struct {
	Match      string               `json:"match"`
	Placements map[string]Placement `json:"placements"`
	re         *regexp.Regexp
}

// planFile is the JSON a plan file holds:
//
//	{"rules": [
//	  {"match": "\\.mlp\\.experts\\.", "placements": {"tp": "Replicate()", "ep": "Shard(0)"}},
//	  {"match": "lm_head\\.weight$",   "placements": {"tp": "Replicate()"}}
//	]}
type planFile struct {
	Rules []FileRule `json:"rules"`
}

// maxPlanFile bounds a plan file: rules are a few lines each.
const maxPlanFile = 1 << 20

// LoadPlan reads a JSON plan file (see ParsePlan).
func LoadPlan(path string) (*Plan, error) {
	b, err := regular.ReadFile(path, maxPlanFile)
	if err != nil {
		return nil, fmt.Errorf("plan file: %w", err)
	}
	p, err := ParsePlan(b)
	if err != nil {
		return nil, fmt.Errorf("plan file %s: %w", path, err)
	}
	p.Path = path
	return p, nil
}

// ParsePlan reads a plan file's JSON: {"rules": [{"match": REGEX, "placements": {AXIS:
// PLACEMENT, …}}, …]}. Rules are tried in order; for each mesh axis the first rule that
// matches the tensor's name (Go regexp syntax, unanchored) and names the axis decides. A
// placement on an fsdp-kind axis applies after the others (see Sharding). Unknown fields
// are errors.
func ParsePlan(b []byte) (*Plan, error) {
	var pf planFile
	if err := decodeStrict(b, &pf); err != nil {
		return nil, err
	}
	if err := checkRules(pf.Rules); err != nil {
		return nil, err
	}
	return &Plan{Rules: pf.Rules}, nil
}

// MarshalJSON writes the plan as a record keeps it: the file it was read from and its
// rules.
func (p *Plan) MarshalJSON() ([]byte, error) {
	return json.Marshal(planRecord{Path: p.Path, Rules: p.Rules})
}

// UnmarshalJSON reads what MarshalJSON writes, checking the rules as ParsePlan does.
func (p *Plan) UnmarshalJSON(b []byte) error {
	if len(b) > maxPlanFile {
		return fmt.Errorf("plan: larger than %d bytes", maxPlanFile)
	}
	var r planRecord
	if err := decodeStrict(b, &r); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if err := checkRules(r.Rules); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	*p = Plan{Path: r.Path, Rules: r.Rules}
	return nil
}

type planRecord struct {
	Path  string     `json:"path,omitempty"`
	Rules []FileRule `json:"rules"`
}

// decodeStrict decodes one JSON value of b into v, refusing unknown fields and trailing
// data.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// checkRules compiles each rule's pattern and checks its placements name mesh axes.
func checkRules(rules []FileRule) error {
	for i := range rules {
		r := &rules[i]
		re, err := regexp.Compile(r.Match)
		if err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
		if len(r.Placements) == 0 {
			return fmt.Errorf("rule %d (%q): no placements", i, r.Match)
		}
		for axis := range r.Placements {
			if !axisName.MatchString(axis) {
				return fmt.Errorf("rule %d (%q): %q is not a mesh axis name", i, r.Match, axis)
			}
		}
		r.re = re
	}
	return nil
}

// Check reports mesh axes the plan cannot place: axes of no known kind that no plan-file
// rule names, and pipeline axes (pp), which put whole layers on stages rather than
// splitting tensors.
func (p *Plan) Check(m *Mesh) error {
	for _, a := range m.Axes {
		if _, ok := AxisKinds[a.Name]; ok {
			continue
		}
		if a.Name == "pp" {
			return fmt.Errorf("mesh axis pp: pipeline stages hold different layers, not shards of one tensor; ckpt plans dp, fsdp, tp, ep and cp axes")
		}
		if p == nil || !slices.ContainsFunc(p.Rules, func(r FileRule) bool { _, ok := r.Placements[a.Name]; return ok }) {
			return fmt.Errorf("mesh axis %s: not a known kind (%s); name its placements in a plan file", a.Name, knownAxisNames())
		}
	}
	return nil
}

func knownAxisNames() string {
	var s []string
	for n := range AxisKinds {
		s = append(s, n)
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// Sharding is the layout of the model tensor called name with the given shape on mesh m.
// Shards apply along the mesh axes left to right, FSDP-style (late) ones after the others.
func (p *Plan) Sharding(name string, shape []int64, m *Mesh) (Sharding, error) {
	return p.sharding(name, shape, m, true)
}

// sharding places a tensor by the plan file's rules and, with builtin, the built-in tables;
// without, axes no file rule names replicate it.
func (p *Plan) sharding(name string, shape []int64, m *Mesh, builtin bool) (Sharding, error) {
	if err := p.Check(m); err != nil {
		return Sharding{}, err
	}
	hasFSDP := slices.ContainsFunc(m.Axes, func(a Axis) bool { return AxisKinds[a.Name] == KindFSDP })
	ndim := len(shape)
	s := Sharding{Placements: make([]Placement, m.NDim())}
	late := make([]bool, m.NDim())
	for i, a := range m.Axes {
		kind := AxisKinds[a.Name]
		r, err := p.fileRule(name, a.Name, ndim)
		if err != nil {
			return Sharding{}, fmt.Errorf("tensor %s: %w", name, err)
		}
		switch {
		case r == nil && builtin:
			r = builtinRule(kind, name, ndim, hasFSDP)
		case r == nil:
			r = &Rule{Place: Replicate}
		default:
			r.Late = kind == KindFSDP
		}
		pl := r.Place
		if pl.Shard && pl.Dim < 0 {
			pl.Dim += ndim // DTensor normalizes Shard(-1) to the dimension it names
		}
		s.Placements[i], late[i] = pl, r.Late
	}
	order := make([]int, 0, m.NDim())
	for _, l := range []bool{false, true} {
		for i := range m.Axes {
			if late[i] == l {
				order = append(order, i)
			}
		}
	}
	if needsOrder(s.Placements, order) {
		s.Order = order
	}
	return s, nil
}

// fileRule is the first plan-file rule naming axis that matches name, as a Rule; an error
// when it shards a dimension the tensor lacks.
func (p *Plan) fileRule(name, axis string, ndim int) (*Rule, error) {
	if p == nil {
		return nil, nil
	}
	for i := range p.Rules {
		fr := &p.Rules[i]
		pl, ok := fr.Placements[axis]
		if !ok {
			continue
		}
		re := fr.re
		if re == nil { // a rule built in Go rather than by ParsePlan (compiled each time: Plans are read concurrently)
			var err error
			if re, err = regexp.Compile(fr.Match); err != nil {
				return nil, fmt.Errorf("plan rule %d: %w", i, err)
			}
		}
		if !re.MatchString(name) {
			continue
		}
		if pl.Shard && (pl.Dim >= ndim || pl.Dim < -ndim) {
			return nil, fmt.Errorf("plan rule %d (%q) puts %s on axis %s, but the tensor has %d dimensions", i, fr.Match, pl, axis, ndim)
		}
		return &Rule{Place: pl}, nil
	}
	return nil, nil
}

// builtinRule is the built-in placement of a tensor along an axis of kind kind.
func builtinRule(kind AxisKind, name string, ndim int, hasFSDP bool) *Rule {
	fits := func(r *Rule) bool { return !r.Place.Shard || r.Place.Dim < ndim }
	for _, a := range BuiltinAxes {
		if a.Kind != kind {
			continue
		}
		for i := range a.Rules {
			if r := &a.Rules[i]; fits(r) && r.re.MatchString(name) {
				return r
			}
		}
		if r := a.DefaultWithFSDP; hasFSDP && r != nil && fits(r) {
			return r
		}
		if r := &a.Default; fits(r) {
			return r
		}
	}
	return &Rule{Place: Replicate}
}

// needsOrder reports whether applying the shards in order differs from left to right: only
// when two axes shard the same tensor dimension out of mesh order.
func needsOrder(pl []Placement, order []int) bool {
	last := map[int]int{} // tensor dim → last axis that sharded it
	for _, a := range order {
		p := pl[a]
		if !p.Shard {
			continue
		}
		if prev, ok := last[p.Dim]; ok && prev > a {
			return true
		}
		last[p.Dim] = a
	}
	return false
}

// StateSharding is the layout of a parameter's optimizer state tensor: moments of the
// parameter's shape (Adam's exp_avg, exp_avg_sq) follow the parameter's placements, as
// FSDP2 and DTensor optimizers keep them; scalar state (step) is replicated; state of
// another shape (Adafactor's row and column factors) keeps the placements whose dimension
// it shares with the parameter and is replicated along the rest.
func StateSharding(param Sharding, paramShape, stateShape []int64) Sharding {
	if slices.Equal(paramShape, stateShape) {
		return param
	}
	s := Sharding{Placements: make([]Placement, len(param.Placements)), Order: param.Order}
	if len(stateShape) == 0 {
		s.Order = nil
		return s
	}
	for i, p := range param.Placements {
		d := p.Dim
		if d < 0 {
			d += len(paramShape)
		}
		if p.Shard && d < len(stateShape) && d < len(paramShape) && stateShape[d] == paramShape[d] {
			s.Placements[i] = Shard(d)
		}
	}
	if s.Order != nil && !needsOrder(s.Placements, s.Order) {
		s.Order = nil
	}
	return s
}
