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
}

// Model is a decoder-only language model ready to run, its weights read lazily from the
// checkpoint they were opened from.
type Model struct {
	cfg   *Config
	opts  Options
	ck    *statedict.Checkpoint
	owned bool

	embed, lmHead *matrix
	norm          norm
	layers        []*layer
	sharded       Sharded
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
		p, err := configPath(ctx, ck.Path)
		if err != nil {
			return nil, err
		}
		if cfgJSON, err = storage.ReadFile(ctx, p, 64<<20); err != nil {
			return nil, err
		}
	}
	cfg, err := ParseConfig(cfgJSON)
	if err != nil {
		return nil, err
	}
	ws, err := newWeights(ctx, ck, cfgJSON, opts)
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

// configPath finds config.json: inside a checkpoint folder, or beside a checkpoint file.
func configPath(ctx context.Context, path string) (string, error) {
	dir := path
	if st, err := storage.Stat(ctx, path); err == nil && !st.IsDir() {
		dir = storage.Dir(path)
	}
	p := storage.Join(dir, "config.json")
	if _, err := storage.Stat(ctx, p); err != nil {
		return "", fmt.Errorf("%s: no config.json (looked for %s); give the model's config.json (ckpt forward --config FILE)", path, p)
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
	prefix  string
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

func newWeights(ctx context.Context, ck *statedict.Checkpoint, cfgJSON []byte, opts Options) (*weights, error) {
	list, err := ck.Tensors()
	if err != nil {
		return nil, err
	}
	ws := &weights{tensors: map[string]*statedict.Tensor{}, mxfp4: map[string]*quant.Group{}, exact: map[string]bool{},
		round: opts.Precision == TPU, path: ck.Path}
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
	// The decoder's names start with "model."; anything before it is a wrapper prefix
	// ("module." from DDP, "_orig_mod." from torch.compile, a checkpoint dict's key).
	const embed = "model.embed_tokens.weight"
	found := false
	for name := range ws.tensors {
		if p, ok := strings.CutSuffix(name, embed); ok && (p == "" || strings.HasSuffix(p, ".")) {
			if found && p != ws.prefix {
				return nil, fmt.Errorf("%s: two models in one checkpoint (%s and %s)", ck.Path, ws.prefix+embed, name)
			}
			ws.prefix, found = p, true
		}
	}
	if !found {
		return nil, fmt.Errorf("%s: no %s: not a decoder-only transformers model state dict", ck.Path, embed)
	}
	return ws, nil
}

func (ws *weights) tensor(name string) (*statedict.Tensor, error) {
	t, ok := ws.tensors[ws.prefix+name]
	if !ok {
		return nil, fmt.Errorf("%s: checkpoint has no tensor %s", ws.path, ws.prefix+name)
	}
	if t.DType.Kind() != statedict.KindFloat {
		return nil, fmt.Errorf("%s: tensor %s is %s, not floating point", ws.path, ws.prefix+name, t.DType)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%s: tensor %s: %w", ws.path, ws.prefix+name, err)
	}
	return t, nil
}

func (ws *weights) has(name string) bool {
	_, ok := ws.tensors[ws.prefix+name]
	return ok
}

func shapeErr(name string, got []int64, want ...int) error {
	return fmt.Errorf("tensor %s has shape %v, the config needs %v", name, got, want)
}

// mat is a 2-D [rows, cols] weight; round applies the TPU rounding to it (unless the weight
// is kept exact).
func (ws *weights) mat(name string, rows, cols int, round bool) (*matrix, error) {
	t, err := ws.tensor(name)
	if err != nil {
		return nil, err
	}
	round = round && !ws.exact[ws.prefix+name]
	if len(t.Shape) != 2 || t.Shape[0] != int64(rows) || t.Shape[1] != int64(cols) {
		return nil, shapeErr(ws.prefix+name, t.Shape, rows, cols)
	}
	m, err := matrixOf(view{name: ws.prefix + name, t: t, base: t.Offset, rs: t.Strides[0], cs: t.Strides[1], rows: rows, cols: cols}, round)
	if err != nil {
		return nil, err
	}
	return m, ws.shardedMat(m, ws.prefix+name, t, round)
}

// expert is expert e's [rows, cols] matrix of a stacked [E, rows, cols] weight, or of an
// [E, cols, rows] one when transposed (gpt-oss stores x·W layouts).
func (ws *weights) expert(name string, e, experts, rows, cols int, transposed bool) (*matrix, error) {
	if g, ok := ws.mxfp4[ws.prefix+name]; ok {
		return mxfp4Expert(ws.prefix+name, g, ws.tensors, e, experts, rows, cols)
	}
	t, err := ws.tensor(name)
	if err != nil {
		return nil, err
	}
	a, b := rows, cols
	if transposed {
		a, b = cols, rows
	}
	if len(t.Shape) != 3 || t.Shape[0] != int64(experts) || t.Shape[1] != int64(a) || t.Shape[2] != int64(b) {
		return nil, shapeErr(ws.prefix+name, t.Shape, experts, a, b)
	}
	v := view{name: fmt.Sprintf("%s%s[%d]", ws.prefix, name, e), t: t, base: t.Offset + int64(e)*t.Strides[0],
		rs: t.Strides[1], cs: t.Strides[2], rows: rows, cols: cols}
	if transposed {
		v.rs, v.cs = t.Strides[2], t.Strides[1]
	}
	round := ws.round && !ws.exact[ws.prefix+name]
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

// vec is a 1-D weight of n elements.
func (ws *weights) vec(name string, n int) ([]float32, error) {
	t, err := ws.tensor(name)
	if err != nil {
		return nil, err
	}
	return readVector(ws.prefix+name, t, n)
}

// row is row r of a 2-D [rows, n] weight (a stacked bias).
func (ws *weights) row(name string, r, rows, n int) ([]float32, error) {
	t, err := ws.tensor(name)
	if err != nil {
		return nil, err
	}
	if len(t.Shape) != 2 || t.Shape[0] != int64(rows) || t.Shape[1] != int64(n) {
		return nil, shapeErr(ws.prefix+name, t.Shape, rows, n)
	}
	m, err := matrixOf(view{name: ws.prefix + name, t: t, base: t.Offset, rs: t.Strides[0], cs: t.Strides[1], rows: rows, cols: n}, false)
	if err != nil {
		return nil, err
	}
	return m.rowsF32(r, r+1)
}

var errNoTokens = errors.New("forward: no tokens")
