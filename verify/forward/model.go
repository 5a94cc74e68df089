package forward

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Precision selects how the matrix products are computed.
type Precision int

const (
	// Float32 is the reference: weights widened exactly to float32, float32 activations and
	// accumulation, as transformers runs a model loaded with dtype=float32.
	Float32 Precision = iota
	// TPU computes as a TPU's matrix unit does at default precision: every matrix product's
	// inputs (weights, activations, attention scores and values) rounded to bfloat16 to
	// nearest even, products exact and accumulated in float32; everything else in float32.
	TPU
)

// String names the precision as --precision spells it.
func (p Precision) String() string {
	if p == TPU {
		return "tpu"
	}
	return "float32"
}

// ParsePrecision reads "float32" or "tpu".
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "float32", "fp32":
		return Float32, nil
	case "tpu", "bf16":
		return TPU, nil
	}
	return 0, fmt.Errorf("precision %q: float32 or tpu", s)
}

// Options configure a Model.
type Options struct {
	Precision Precision
	// KeepFP8 (TPU precision) keeps FP8-quantized weights as FP8, as a target with FP8
	// matrix units (TPU7x) runs them: the product uses code×scale exactly instead of the
	// weight dequantized to bfloat16. Without it FP8 weights are dequantized to bfloat16,
	// bit for bit as ckpt convert writes them.
	KeepFP8 bool
	// Config is config.json's content; nil reads config.json from the checkpoint folder or
	// from beside the checkpoint file.
	Config []byte
	// Shards runs a per-device checkpoint (one with statedict.Checkpoint.Shards) as its
	// devices hold it: every matrix product (attention, MLP, experts, router, lm_head) is
	// computed piece by piece from the local pieces the ranks store — each part's product
	// with the matching slice of the activations — and combined as the collectives would
	// (disjoint output slices gathered, partial sums over the input dimension added in
	// float32), and embedding rows are gathered from the pieces holding them. Vectors
	// (norms, biases) are read gathered from their pieces. Without it, or for a checkpoint
	// without shards, the whole reassembled tensors are used.
	Shards bool
	// MemoryLimit bounds the activations (and logits) a forward pass allocates, in bytes:
	// a longer sequence is refused before anything is allocated. 0 means
	// DefaultMemoryLimit, negative no limit.
	MemoryLimit int64
}

// Model is a decoder-only language model ready to run, its weights read lazily from the
// checkpoint they were opened from.
type Model struct {
	cfg   *Config
	opts  Options
	ck    *statedict.Checkpoint
	owned bool

	embed, pos       *matrix
	projIn, projOut  *linearW
	head             *linearW
	embedNorm, final *normW
	headT            *headTW
	blocks           []*blockW
	sharded          Sharded
}

// Open opens the checkpoint at path (any format formats.Open reads) and loads the model;
// Close releases the checkpoint.
func Open(ctx context.Context, path string, opts Options) (*Model, error) {
	ck, err := formats.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	m, err := Load(ctx, ck, opts)
	if err != nil {
		ck.Close()
		return nil, err
	}
	m.owned = true
	return m, nil
}

// Load prepares the forward pass over an open checkpoint: it reads the configuration, finds
// every weight the architecture needs and checks its shape (reading no weight bytes except
// small vectors), so that a missing or misshapen tensor is reported before any compute.
func Load(ctx context.Context, ck *statedict.Checkpoint, opts Options) (*Model, error) {
	cfgJSON := opts.Config
	if cfgJSON == nil {
		var err error
		if cfgJSON, err = ReadConfig(ctx, ck.Path); err != nil {
			return nil, err
		}
	}
	cfg, err := ParseConfig(cfgJSON)
	if err != nil {
		return nil, err
	}
	ws, err := newWeights(ctx, ck, cfgJSON, opts, cfg)
	if err != nil {
		return nil, err
	}
	m := &Model{cfg: cfg, opts: opts, ck: ck}
	if err := m.load(ws); err != nil {
		return nil, err
	}
	if ws.use != nil {
		m.sharded = Sharded{Ranks: len(ws.use.ranks), Pieces: ws.use.pieces, Tensors: len(ws.use.tensors)}
	}
	return m, nil
}

// ErrNoConfig is returned when a model's config.json is neither given nor found in its
// folder or beside its file: the forward pass cannot know the architecture.
var ErrNoConfig = errors.New("no config.json")

// ReadConfig reads the config.json of the checkpoint at path: inside its folder, or beside
// its file (ErrNoConfig when there is none).
func ReadConfig(ctx context.Context, path string) ([]byte, error) {
	p, err := configPath(ctx, path)
	if err != nil {
		return nil, err
	}
	return storage.ReadFile(ctx, p, 64<<20)
}

// configPath finds config.json: inside a checkpoint folder, or beside a checkpoint file.
func configPath(ctx context.Context, path string) (string, error) {
	dir := path
	if st, err := storage.Stat(ctx, path); err == nil && !st.IsDir() {
		dir = storage.Dir(path)
	}
	p := storage.Join(dir, "config.json")
	if _, err := storage.Stat(ctx, p); err != nil {
		return "", fmt.Errorf("%s: %w (looked for %s)", path, ErrNoConfig, p)
	}
	return p, nil
}

// Config is the model's configuration.
func (m *Model) Config() *Config { return m.cfg }

// Close releases the checkpoint when Open opened it.
func (m *Model) Close() error {
	if m.owned {
		return m.ck.Close()
	}
	return nil
}

// weights finds the checkpoint's tensors by their transformers names.
type weights struct {
	// prefix is what the checkpoint's names carry before the model's (a wrapper's
	// "module."); bare: the checkpoint holds the decoder alone, its names without the
	// config's Base.
	prefix  string
	base    string
	bare    bool
	tensors map[string]*statedict.Tensor
	mxfp4   map[string]*quant.Group
	round   bool // TPU precision: float32 weights are rounded to bfloat16
	// exact names weights that enter the products unrounded even in TPU precision: FP8
	// weights kept as FP8 (Options.KeepFP8), dequantized to float32 code×scale.
	exact map[string]bool
	path  string
	// shards are the checkpoint's stored pieces when the model runs from them
	// (Options.Shards); use records the ones used.
	shards map[*statedict.Tensor][]statedict.Shard
	use    *shardUse
}

func newWeights(ctx context.Context, ck *statedict.Checkpoint, cfgJSON []byte, opts Options, cfg *Config) (*weights, error) {
	list, err := ck.Tensors()
	if err != nil {
		return nil, err
	}
	ws := &weights{tensors: map[string]*statedict.Tensor{}, mxfp4: map[string]*quant.Group{}, exact: map[string]bool{},
		round: opts.Precision == TPU, path: ck.Path, base: cfg.Base}
	for _, nt := range list {
		ws.tensors[nt.Name] = nt.Tensor
	}
	if opts.Shards && ck.Shards != nil {
		ws.shards = ck.Shards
		ws.use = &shardUse{ranks: map[int]bool{}, tensors: map[*statedict.Tensor]bool{}}
	}
	var hfq []byte
	if p, err := configPath(ctx, ck.Path); err == nil {
		if b, err := storage.ReadFile(ctx, storage.Join(storage.Dir(p), quant.HFQuantConfFile), 64<<20); err == nil {
			hfq = b
		}
	}
	qcfg, err := quant.ParseConfig(cfgJSON, hfq)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ck.Path, err)
	}
	plan, err := quant.Detect(qcfg, list)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ck.Path, err)
	}
	if plan != nil {
		for _, g := range plan.Groups {
			if g.Scheme == quant.SchemeMXFP4 {
				ws.mxfp4[g.Name] = g // read from its blocks and scales, which stay listed
				continue
			}
			for _, n := range g.Members() {
				delete(ws.tensors, n)
			}
			out := statedict.Float32
			if opts.Precision == TPU {
				if opts.KeepFP8 && strings.HasPrefix(string(g.Scheme), "fp8") {
					ws.exact[g.Name] = true
				} else {
					out = statedict.BFloat16
				}
			}
			t, err := g.Dequantize(out)
			if err != nil {
				return nil, err
			}
			ws.tensors[g.Name] = t
		}
	}
	// The model's names start with its own ("model.embed_tokens.weight"); anything before
	// is a wrapper prefix ("module." from DDP, "_orig_mod." from torch.compile, a
	// checkpoint dict's key). A checkpoint of the bare decoder has them without Base.
	if err := ws.findPrefix(cfg.Embed); err != nil {
		return nil, err
	}
	return ws, nil
}

// findPrefix finds the wrapper prefix from where the embedding is stored.
func (ws *weights) findPrefix(embed string) error {
	for _, alt := range strings.Split(embed, "|") {
		for _, bare := range []bool{false, true} {
			want := alt
			if bare {
				if ws.base == "" || !strings.HasPrefix(alt, ws.base) {
					break
				}
				want = strings.TrimPrefix(alt, ws.base)
			}
			found := false
			for name := range ws.tensors {
				if p, ok := strings.CutSuffix(name, want); ok && (p == "" || strings.HasSuffix(p, ".")) {
					if found && p != ws.prefix {
						return fmt.Errorf("%s: two models in one checkpoint (%s and %s)", ws.path, ws.prefix+want, name)
					}
					ws.prefix, ws.bare, found = p, bare, true
				}
			}
			if found {
				return nil
			}
		}
	}
	return fmt.Errorf("%s: no %s: not a transformers model state dict of this architecture", ws.path, strings.ReplaceAll(embed, "|", " or "))
}

// stored is the checkpoint's name of the model's tensor name: the first of its
// alternatives ("a|b") present, with the wrapper prefix, and without Base for a bare
// decoder. The first alternative is returned when none is present.
func (ws *weights) stored(name string) string {
	alts := strings.Split(name, "|")
	for _, n := range alts {
		if s := ws.full(n); ws.tensors[s] != nil || ws.mxfp4[s] != nil {
			return s
		}
	}
	// A name outside the decoder (lm_head) at the top of a checkpoint whose decoder is
	// nested ("model.language_model." in a multimodal model's own state dict).
	if ws.bare && ws.prefix != "" {
		for _, n := range alts {
			if !strings.HasPrefix(n, ws.base) && (ws.tensors[n] != nil || ws.mxfp4[n] != nil) {
				return n
			}
		}
	}
	return ws.full(alts[0])
}

func (ws *weights) full(n string) string {
	if ws.bare {
		n = strings.TrimPrefix(n, ws.base)
	}
	return ws.prefix + n
}

// tensor is the stored tensor of a model name (stored's rules), name being the stored
// name it was found under.
func (ws *weights) tensor(model string) (t *statedict.Tensor, name string, err error) {
	name = ws.stored(model)
	t, ok := ws.tensors[name]
	if !ok {
		return nil, name, fmt.Errorf("%s: checkpoint has no tensor %s", ws.path, strings.ReplaceAll(name, "|", " or "))
	}
	if t.DType.Kind() != statedict.KindFloat {
		return nil, name, fmt.Errorf("%s: tensor %s is %s, not floating point", ws.path, name, t.DType)
	}
	if err := t.Validate(); err != nil {
		return nil, name, fmt.Errorf("%s: tensor %s: %w", ws.path, name, err)
	}
	return t, name, nil
}

// has reports whether the model name (or one of its alternatives) is stored, as a tensor
// or an MXFP4 group.
func (ws *weights) has(model string) bool {
	s := ws.stored(model)
	return ws.tensors[s] != nil || ws.mxfp4[s] != nil
}

func shapeErr(name string, got []int64, want ...int) error {
	return fmt.Errorf("tensor %s has shape %v, the config needs %v", name, got, want)
}

// mat is a 2-D weight used as [rows, cols]: stored so, or [cols, rows] when transposed
// (GPT-2's Conv1D); round applies the TPU rounding to it (unless the weight is kept exact).
func (ws *weights) mat(model string, rows, cols int, transposed, round bool) (*matrix, error) {
	t, name, err := ws.tensor(model)
	if err != nil {
		return nil, err
	}
	round = round && !ws.exact[name]
	a, b := rows, cols
	if transposed {
		a, b = cols, rows
	}
	if len(t.Shape) != 2 || t.Shape[0] != int64(a) || t.Shape[1] != int64(b) {
		return nil, shapeErr(name, t.Shape, a, b)
	}
	v := view{name: name, t: t, base: t.Offset, rs: t.Strides[0], cs: t.Strides[1], rows: rows, cols: cols}
	if transposed {
		v.rs, v.cs = t.Strides[1], t.Strides[0]
	}
	m, err := matrixOf(v, round)
	if err != nil {
		return nil, err
	}
	return m, ws.shardedMat(m, name, t, transposed, round)
}

// expert is expert e's [rows, cols] matrix of a stacked [E, rows, cols] weight, or of an
// [E, cols, rows] one when transposed (gpt-oss stores x·W layouts).
func (ws *weights) expert(model string, e, experts, rows, cols int, transposed bool) (*matrix, error) {
	if g, ok := ws.mxfp4[ws.stored(model)]; ok {
		return mxfp4Expert(ws.stored(model), g, ws.tensors, e, experts, rows, cols)
	}
	t, name, err := ws.tensor(model)
	if err != nil {
		return nil, err
	}
	a, b := rows, cols
	if transposed {
		a, b = cols, rows
	}
	if len(t.Shape) != 3 || t.Shape[0] != int64(experts) || t.Shape[1] != int64(a) || t.Shape[2] != int64(b) {
		return nil, shapeErr(name, t.Shape, experts, a, b)
	}
	v := view{name: fmt.Sprintf("%s[%d]", name, e), t: t, base: t.Offset + int64(e)*t.Strides[0],
		rs: t.Strides[1], cs: t.Strides[2], rows: rows, cols: cols}
	if transposed {
		v.rs, v.cs = t.Strides[2], t.Strides[1]
	}
	round := ws.round && !ws.exact[name]
	m, err := matrixOf(v, round)
	if err != nil {
		return nil, err
	}
	return m, ws.shardedExpert(m, v.name, t, e, transposed, round)
}

// mxfp4Expert reads expert e of an MXFP4 group from its stored blocks and scales.
func mxfp4Expert(name string, g *quant.Group, tensors map[string]*statedict.Tensor, e, experts, rows, cols int) (*matrix, error) {
	if len(g.Shape) != 3 || g.Shape[0] != int64(experts) || g.Shape[1] != int64(cols) || g.Shape[2] != int64(rows) {
		return nil, fmt.Errorf("MXFP4 tensor %s has logical shape %v, the config needs [%d %d %d]", name, g.Shape, experts, cols, rows)
	}
	q := &mxfp4{name: fmt.Sprintf("%s[%d]", name, e), expert: e, rows: rows, groups: cols / 32,
		blocks: tensors[g.Weight], scales: tensors[g.Scales[0]]}
	if q.blocks == nil || q.scales == nil {
		return nil, fmt.Errorf("MXFP4 tensor %s: blocks %s or scales %s missing", name, g.Weight, g.Scales[0])
	}
	return q.matrix(), nil
}

// vec is a weight of n elements: 1-D, or any shape holding n elements contiguously (a
// per-head norm's [heads, head_dim], a scalar parameter's [] or [1]).
func (ws *weights) vec(model string, n int) ([]float32, error) {
	t, name, err := ws.tensor(model)
	if err != nil {
		return nil, err
	}
	if len(t.Shape) != 1 {
		if t.NumEl() != int64(n) || !t.IsContiguous() {
			return nil, shapeErr(name, t.Shape, n)
		}
		m, err := matrixOf(view{name: name, t: t, base: t.Offset, rs: int64(n), cs: 1, rows: 1, cols: n}, false)
		if err != nil {
			return nil, err
		}
		return m.rowsF32(0, 1)
	}
	return readVector(name, t, n)
}

// row is row r of a 2-D [rows, n] weight (a stacked bias).
func (ws *weights) row(model string, r, rows, n int) ([]float32, error) {
	t, name, err := ws.tensor(model)
	if err != nil {
		return nil, err
	}
	if len(t.Shape) != 2 || t.Shape[0] != int64(rows) || t.Shape[1] != int64(n) {
		return nil, shapeErr(name, t.Shape, rows, n)
	}
	m, err := matrixOf(view{name: name, t: t, base: t.Offset, rs: t.Strides[0], cs: t.Strides[1], rows: rows, cols: n}, false)
	if err != nil {
		return nil, err
	}
	return m.rowsF32(r, r+1)
}

var errNoTokens = errors.New("forward: no tokens")
