package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/verify/forward"
	"github.com/ckpt-dev/ckpt/verify/forward/kernel"
)

// ForwardOptions configure Forward.
type ForwardOptions struct {
	// Tokens are the token ids run; nil runs DefaultTokens of the model's vocabulary.
	Tokens []int
	// Generation is the TPU generation the converted checkpoint is for: FP8 weights it
	// runs natively (runtime.Generation.NativeWeight) stay FP8 in the converted run. nil
	// takes the generation of the target DST's manifest records, else dequantizes every
	// FP8 weight to bfloat16, as a TPU without FP8 matrix units runs it.
	Generation *runtime.Generation
	// Manifest is the manifest the conversion is read from, as for ParityOptions ("" DST's
	// own, "-" none).
	Manifest string
	// Config is config.json for both sides; nil reads each side's own (in its folder or
	// beside its file), or the other side's when one has none.
	Config []byte
	// Thresholds decide the verdict (zero value: DefaultThresholds).
	Thresholds *Thresholds
}

// ForwardReport is what Forward found: `ckpt verify --forward --json`'s "forward" section.
type ForwardReport struct {
	Src       string `json:"src"`
	Dst       string `json:"dst"`
	ModelType string `json:"model_type"`
	// Reference and Converted say how each side ran: "float32" for the source (quantized
	// weights dequantized exactly), "tpu" for the converted checkpoint (bf16 matrix-unit
	// inputs, float32 accumulation), with "+fp8" when FP8 weights stayed FP8.
	Reference  string `json:"reference"`
	Converted  string `json:"converted"`
	Generation string `json:"generation,omitempty"`
	Kernel     string `json:"kernel"`
	// Shards, for a per-device DST, says the converted side ran from the pieces its ranks
	// hold, device by device (forward.Options.Shards); nil when it ran from whole tensors.
	Shards *forward.Sharded `json:"shards,omitempty"`
	*LogitsReport
	Seconds float64 `json:"seconds"`
}

// Err is nil when every threshold holds, else an error naming the failures that matches
// ErrFailed.
func (r *ForwardReport) Err() error {
	if r.OK() {
		return nil
	}
	return fmt.Errorf("%s vs %s: forward pass: %s: %w", r.Src, r.Dst, strings.Join(r.Failed, "; "), ErrFailed)
}

// Logits are the runs' logits [T, vocab] — the source in float32, the source as a TPU
// computes it, the converted checkpoint as a TPU computes it — computed on demand from the
// runs' final hidden states a block of positions at a time (Rows), so that no
// [T, vocab] array need exist; and both sides' config.json, for writing a reference
// (EmitTorch). Without runs (Computed false: the Go forward pass has no family for the
// model) they hold the tokens and configurations only, and the emitted script computes
// both sides.
type Logits struct {
	Tokens []int
	Vocab  int
	// Config is the converted side's config.json, SourceConfig the source's.
	Config, SourceConfig []byte
	ref, refTPU, got     *forward.States
	// open are the checkpoints the runs read their weights from, until Close.
	open []*statedict.Checkpoint
}

// Close releases the checkpoints the logits are computed from; Rows fails after it.
func (l *Logits) Close() error {
	var err error
	for _, ck := range l.open {
		err = errors.Join(err, ck.Close())
	}
	l.open, l.ref, l.refTPU, l.got = nil, nil, nil, nil
	return err
}

// Computed reports whether the Go forward pass ran both sides (and the logits are not
// closed).
func (l *Logits) Computed() bool { return l.ref != nil }

// Rows writes the logits of positions [t0, t1) of the three runs into ref, refTPU and got
// ([t1−t0, vocab] each).
func (l *Logits) Rows(ref, refTPU, got []float32, t0, t1 int) error {
	if !l.Computed() {
		return fmt.Errorf("no logits: the Go forward pass did not run this model, or they were closed")
	}
	for _, r := range []struct {
		dst []float32
		s   *forward.States
	}{{ref, l.ref}, {refTPU, l.refTPU}, {got, l.got}} {
		if err := r.s.Logits(r.dst, t0, t1); err != nil {
			return err
		}
	}
	return nil
}

// logitRows is how many positions' logits of three runs fit the working block.
func logitRows(vocab int) int { return max(1, (48<<20)/(12*vocab)) }

// NoFamilyError is Forward's error when the Go forward pass has no family for the model:
// EmitTorch still writes a check that runs both sides with transformers.
type NoFamilyError struct {
	Err error
}

func (e *NoFamilyError) Error() string {
	return fmt.Sprintf("%v; a script that runs both sides with transformers (the source on the CPU in float32, DST on the device) checks it with the same report and thresholds", e.Err)
}

func (e *NoFamilyError) Unwrap() error { return e.Err }

// DefaultTokens are the ids run when none are given: 32 ids spread over the vocabulary
// by a fixed linear congruential sequence, the same for every run of a model.
func DefaultTokens(vocab int) []int {
	ids := make([]int, 32)
	x := uint64(12345)
	for i := range ids {
		x = x*6364136223846793005 + 1442695040888963407
		ids[i] = int((x >> 33) % uint64(vocab))
	}
	return ids
}

// Forward runs the model at src as the reference — float32, quantized weights dequantized
// exactly — and the converted checkpoint at dst as a TPU runs it — every matrix product's
// inputs rounded to bfloat16, accumulated in float32, FP8 weights kept FP8 where the target
// generation runs them natively — on the same tokens, and compares the logits position by
// position against the thresholds. The source also runs as a TPU runs it, to tell the
// TPU's arithmetic from the conversion (see Thresholds). Both sides are read with
// formats.Open. A per-device DST (a multi-rank DCP directory, a per-device safetensors
// folder) runs as its devices hold it: every matrix product is computed from the pieces the
// ranks store and combined as the collectives would (forward.Options.Shards), so the
// sharding plan is exercised the way the devices compute; the source runs from whole
// tensors.
func Forward(ctx context.Context, src, dst string, opts ForwardOptions) (*ForwardReport, *Logits, error) {
	start := time.Now()
	th := DefaultThresholds()
	if opts.Thresholds != nil {
		th = *opts.Thresholds
	}
	sck, err := formats.Open(ctx, src)
	if err != nil {
		return nil, nil, err
	}
	dck, err := openOutput(ctx, dst)
	if err != nil {
		sck.Close()
		return nil, nil, err
	}
	// The checkpoints stay open while the returned Logits can compute rows from them.
	kept := false
	defer func() {
		if !kept {
			sck.Close()
			dck.Close()
		}
	}()
	scfg, dcfg, err := configs(ctx, sck, dck, opts.Config)
	if err != nil {
		return nil, nil, err
	}
	if opts.Generation == nil && opts.Manifest != "-" {
		c, _, _, err := conversionFor(ctx, dst, ParityOptions{Manifest: opts.Manifest})
		if err != nil {
			return nil, nil, err
		}
		if c.Target != nil {
			opts.Generation = c.Target.Generation
		}
	}
	keep, err := keepFP8(dck, dcfg, opts.Generation)
	if err != nil {
		return nil, nil, err
	}
	skeep, err := keepFP8(sck, scfg, opts.Generation)
	if err != nil {
		return nil, nil, err
	}
	ref, err := forward.Load(ctx, sck, forward.Options{Precision: forward.Float32, Config: scfg})
	if forward.IsUnsupported(err) {
		return nil, genericLogits(opts.Tokens, scfg, dcfg), &NoFamilyError{Err: fmt.Errorf("the source: %w", err)}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("the source: %w", err)
	}
	refTPU, err := forward.Load(ctx, sck, forward.Options{Precision: forward.TPU, KeepFP8: skeep, Config: scfg})
	if err != nil {
		return nil, nil, fmt.Errorf("the source: %w", err)
	}
	got, err := forward.Load(ctx, dck, forward.Options{Precision: forward.TPU, KeepFP8: keep, Config: dcfg, Shards: true})
	if forward.IsUnsupported(err) {
		return nil, genericLogits(opts.Tokens, scfg, dcfg), &NoFamilyError{Err: fmt.Errorf("the converted checkpoint: %w", err)}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("the converted checkpoint: %w", err)
	}
	rc, gc := ref.Config(), got.Config()
	if rc.Vocab != gc.Vocab || rc.ModelType != gc.ModelType {
		return nil, nil, fmt.Errorf("%s is a %s model with vocabulary %d, %s a %s model with vocabulary %d", src, rc.ModelType, rc.Vocab, dst, gc.ModelType, gc.Vocab)
	}
	tokens := opts.Tokens
	if tokens == nil {
		tokens = DefaultTokens(rc.Vocab)
	}
	lg := &Logits{Tokens: tokens, Vocab: rc.Vocab, Config: dcfg, SourceConfig: scfg, open: []*statedict.Checkpoint{sck, dck}}
	for _, r := range []struct {
		dst  **forward.States
		m    *forward.Model
		path string
	}{{&lg.ref, ref, src}, {&lg.refTPU, refTPU, src}, {&lg.got, got, dst}} {
		if *r.dst, err = r.m.Run(ctx, tokens); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", r.path, err)
		}
	}
	// The logits are compared a block of positions at a time.
	V := rc.Vocab
	step := logitRows(V)
	n := min(step, len(tokens))
	rl, rtl, gl := make([]float32, n*V), make([]float32, n*V), make([]float32, n*V)
	cmp := newLogitsComparer(tokens, V, th)
	for t0 := 0; t0 < len(tokens); t0 += step {
		t1 := min(t0+step, len(tokens))
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		k := (t1 - t0) * V
		if err := lg.Rows(rl[:k], rtl[:k], gl[:k], t0, t1); err != nil {
			return nil, nil, err
		}
		for i := range t1 - t0 {
			cmp.add(rl[i*V:(i+1)*V], rtl[i*V:(i+1)*V], gl[i*V:(i+1)*V])
		}
	}
	rep := &ForwardReport{Src: src, Dst: dst, ModelType: rc.ModelType, Reference: forward.Float32.String(),
		Converted: forward.TPU.String(), Kernel: kernel.Current(), LogitsReport: cmp.finish()}
	if keep {
		rep.Converted += "+fp8"
	}
	if s := got.Sharded(); s.Pieces > 0 {
		rep.Shards = &s
	}
	if opts.Generation != nil {
		rep.Generation = opts.Generation.Name
	}
	rep.Seconds = time.Since(start).Seconds()
	kept = true
	return rep, lg, nil
}

// genericLogits are the Logits of a model the Go pass cannot run: the tokens (given, or
// the default ids of the vocabulary config.json declares) and both configurations.
func genericLogits(tokens []int, scfg, dcfg []byte) *Logits {
	lg := &Logits{Tokens: tokens, Config: dcfg, SourceConfig: scfg}
	var raw struct {
		Vocab int `json:"vocab_size"`
		Text  struct {
			Vocab int `json:"vocab_size"`
		} `json:"text_config"`
	}
	if json.Unmarshal(dcfg, &raw) == nil {
		lg.Vocab = max(raw.Vocab, raw.Text.Vocab)
	}
	if lg.Tokens == nil && lg.Vocab > 0 {
		lg.Tokens = DefaultTokens(lg.Vocab)
	}
	return lg
}

// configs finds config.json for each side: given, each side's own, else the other side's —
// without its quantization config when the borrowing side's tensors are not quantized that
// way (a dequantized output whose config was not written beside it).
func configs(ctx context.Context, sck, dck *statedict.Checkpoint, given []byte) ([]byte, []byte, error) {
	if given != nil {
		return given, given, nil
	}
	s, serr := forward.ReadConfig(ctx, sck.Path)
	d, derr := forward.ReadConfig(ctx, dck.Path)
	switch {
	case serr != nil && derr != nil:
		if sck.Path == dck.Path {
			return nil, nil, serr
		}
		return nil, nil, fmt.Errorf("%w; %w", serr, derr)
	case serr != nil:
		b, err := borrowConfig(sck, d)
		return b, d, err
	case derr != nil:
		b, err := borrowConfig(dck, s)
		return s, b, err
	}
	return s, d, nil
}

// borrowConfig is the other side's config for ck, its quantization config removed when
// ck's tensors do not match it.
func borrowConfig(ck *statedict.Checkpoint, cfg []byte) ([]byte, error) {
	q, err := quant.ParseConfig(cfg, nil)
	if err != nil || q == nil {
		return cfg, nil
	}
	ts, err := ck.Tensors()
	if err != nil {
		return nil, err
	}
	if _, err := quant.Detect(q, ts); err == nil {
		return cfg, nil
	}
	return quant.StripConfig(cfg)
}

// keepFP8 reports whether the converted checkpoint's FP8 weights stay FP8 on gen: it holds
// FP8 groups and gen runs them natively.
func keepFP8(ck *statedict.Checkpoint, cfg []byte, gen *runtime.Generation) (bool, error) {
	if gen == nil {
		return false, nil
	}
	q, err := quant.ParseConfig(cfg, nil)
	if err != nil || q == nil {
		return false, nil
	}
	ts, err := ck.Tensors()
	if err != nil {
		return false, err
	}
	plan, err := quant.Detect(q, ts)
	if err != nil || plan == nil {
		return false, nil
	}
	fp8 := []quant.Scheme{quant.SchemeFP8Tensor, quant.SchemeFP8Channel, quant.SchemeFP8Column, quant.SchemeFP8Block}
	for _, g := range plan.Groups {
		if slices.Contains(fp8, g.Scheme) && g.NativeOn(gen) {
			return true, nil
		}
	}
	return false, nil
}
