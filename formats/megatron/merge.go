package megatron

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// rank is one (tensor, pipeline) rank's saved state.
type rank struct {
	folder string
	tp, pp int64
	file   string // its model_optim_rng.pt, for messages
	root   *statedict.Dict
	args   *runArgs
	model  []statedict.Entry // the model's entries, nested dicts flattened, in order
	byName map[string]*statedict.Tensor
	// state maps a parameter's local name to its optimizer state tensors: "param" (its fp32
	// main copy, when the optimizer keeps one) first, then the optimizer's (exp_avg, …); read
	// from distrib_optim.pt (placeState) or the rank file's state by id (placeIndexState).
	state map[string][]namedTensor
	// steps are the parameters' step counters of an optimizer saved by id (without the
	// distributed optimizer, whose step is its groups').
	steps map[string]*statedict.Tensor
	optim string // its distrib_optim.pt, "" when it has none
}

type namedTensor struct {
	key string
	t   *statedict.Tensor
}

// entry is one entry of the merged model: its global name, how it splits, the stage and
// local name it has there.
type entry struct {
	name, local string
	split       split
	stage       int64
	rest        string // for a layer's entry, its name within the layer
}

// merger merges the ranks of a TP × PP run.
type merger struct {
	at      string // the iteration folder
	args    *runArgs
	grid    [][]*rank // [pp][tp]
	entries []entry
	head    *entry // the last stage's tied copy of the word embeddings, if any
}

// openMerged reads the legacy iteration folder iter of dir as one global model, as
// Megatron's checkpoint converter (tools/checkpoint/loader_megatron.py) merges a tensor ×
// pipeline parallel run: see Open. Layouts it cannot prove it merges correctly are refused,
// naming the tensor or rank at fault.
func openMerged(ctx context.Context, dir, iter string, found []rankFolder, files *rankFiles, op Openers) (_ *statedict.Checkpoint, err error) {
	at := storage.Join(dir, iter)
	out := &statedict.Checkpoint{Format: Legacy, Path: dir}
	defer func() {
		if err != nil {
			out.Close()
		}
	}()
	read := func(r rankFolder, first bool) (*rank, error) {
		k, ignored, err := openRank(ctx, dir, iter, r, files, op, out, first, found)
		if err != nil {
			return nil, err
		}
		out.Ignored = append(out.Ignored, ignored...)
		return k, nil
	}
	first, err := read(found[0], true)
	if err != nil {
		return nil, err
	}
	a := first.args
	m := &merger{at: at, args: a, grid: make([][]*rank, a.pp)}
	for p := range a.pp {
		m.grid[p] = make([]*rank, a.tp)
	}
	for _, f := range found {
		k := first
		if f.name != first.folder {
			if k, err = read(f, false); err != nil {
				return nil, err
			}
		}
		if field, mine, theirs := a.agree(k.args); field != "" {
			return nil, fmt.Errorf("%s: %w: the ranks' args disagree: args.%s is %s on %s, %s on %s", at, ckpterr.ErrCorrupt, field, describe(mine), first.folder, describe(theirs), k.folder)
		}
		m.grid[f.pp][f.tp] = k
	}
	if err := m.layers(); err != nil {
		return nil, err
	}
	model, extra, err := m.model()
	if err != nil {
		return nil, err
	}
	opt, err := m.optimizer()
	if err != nil {
		return nil, err
	}
	if out.Root, err = m.root(model, extra, opt); err != nil {
		return nil, err
	}
	return out, nil
}

// openRank reads one rank folder: its model_optim_rng.pt (its args parsed, its model
// flattened) and its distrib_optim.pt; the folder's other files are returned as ignored.
// Both files are checked by files. The first rank's args are the save's: the rank folders
// found are checked against them (checkRankSet) before anything else is read.
func openRank(ctx context.Context, dir, iter string, f rankFolder, files *rankFiles, op Openers, out *statedict.Checkpoint, first bool, found []rankFolder) (*rank, []string, error) {
	at := storage.Join(dir, iter, f.name)
	entries, err := storage.ReadDir(ctx, at)
	if err != nil {
		return nil, nil, err
	}
	var ignored []string
	hasOptim := false
	for _, e := range entries {
		switch e.Name() {
		case RankFile:
		case DistribOptimFile:
			hasOptim = true
		default:
			ignored = append(ignored, path.Join(iter, f.name, e.Name()))
		}
	}
	k := &rank{folder: f.name, tp: f.tp, pp: f.pp, byName: map[string]*statedict.Tensor{}}
	if k.file, err = files.check(ctx, f.name, RankFile); err != nil {
		return nil, nil, err
	}
	ck, err := op.File(ctx, k.file)
	if err != nil {
		return nil, nil, err
	}
	out.Closers = append(out.Closers, ck.Closers...)
	if err := statedict.CheckExpansion(ck.Root); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", k.file, err)
	}
	root, ok := ck.Root.(*statedict.Dict)
	if !ok {
		return nil, nil, fmt.Errorf("%s: %w: holds %s, not the dict Megatron saves", k.file, ckpterr.ErrCorrupt, describe(ck.Root))
	}
	k.root = root
	if first {
		if err := checkRankSet(storage.Join(dir, iter), found, root); err != nil {
			return nil, nil, err
		}
	}
	if len(f.id) > 2 {
		return nil, nil, fmt.Errorf("%s: %w: %s is an expert-parallel rank (mp_rank_TT_PPP_EEE): ckpt merges dense GPT models only", storage.Join(dir, iter), ckpterr.ErrUnsupported, f.name)
	}
	av, _ := root.Get("args")
	if k.args, err = parseArgs(av); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", k.file, err)
	}
	if k.tp >= k.args.tp || k.pp >= k.args.pp {
		return nil, nil, fmt.Errorf("%s: %w: the rank folder %s is not a rank of its args' tensor parallel %d × pipeline parallel %d", storage.Join(dir, iter), ckpterr.ErrCorrupt, f.name, k.args.tp, k.args.pp)
	}
	if v, _ := root.Get("checkpoint_version"); !versionAtLeast2(v) {
		return nil, nil, fmt.Errorf("%s: %w: checkpoint_version %s: checkpoints before 2.0 order the fused query-key-value rows differently", k.file, ckpterr.ErrUnsupported, describe(v))
	}
	mv, ok := root.Get("model")
	if !ok {
		if _, vpp := root.Get("model0"); vpp {
			return nil, nil, fmt.Errorf("%s: %w: model0, model1, …: virtual pipeline stages, which ckpt does not merge", k.file, ckpterr.ErrUnsupported)
		}
		return nil, nil, fmt.Errorf("%s: %w: no model", k.file, ckpterr.ErrCorrupt)
	}
	md, ok := mv.(*statedict.Dict)
	if !ok {
		return nil, nil, fmt.Errorf("%s: %w: model is %s, not a state dict", k.file, ckpterr.ErrCorrupt, describe(mv))
	}
	if err := flatten(md, "", map[*statedict.Dict]bool{}, &k.model); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", k.file, err)
	}
	for _, e := range k.model {
		if t, ok := e.Value.(*statedict.Tensor); ok {
			k.byName[e.Key.(string)] = t
		}
	}
	if hasOptim {
		if k.optim, err = files.check(ctx, f.name, DistribOptimFile); err != nil {
			return nil, nil, err
		}
		ck, err := op.File(ctx, k.optim)
		if err != nil {
			return nil, nil, err
		}
		out.Closers = append(out.Closers, ck.Closers...)
		if err := statedict.CheckExpansion(ck.Root); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", k.optim, err)
		}
		bufs, err := parseDistribOptim(ck.Root)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", k.optim, err)
		}
		if err := k.placeState(bufs); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", k.optim, err)
		}
	}
	return k, ignored, nil
}

// names lists at most a few items.
func names(items []string) string {
	const most = 8
	if len(items) > most {
		return strings.Join(items[:most], ", ") + fmt.Sprintf(" and %d more", len(items)-most)
	}
	return strings.Join(items, ", ")
}

func versionAtLeast2(v statedict.Value) bool {
	switch x := v.(type) {
	case float64:
		return x >= 2
	case int64:
		return x >= 2
	}
	return false
}

// flatten lists a model state dict's entries by their dotted names, nested dicts (the
// legacy model's language_model → embedding → word_embeddings) flattened. A dict met twice
// (shared or containing itself, as a pickle can make it) is refused: a module's state dict
// nests each of its children once.
func flatten(d *statedict.Dict, prefix string, seen map[*statedict.Dict]bool, out *[]statedict.Entry) error {
	if seen[d] || len(seen) > maxModelDicts {
		return fmt.Errorf("%w: model: the dict at %q is met twice or the model nests more than %d dicts", ckpterr.ErrCorrupt, prefix, maxModelDicts)
	}
	seen[d] = true
	for _, e := range d.Entries() {
		k, ok := e.Key.(string)
		if !ok {
			return fmt.Errorf("%w: model key %s under %q is not a name", ckpterr.ErrCorrupt, statedict.KeyString(e.Key), prefix)
		}
		name := statedict.JoinName(prefix, k)
		if sub, ok := e.Value.(*statedict.Dict); ok {
			if err := flatten(sub, name, seen, out); err != nil {
				return err
			}
			continue
		}
		*out = append(*out, statedict.Entry{Key: name, Value: e.Value})
	}
	return nil
}

// maxModelDicts bounds the dicts a rank's model nests (the legacy model nests a few).
const maxModelDicts = 1 << 16

// placeState ties each trainable parameter of the rank to its slices of the distributed
// optimizer's flat buffers (bufferLayout): the parameters of each buffer's dtype, in model
// order, the shared embedding flagged when tied embeddings span stages.
func (k *rank) placeState(bufs []flatBuffer) error {
	var dtypes []statedict.DType
	byDType := map[statedict.DType][]string{}
	var numParams int64
	for _, e := range k.model {
		name := e.Key.(string)
		t, ok := e.Value.(*statedict.Tensor)
		if !ok || isExtraState(name) {
			continue
		}
		if _, seen := byDType[t.DType]; !seen {
			dtypes = append(dtypes, t.DType)
		}
		byDType[t.DType] = append(byDType[t.DType], name)
		numParams += t.NumEl()
	}
	if len(dtypes) != len(bufs) {
		return fmt.Errorf("%w: %d buffers for parameters of %d dtypes", ckpterr.ErrCorrupt, len(bufs), len(dtypes))
	}
	k.state = map[string][]namedTensor{}
	size := k.args.bucketSizeOf(k.pp, numParams)
	shared := k.args.tied && k.args.pp > 1
	for i, b := range bufs {
		if b.dtype != dtypes[i] {
			return fmt.Errorf("%w: buffer %d %s, but the model's parameters of dtype %s come next", ckpterr.ErrCorrupt, i, b.key, dtypes[i])
		}
		names := byDType[b.dtype]
		params := make([]layoutParam, len(names))
		for j, n := range names {
			params[j] = layoutParam{numel: k.byName[n].NumEl(), shared: shared && (embeddingName.MatchString(n) && k.pp == 0 || isHead(n, k.args) && k.pp == k.args.pp-1)}
		}
		starts, err := placeParams(b, params, size, names)
		if err != nil {
			return err
		}
		for j, n := range names {
			for ki, key := range b.keys {
				v, err := view(b.flat[ki], starts[j], k.byName[n].Shape)
				if err != nil {
					return fmt.Errorf("buffer %d %s of %s: %w", i, key, n, err)
				}
				k.state[n] = append(k.state[n], namedTensor{key, v})
			}
		}
	}
	return nil
}

// isHead reports whether name is the last stage's copy of tied embeddings.
func isHead(name string, a *runArgs) bool {
	s, _ := classify(name)
	return s.split == tiedHead || a.tied && outputName.MatchString(name)
}

func isExtraState(name string) bool {
	return name == "_extra_state" || strings.HasSuffix(name, "._extra_state")
}

// layers names every entry of the merged model: each stage's entries as its first tensor
// rank lists them — every tensor rank of a stage must list the same — with its layers
// renumbered after the layers of the stages before it (stages hold consecutive layers,
// numbered from 0 each), which must add up to the args' num_layers.
func (m *merger) layers() error {
	var offset int64
	for p, stage := range m.grid {
		r0 := stage[0]
		for _, k := range stage[1:] {
			if err := sameNames(r0, k); err != nil {
				return fmt.Errorf("%s: %w", m.at, err)
			}
		}
		seen := map[int64]bool{}
		var most int64 = -1
		for _, e := range r0.model {
			local := e.Key.(string)
			c, ok := classify(local)
			if !ok {
				return fmt.Errorf("%s: %w: %s: a layer ckpt cannot prove it merges (not a dense GPT model's parameter: Megatron's GPTModel, core or legacy; mixtures of experts, multi-latent attention and other models are not merged)", r0.file, ckpterr.ErrUnsupported, local)
			}
			name := local
			if c.layer >= 0 {
				seen[c.layer] = true
				most = max(most, c.layer)
				name = c.prefix + strconv.FormatInt(offset+c.layer, 10) + "." + c.rest
			}
			if c.split == vocab && outputName.MatchString(local) && m.args.tied {
				c.split = tiedHead
			}
			if c.split == tiedHead {
				if !m.args.tied || m.args.pp == 1 || int64(p) != m.args.pp-1 {
					return fmt.Errorf("%s: %w: %s: a copy of tied word embeddings where the args (untie_embeddings_and_output_weights, %d pipeline stages) put none", r0.file, ckpterr.ErrCorrupt, local, m.args.pp)
				}
				if m.head != nil {
					return fmt.Errorf("%s: %w: two copies of the tied word embeddings (%s, %s)", r0.file, ckpterr.ErrCorrupt, m.head.local, local)
				}
				m.head = &entry{name: name, local: local, split: tiedHead, stage: int64(p)}
				continue
			}
			if _, isT := e.Value.(*statedict.Tensor); !isT && c.split != extraState {
				return fmt.Errorf("%s: %w: model entry %s is %s, not a tensor", r0.file, ckpterr.ErrCorrupt, local, describe(e.Value))
			}
			m.entries = append(m.entries, entry{name: name, local: local, split: c.split, stage: int64(p), rest: c.rest})
		}
		if int64(len(seen)) != most+1 {
			return fmt.Errorf("%s: %w: stage %d numbers its layers %s, not 0 to %d", m.at, ckpterr.ErrCorrupt, p, layerList(seen), len(seen)-1)
		}
		offset += most + 1
	}
	if offset != m.args.layers {
		return fmt.Errorf("%s: %w: the %d pipeline stages hold %d layers, args.num_layers says %d", m.at, ckpterr.ErrCorrupt, len(m.grid), offset, m.args.layers)
	}
	if m.args.tied && m.args.pp > 1 && m.head == nil {
		return fmt.Errorf("%s: %w: tied word embeddings over %d pipeline stages, but the last stage holds no copy of them", m.at, ckpterr.ErrCorrupt, m.args.pp)
	}
	seen := map[string]bool{}
	for _, e := range m.entries {
		if seen[e.name] {
			return fmt.Errorf("%s: %w: two stages hold %s", m.at, ckpterr.ErrCorrupt, e.name)
		}
		seen[e.name] = true
	}
	return nil
}

func layerList(seen map[int64]bool) string {
	var ls []int64
	for l := range seen {
		ls = append(ls, l)
	}
	slices.Sort(ls)
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = strconv.FormatInt(l, 10)
	}
	return names(s)
}

// sameNames refuses two ranks of a stage whose models list different entries.
func sameNames(a, b *rank) error {
	for i, e := range a.model {
		if i >= len(b.model) {
			return fmt.Errorf("%w: %s holds %s, %s does not", ckpterr.ErrCorrupt, a.folder, e.Key, b.folder)
		}
		if e.Key != b.model[i].Key {
			return fmt.Errorf("%w: entry %d of the model is %s on %s, %s on %s", ckpterr.ErrCorrupt, i, e.Key, a.folder, b.model[i].Key, b.folder)
		}
	}
	if len(b.model) > len(a.model) {
		return fmt.Errorf("%w: %s holds %s, %s does not", ckpterr.ErrCorrupt, b.folder, b.model[len(a.model)].Key, a.folder)
	}
	return nil
}

// tensorOf picks, on a rank, the tensor of a local name: the weight (key "") or one of
// its optimizer states.
type tensorOf func(k *rank, local, key string) (*statedict.Tensor, error)

func weightOf(k *rank, local, _ string) (*statedict.Tensor, error) {
	t, ok := k.byName[local]
	if !ok {
		return nil, fmt.Errorf("%s: %w: no tensor %s", k.file, ckpterr.ErrCorrupt, local)
	}
	return t, nil
}

func stateOf(k *rank, local, key string) (*statedict.Tensor, error) {
	for _, s := range k.state[local] {
		if s.key == key {
			return s.t, nil
		}
	}
	return nil, fmt.Errorf("%s: %w: no %s for %s", k.optim, ckpterr.ErrCorrupt, key, local)
}

// merge builds the global tensor of entry e (its weight, or its optimizer state key)
// from the tensor ranks of its stage, as its split says.
func (m *merger) merge(e entry, key string, get tensorOf) (*statedict.Tensor, error) {
	stage := m.grid[e.stage]
	parts := make([]part, len(stage))
	for i, k := range stage {
		t, err := get(k, e.local, key)
		if err != nil {
			return nil, err
		}
		parts[i] = part{copyOf: copyOf{t, k.folder}}
		if len(t.Shape) == 0 {
			return nil, fmt.Errorf("%s: %w: %s is a scalar on %s, not a layer's weight", m.at, ckpterr.ErrCorrupt, e.name, k.folder)
		}
		parts[i].n = t.Shape[0]
	}
	a, tp := m.args, int64(len(stage))
	rows := parts[0].n
	for _, p := range parts[1:] {
		if e.split != replicated && p.n != rows {
			return nil, fmt.Errorf("%s: %w: %s has %d rows on %s and %d on %s: tensor-parallel ranks hold equal slices", m.at, ckpterr.ErrCorrupt, e.name, rows, parts[0].where, p.n, p.where)
		}
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w: %s: %s", m.at, ckpterr.ErrCorrupt, e.name, fmt.Sprintf(format, args...))
	}
	switch e.split {
	case replicated:
		p := parts[0]
		p.replicas = make([]copyOf, 0, len(parts)-1)
		for _, o := range parts[1:] {
			p.replicas = append(p.replicas, o.copyOf)
		}
		return concat(e.name, 0, []part{p})
	case vocab:
		if rows*tp != a.padded {
			return nil, fail("%d rows on each of %d tensor-parallel ranks, but args.padded_vocab_size is %d", rows, tp, a.padded)
		}
		if err := m.hidden(e, parts[0].t, 1); err != nil {
			return nil, err
		}
		real := a.padded
		if a.vocab > 0 {
			real = a.vocab
		}
		var kept []part
		for i, p := range parts {
			p.n = min(rows, real-int64(i)*rows)
			if p.n <= 0 {
				break
			}
			if m.head != nil && embeddingName.MatchString(e.local) {
				last := m.grid[a.pp-1][i]
				h, err := get(last, m.head.local, key)
				if err != nil {
					return nil, err
				}
				p.replicas = []copyOf{{h, last.folder}}
			}
			kept = append(kept, p)
		}
		return concat(e.name, 0, kept)
	case qkv:
		perGroup := a.heads / max(a.groups, 1)
		heads := perGroup + 2
		if a.outputGate {
			heads += perGroup
		}
		switch {
		case a.groups <= 0 || a.heads%a.groups != 0:
			return nil, fail("%d attention heads do not form %d query groups (args)", a.heads, a.groups)
		case a.groups%tp != 0:
			// Megatron's attention divides the query groups over the tensor-parallel ranks
			// (divide() asserts it): each rank holds whole groups.
			return nil, fail("%d query groups do not divide over %d tensor-parallel ranks (args): Megatron gives each rank whole query groups", a.groups, tp)
		case rows*tp != a.groups*heads*a.kv:
			return nil, fail("%d rows on each of %d tensor-parallel ranks do not divide into the args' %d query groups of %d query heads, a key and a value head of %d channels each (%d rows)",
				rows, tp, a.groups, perGroup, a.kv, a.groups*heads*a.kv)
		}
		if err := m.hidden(e, parts[0].t, 1); err != nil {
			return nil, err
		}
		return concat(e.name, 0, parts)
	case fc1:
		want := a.ffn
		if a.swiglu {
			want *= 2
		}
		if rows*tp != want || a.swiglu && rows%2 != 0 {
			return nil, fail("%d rows on each of %d tensor-parallel ranks, the args' MLP needs %d (ffn_hidden_size %d, swiglu %v: each rank's gate and up halves)", rows, tp, want, a.ffn, a.swiglu)
		}
		if err := m.hidden(e, parts[0].t, 1); err != nil {
			return nil, err
		}
		if !a.swiglu {
			return concat(e.name, 0, parts)
		}
		// Each rank's gate half, then each rank's up half.
		halves := make([]part, 0, 2*len(parts))
		for _, half := range []int64{0, 1} {
			for _, p := range parts {
				p.from, p.n = half*rows/2, rows/2
				halves = append(halves, p)
			}
		}
		return concat(e.name, 0, halves)
	case row:
		t := parts[0].t
		if len(t.Shape) != 2 {
			return nil, fail("a %d-dimensional row-parallel weight", len(t.Shape))
		}
		want := a.ffn
		if strings.HasPrefix(e.rest, "self_attention.") {
			want = a.heads * a.kv
		}
		for i := range parts {
			if len(parts[i].t.Shape) != 2 {
				return nil, fail("a %d-dimensional row-parallel weight on %s", len(parts[i].t.Shape), parts[i].where)
			}
			parts[i].n = parts[i].t.Shape[1]
			if parts[i].n != t.Shape[1] {
				return nil, fail("%d columns on %s and %d on %s: tensor-parallel ranks hold equal slices", t.Shape[1], parts[0].where, parts[i].n, parts[i].where)
			}
		}
		if t.Shape[1]*tp != want {
			return nil, fail("%d columns on each of %d tensor-parallel ranks, the args say %d", t.Shape[1], tp, want)
		}
		if err := m.hidden(e, t, 0); err != nil {
			return nil, err
		}
		return concat(e.name, 1, parts)
	}
	return nil, fail("a %s entry is not a tensor to merge", e.split)
}

// hidden checks that dimension dim of a 2-D weight is the args' hidden size.
func (m *merger) hidden(e entry, t *statedict.Tensor, dim int) error {
	if len(t.Shape) == 1 {
		return nil // a bias
	}
	if len(t.Shape) != 2 || t.Shape[dim] != m.args.hidden {
		return fmt.Errorf("%s: %w: %s is %v, not a weight of the args' hidden size %d", m.at, ckpterr.ErrCorrupt, e.name, t.Shape, m.args.hidden)
	}
	return nil
}

// model merges the weights, each entry's tensor as its split says, into a state dict of
// tensors only; Transformer Engine's extra state (FP8 metadata, meaningless to any other
// runtime) goes to extra, kept when every rank holding it holds the same.
func (m *merger) model() (model, extra *statedict.Dict, err error) {
	model = statedict.NewDictSize("collections.OrderedDict", len(m.entries))
	for _, e := range m.entries {
		if e.split == extraState {
			v, err := m.extraState(e)
			if err != nil {
				return nil, nil, err
			}
			if extra == nil {
				extra = statedict.NewDict("")
			}
			extra.Append(e.name, v)
			continue
		}
		t, err := m.merge(e, "", weightOf)
		if err != nil {
			return nil, nil, err
		}
		model.Append(e.name, t)
	}
	return model, extra, nil
}

func (m *merger) extraState(e entry) (statedict.Value, error) {
	stage := m.grid[e.stage]
	v0 := valueOf(stage[0], e.local)
	for _, k := range stage[1:] {
		eq, err := equalValue(v0, valueOf(k, e.local))
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", m.at, e.name, err)
		}
		if !eq {
			return nil, fmt.Errorf("%s: %w: %s: Transformer Engine's extra state (FP8 scaling history) differs between %s and %s: it belongs to each rank's slice and does not merge",
				m.at, ckpterr.ErrUnsupported, e.name, stage[0].folder, k.folder)
		}
	}
	return v0, nil
}

func valueOf(k *rank, local string) statedict.Value {
	for _, e := range k.model {
		if e.Key == local {
			return e.Value
		}
	}
	return nil
}

// ExtraStateKey is the entry of a merged checkpoint beside "model" that holds the model's
// Transformer Engine _extra_state values by name.
const ExtraStateKey = "model_extra_state"

// root assembles the merged checkpoint: the first rank's tree with the merged model (and
// its extra state under ExtraStateKey) and optimizer state; args as the first rank saved them (the run's); every other entry once
// when every rank holds the same, and otherwise per rank, keyed by rank folder (RNG states:
// each rank's own, never one rank's given to all).
func (m *merger) root(model, extra, opt *statedict.Dict) (*statedict.Dict, error) {
	r0 := m.grid[0][0]
	var ranks []*rank
	for t := range m.grid[0] {
		for p := range m.grid {
			ranks = append(ranks, m.grid[p][t])
		}
	}
	for _, k := range ranks[1:] {
		for _, e := range k.root.Entries() {
			if _, ok := r0.root.Get(e.Key); !ok {
				return nil, fmt.Errorf("%s: %w: %s holds %s, %s does not", m.at, ckpterr.ErrCorrupt, k.folder, statedict.KeyString(e.Key), r0.folder)
			}
		}
	}
	out := statedict.NewDict(r0.root.Class)
	for _, e := range r0.root.Entries() {
		switch e.Key {
		case "args":
			out.Set(e.Key, e.Value)
			continue
		case "model":
			out.Set(e.Key, model)
			if extra != nil {
				out.Set(ExtraStateKey, extra)
			}
			continue
		case "optimizer":
			if opt == nil {
				continue
			}
			out.Set(e.Key, opt)
			if gs := fieldPath(r0.root, "optimizer", "grad_scaler"); gs != nil {
				v, err := m.perRank(ranks, "grad_scaler", func(k *rank) (statedict.Value, bool) {
					v := fieldPath(k.root, "optimizer", "grad_scaler")
					return v, v != nil
				})
				if err != nil {
					return nil, err
				}
				out.Set("grad_scaler", v)
			}
			continue
		}
		v, err := m.perRank(ranks, statedict.KeyString(e.Key), func(k *rank) (statedict.Value, bool) { return k.root.Get(e.Key) })
		if err != nil {
			return nil, err
		}
		out.Set(e.Key, v)
	}
	return out, nil
}

// perRank is the value every rank holds under name when they all hold the same, otherwise a
// dict of each rank's, keyed by rank folder.
func (m *merger) perRank(ranks []*rank, name string, get func(*rank) (statedict.Value, bool)) (statedict.Value, error) {
	v0, _ := get(ranks[0])
	same := true
	for _, k := range ranks[1:] {
		v, ok := get(k)
		if !ok {
			return nil, fmt.Errorf("%s: %w: %s holds no %s, %s does", m.at, ckpterr.ErrCorrupt, k.folder, name, ranks[0].folder)
		}
		eq, err := equalValue(v0, v)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", k.file, name, err)
		}
		same = same && eq
	}
	if same {
		return v0, nil
	}
	d := statedict.NewDict("")
	for _, k := range ranks {
		v, _ := get(k)
		d.Set(k.folder, v)
	}
	return d, nil
}
