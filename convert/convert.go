// Package convert is ckpt's main job as a library: open a checkpoint in any supported
// format, decide what to do with each tensor (quant for quantized layers, optimizerstate for
// training state), remap it (device tags, dtypes, names, selection), and write it in any
// layout formats.ChooseLayout decides — a torch.save file, a safetensors file, a Hugging Face
// folder, a torch.distributed.checkpoint directory — with a manifest of what was written.
// Tensors stream from the mapped source to the output; nothing is held whole in memory, and
// the output appears under its final name only when complete.
//
// With a Target that has a mesh the output is per device — one file per rank holding that
// rank's shards (sharding.go decides them; the layout's writer lays them out) — and Hosts
// splits its writing across the machines of a multi-host job (hosts.go).
//
// The steps are open → plan → sink → writer → manifest: the source is opened, the plan
// made, the destination opened as one storage.Output (storage/local's or a bucket's) under
// storage/sink's decorators, the layout's writer writes through it, and the manifest is
// written last; each lives with the package that knows its part, and convert only
// orchestrates.
package convert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/internal/plural"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
	"github.com/ckpt-dev/ckpt/storage/sink"
)

// Options describe one conversion. The zero value of each field changes nothing (device
// tags kept, no cast, no renaming); DefaultOptions gives what `ckpt convert --to tpu` does.
type Options struct {
	Src, Dst string
	// Format is the layout asked for: formats.TorchFile, SafetensorsFile or DCPFolder as
	// formats, any other layout as it is, "" for the source and destination to decide
	// (formats.ChooseLayout, which also decides where in Dst the output goes).
	Format formats.Layout
	// Plan are the conversion's decisions about values: casts, dequantization, names,
	// training state (its Layout is the one ChooseLayout decides). The manifest records
	// them with the target, whatever the caller.
	Plan plan.Options
	// MaxShardSize splits a Hugging Face folder's weights into shards of at most this many
	// bytes (a larger tensor gets a shard of its own); 0 means 5 GB, transformers' default.
	MaxShardSize int64
	// Force allows replacing an existing destination: a file, or a folder an earlier
	// conversion wrote (never one holding anything else, never the source).
	Force bool
	// Strict makes any data of the source the output would not hold (values the layout
	// cannot store, files left out, CUDA RNG states dropped) an error: nothing is written.
	Strict bool
	// WeightsOnly makes a Python object that cannot be turned into data (Remap.PlainData)
	// an error instead of an object written as the source pickled it: every pickle of the
	// output then loads with torch.load(weights_only=True).
	WeightsOnly bool
	// Compress compresses a DCP output's items: "zstd" with torch's ZStandard extension
	// (DCP's loader needs the zstandard module); "" writes them as they are.
	Compress string
	// Resume continues a folder output whose conversion was killed: the files it finished
	// are checked against their journaled checksums and kept, the rest written, and the
	// output ends byte-identical to an uninterrupted run. Without Resume the leftovers of a
	// killed run are removed (and the summary says so). Into a bucket prefix the files are
	// kept without being uploaded again, and a resume whose source or options differ from
	// the killed run's is refused before anything is touched; as a bucket has no lock, a
	// killed run's leftovers there are taken over only with Resume or Force (see
	// newOutput). A file output is never resumed; with nothing to resume, Resume changes
	// nothing.
	Resume bool
	// Progress, if set, is told how many tensor bytes were written so far, of how many:
	// done never exceeds total, and the last call has done == total.
	Progress func(done, total int64)
	// ToolVersion is recorded in the manifest.
	ToolVersion string
	// Args is the command line recorded in the manifest, for people: what the conversion
	// did is recorded from Plan and Target.
	Args []string
	// Target is what the conversion writes for: the device tag storages get (or the
	// map_location deciding it), the TPU generation DequantizeAuto decides for, and
	// the slice, mesh and plan of sharded outputs. nil keeps device tags. With a mesh the
	// output is per device: a DCP folder whose __R_0.distcp holds rank R's shards, or a
	// folder of one safetensors file per rank (Format Safetensors) with a sharding
	// manifest.
	Target *runtime.Target
	// Hosts, for a sharded output, splits the conversion across the machines of a
	// multi-host job (see Hosts).
	Hosts Hosts
}

// ErrDataDropped is the error of a strict conversion (Options.Strict) whose output would
// not hold all of the source's data.
var ErrDataDropped = errors.New("the output would not hold all of the source's data")

// DefaultOptions returns the options of `ckpt convert --to tpu SRC DST`: every storage
// tagged "tpu", DDP and torch.compile prefixes stripped, values torch.load(weights_only=True)
// refuses turned into the data they hold, the layout the command chooses for SRC and DST
// (formats.ChooseLayout: a safetensors file for a DST ending in .safetensors, a Hugging
// Face or DCP folder for a folder source, a torch.save file otherwise).
func DefaultOptions(src, dst string) Options {
	t, err := runtime.NewTarget(runtime.Spec{Device: runtime.TPU})
	if err != nil {
		panic(err) // the default target is valid
	}
	return Options{Src: src, Dst: dst, Target: t, Plan: plan.Options{StripWrappers: true, PlainData: true}}
}

// Summary reports what a conversion did; it is also the --json output.
type Summary struct {
	Src       string            `json:"src"`
	Dst       string            `json:"dst"`
	SrcFormat string            `json:"src_format"`
	Format    string            `json:"format"`
	Files     []string          `json:"files"`
	Manifest  string            `json:"manifest"`
	Tensors   int               `json:"tensors"`
	Bytes     int64             `json:"bytes"`
	Seconds   float64           `json:"seconds"`
	Remap     *plan.Report      `json:"remap"`
	Tied      map[string]string `json:"tied,omitempty"`
	// Warnings are the problems the conversion worked around, one per kind.
	Warnings []plan.Warning `json:"warnings,omitempty"`
	// Quantization says what happened to a quantized checkpoint's tensors and config.
	Quantization *quant.Report `json:"quantization,omitempty"`
	// ConfigDType is set ("float32 → bfloat16") when config.json's dtype was rewritten to
	// the dtype the weights were cast to.
	ConfigDType string `json:"config_dtype,omitempty"`
	// Resumed counts the files of an interrupted conversion kept (Options.Resume).
	Resumed int `json:"resumed,omitempty"`
	// Alongside summarizes the conversion of each training-state file of an HF Trainer
	// checkpoint folder (optimizer.pt, scheduler.pt, rng_state.pth, …) into the output folder.
	Alongside []*Summary `json:"alongside,omitempty"`
	// Sharding describes a per-device output: its ranks and mesh.
	Sharding *ShardingReport `json:"sharding,omitempty"`
	// Host reports this process's share of a multi-host conversion.
	Host *HostReport `json:"host,omitempty"`
}

// ShardingReport describes a per-device output.
type ShardingReport struct {
	Ranks int    `json:"ranks"`
	Mesh  string `json:"mesh"`
	// Sharded counts the tensors split across ranks; the others are whole on every rank.
	Sharded int `json:"sharded"`
}

// openSource opens the checkpoint to convert (a test counts what is read through it).
var openSource = formats.OpenWith

// Run performs the conversion. Cancelling ctx stops it between pieces of output and
// removes everything written so far; the destination is then as it was.
func Run(ctx context.Context, opts Options) (*Summary, error) {
	start := time.Now()
	dst, lay, err := formats.ChooseLayout(ctx, opts.Src, opts.Dst, opts.Format, opts.Target.Sharding() != nil)
	if err != nil {
		return nil, err
	}
	opts.Dst = dst
	if !storage.IsRemote(opts.Dst) {
		opts.Dst = filepath.Clean(opts.Dst)
	}
	if err := opts.Hosts.check(opts.Target, lay); err != nil {
		return nil, err
	}
	if err := checkApart(opts.Src, opts.Dst); err != nil {
		return nil, err
	}
	if opts.Compress != "" && lay != formats.DCPFolder {
		return nil, fmt.Errorf("%s: %w: %w: %s compression is for DCP outputs, this one is %s", opts.Dst, ckpterr.ErrUnsupported, formats.ErrLayout, opts.Compress, lay)
	}
	ck, err := openSource(ctx, opts.Src, opts.Plan.OpenOptions())
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	if plan.TrainingInTree(lay, opts.Target) {
		if ck, err = formats.WithTrainingState(ctx, ck); err != nil {
			return nil, err
		}
		defer ck.Close()
	}
	p, err := newPlan(ck, opts, lay)
	if err != nil {
		return nil, err
	}
	ck.Root = nil // as plan let p.src's go (the tree WithTrainingState wraps)
	if opts.Hosts.Count > 1 {
		return runHost(ctx, opts, p, start)
	}
	folder := lay.Folder()
	var run string
	if folder && storage.IsRemote(opts.Dst) {
		if run, err = runKey(ctx, p, opts); err != nil {
			return nil, err
		}
	}
	out, err := newOutput(ctx, opts, folder, 0, 1, run)
	if err != nil {
		return nil, err
	}
	defer out.abort()
	switch cleaned, resumed := out.leftovers(); {
	case resumed != nil: // (a bucket's files the killed run had not finished are removed)
		p.sum.Resumed = len(resumed)
	case cleaned:
		p.sum.Warnings = append(p.sum.Warnings, plan.Warning{Kind: "partial_removed", Message: "removed the partial output an interrupted conversion left"})
	}
	out.progress.Expect(p.Bytes)
	if err := write(ctx, out, out.root(), p, opts); err != nil {
		return nil, err
	}
	if err := strict(p, opts); err != nil {
		return nil, err
	}
	if err := out.commit(); err != nil {
		return nil, err
	}
	p.sum.Seconds = time.Since(start).Seconds()
	return p.sum, nil
}

// strict fails a strict conversion (Options.Strict) whose output would not hold all of the
// source's data.
func strict(p *planned, opts Options) error {
	if !opts.Strict {
		return nil
	}
	var dropped []string
	for _, w := range p.sum.Warnings {
		if w.Dropped {
			dropped = append(dropped, w.Message)
		}
	}
	if len(dropped) > 0 {
		return fmt.Errorf("%s: %w: %s", opts.Dst, ErrDataDropped, strings.Join(dropped, "; "))
	}
	return nil
}

// planned is a conversion planned: the plan, the source it reads from, the layout and
// the summary being filled in.
type planned struct {
	*plan.Plan
	src *statedict.Checkpoint
	lay formats.Layout
	sum *Summary
}

// newPlan plans the conversion of ck into the layout lay: plan.Make with the conversion's
// options, consuming ck's tree (only the planned output is written from here on).
func newPlan(ck *statedict.Checkpoint, opts Options, lay formats.Layout) (*planned, error) {
	po := opts.Plan
	po.Layout, po.Consume = lay, true
	pl, err := plan.Make(ck, po, opts.Target)
	if err != nil {
		return nil, err
	}
	p := &planned{Plan: pl, src: ck, lay: lay}
	p.sum = &Summary{Src: opts.Src, Dst: opts.Dst, SrcFormat: ck.Format, Format: lay.Format(), Remap: pl.Report, Warnings: pl.Warnings,
		Quantization: pl.Quantization, ConfigDType: pl.ConfigDType, Tensors: pl.Tensors}
	if sh := pl.Sharding; sh != nil {
		p.sum.Sharding = &ShardingReport{Ranks: sh.Ranks, Mesh: opts.Target.Mesh.String(), Sharded: len(sh.Tensors)}
	}
	return p, nil
}

// writeOptions are what the layout's writer is given.
func (p *planned) writeOptions(o *output, opts Options) statedict.WriteOptions {
	return statedict.WriteOptions{Sum: o.sum, MaxShardSize: opts.MaxShardSize, Rewrite: p.Rewrite, Sharding: p.Sharding,
		WeightsOnly: opts.WeightsOnly, Metadata: p.Output.Metadata, Compress: opts.Compress}
}

// write writes the planned checkpoint into t (out as a whole, or a file of it) with the
// layout's writer, then the training state taken along and the manifest.
func write(ctx context.Context, out *output, t *sink.Target, p *planned, opts Options) error {
	defer out.reading(p.src)()
	w, err := p.lay.Writer()(t, p.Output, p.writeOptions(out, opts))
	if err != nil {
		return err
	}
	if len(w.Kept) > 0 {
		p.sum.Warnings = append(p.sum.Warnings, kept(w.Kept, p.lay))
	}
	p.sum.Files, p.sum.Bytes, p.sum.Tied = w.Files, w.Bytes, w.Tied
	if len(w.Tied) == 0 {
		p.sum.Tied = nil
	}
	if len(w.NotWritten) > 0 {
		p.sum.Warnings = append(p.sum.Warnings, notWritten(w.NotWritten, p.lay))
	}
	for _, name := range p.Alongside {
		sub, err := convertAlongside(ctx, out, t, p, opts, name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		p.sum.Alongside = append(p.sum.Alongside, sub)
		p.sum.Files = append(p.sum.Files, name, name+"."+manifest.Name)
		for _, w := range sub.Warnings {
			w.Message = name + ": " + w.Message
			p.sum.Warnings = append(p.sum.Warnings, w)
		}
	}
	path, err := out.writeManifest(t, streamManifest(out, p, opts, w.Names, nil))
	if err != nil {
		return err
	}
	p.sum.Manifest = path
	return nil
}

// notWritten is the warning for the values a flat layout cannot hold, counted by the
// top-level entry they belong to ("optimizer (40), scheduler (10), epoch").
func notWritten(items []string, lay formats.Layout) plan.Warning {
	var order []string
	count := map[string]int{}
	for _, it := range items {
		top, _, _ := strings.Cut(it, ".")
		top, _, _ = strings.Cut(top, ":")
		if count[top] == 0 {
			order = append(order, top)
		}
		count[top]++
	}
	parts := make([]string, len(order))
	for i, top := range order {
		parts[i] = top
		if count[top] > 1 {
			parts[i] = fmt.Sprintf("%s (%d)", top, count[top])
		}
	}
	return plan.Warning{Kind: "values_not_written", Items: items, Dropped: true,
		Message: fmt.Sprintf("%s not written (%s holds tensors only): %s; a torch or DCP output keeps them", plural.Of(len(items), "value"), lay, plan.Summarize(parts))}
}

// kept is the warning for the Python objects written as the source pickled them: nothing
// about them is lost, but loading them needs their classes (and trusting them).
func kept(items []string, lay formats.Layout) plan.Warning {
	loader := "torch.load(weights_only=True) refuses them"
	if lay == formats.DCPFolder {
		loader = "DCP's loader imports their classes to unpickle them"
	}
	return plan.Warning{Kind: "objects_kept", Items: items,
		Message: fmt.Sprintf("kept %s as the source pickled them (%s): %s; dropping them loses nothing but those values", plural.Of(len(items), "Python object"), plan.Summarize(items), loader)}
}

// MarshalJSON writes the summary with each warning once, in Warnings: they already hold the
// remap's warnings (which the manifest records under "remap") and, prefixed with their file,
// those of the files converted alongside, so neither "remap" nor "alongside" repeats them.
func (s Summary) MarshalJSON() ([]byte, error) {
	type plain Summary // Summary's fields without this method
	out := plain(s)
	if s.Remap != nil && s.Remap.Warnings != nil {
		r := *s.Remap
		r.Warnings = nil
		out.Remap = &r
	}
	if s.Alongside != nil {
		out.Alongside = make([]*Summary, len(s.Alongside))
		for i, a := range s.Alongside {
			c := *a
			c.Warnings = nil
			out.Alongside[i] = &c
		}
	}
	return json.Marshal(out)
}

// Messages are the warnings' one-line messages.
func (s *Summary) Messages() []string {
	out := make([]string, len(s.Warnings))
	for i, w := range s.Warnings {
		out[i] = w.Message
	}
	return out
}

// convertAlongside converts the training-state file name of the source folder into the
// folder being written, with the same device and training-state options.
func convertAlongside(ctx context.Context, out *output, parent *sink.Target, p *planned, opts Options, name string) (*Summary, error) {
	src := storage.Join(p.src.Path, name)
	ck, err := formats.Open(ctx, src)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	sub := Options{Src: src, Dst: storage.Join(opts.Dst, name), Format: formats.TorchFile, ToolVersion: opts.ToolVersion, Args: opts.Args, Target: plan.AlongsideTarget(opts.Target), WeightsOnly: opts.WeightsOnly,
		Plan: opts.Plan.Alongside()}
	sp, err := newPlan(ck, sub, formats.TorchFile)
	if err != nil {
		return nil, err
	}
	out.progress.Grow(sp.Bytes)
	if err := write(ctx, out, parent.Sub(name), sp, sub); err != nil {
		return nil, err
	}
	return sp.sum, nil
}
