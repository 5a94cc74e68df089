// Package convert is ckpt's main job as a library: open a checkpoint in any supported
// format, decide what to do with each tensor (quant for quantized layers, optimizerstate for
// training state), remap it (device tags, dtypes, names, selection), and write it in any
// layout formats.Writers lists — a torch.save file, a safetensors file, a Hugging Face
// folder, a torch.distributed.checkpoint directory — with a manifest of what was written.
// Tensors stream from the mapped source to the output; nothing is held whole in memory, and
// the output appears under its final name only when complete.
//
// With a Target that has a mesh the output is per device — one file per rank holding that
// rank's shards (sharding.go decides them; the layout's writer lays them out) — and Hosts
// splits its writing across the machines of a multi-host job (hosts.go).
//
// The steps are open → plan → write → manifest; each lives with the package that knows its
// layout, and convert only orchestrates.
package convert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ckpt-dev/ckpt/internal/plural"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/formats/manifest"
	"github.com/ckpt-dev/ckpt/formats/store"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Format is an output format.
type Format string

// Output formats. Safetensors writes a single file when the destination ends in
// ".safetensors" and a Hugging Face folder otherwise.
const (
	Torch       Format = "torch"
	Safetensors Format = "safetensors"
	DCP         Format = "dcp"
)

// DequantizeMode says what a conversion does with quantized tensors.
type DequantizeMode string

// Dequantization modes (Options.Dequantize).
const (
	// DequantizeNone passes quantized tensors through unchanged, with their scales and
	// quantization config (TPU-side kernels can take them); the dtype cast leaves their
	// scales alone.
	DequantizeNone DequantizeMode = ""
	// DequantizeAll unpacks every quantized tensor.
	DequantizeAll DequantizeMode = "all"
	// DequantizeAuto unpacks what the target's TPU generation does not run natively (see
	// quant.Group.NativeOn): FP4 everywhere, float8_e4m3fn except on TPU7x.
	DequantizeAuto DequantizeMode = "auto"
)

// Options describe one conversion. The zero value of each field changes nothing (device
// tags kept, no cast, no renaming); DefaultOptions gives what `ckpt convert --to tpu` does.
type Options struct {
	Src, Dst string
	// Format is the output format.
	Format Format
	Remap  remap.Options
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
	// ZeROOptimizer reads a DeepSpeed ZeRO source with its optimizer state consolidated for
	// resume: the output holds {"model": the weights, "optimizer": the state by parameter
	// name} (formats.OpenOptions). Without it a ZeRO folder converts to the weights
	// zero_to_fp32.py gives, and nothing else.
	ZeROOptimizer bool
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
	// Args is the command line recorded in the manifest.
	Args []string
	// Dequantize says what to do with quantized tensors; dequantized tensors take
	// Remap.DType (bfloat16 when unset).
	Dequantize DequantizeMode
	// Target is what the conversion writes for: the device tag storages get (unless
	// Remap.Place decides otherwise), the TPU generation DequantizeAuto decides for, and
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
// refuses turned into the data they hold, a torch.save file (a safetensors file for a DST
// ending in .safetensors).
func DefaultOptions(src, dst string) Options {
	format := Torch
	if strings.HasSuffix(dst, ".safetensors") {
		format = Safetensors
	}
	return Options{Src: src, Dst: dst, Format: format, Target: &runtime.Target{Device: remap.TPU},
		Remap: remap.Options{StripWrappers: true, PlainData: true}}
}

// Summary reports what a conversion did; it is also the --json output.
type Summary struct {
	Src       string            `json:"src"`
	Dst       string            `json:"dst"`
	SrcFormat string            `json:"src_format"`
	Format    Format            `json:"format"`
	Files     []string          `json:"files"`
	Manifest  string            `json:"manifest"`
	Tensors   int               `json:"tensors"`
	Bytes     int64             `json:"bytes"`
	Seconds   float64           `json:"seconds"`
	Remap     *remap.Report     `json:"remap"`
	Tied      map[string]string `json:"tied,omitempty"`
	// Warnings are the problems the conversion worked around, one per kind.
	Warnings []remap.Warning `json:"warnings,omitempty"`
	// Quantization says what happened to a quantized checkpoint's tensors and config.
	Quantization *QuantReport `json:"quantization,omitempty"`
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

// layout resolves the output format and destination to the layout written: per device
// (one file per rank) when sharded.
func layout(f Format, dst string, sharded bool) (formats.Layout, error) {
	switch f {
	case Torch:
		if sharded {
			return "", fmt.Errorf("a torch.save file holds whole tensors: a per-device output is a dcp or safetensors folder")
		}
		return formats.TorchFile, nil
	case Safetensors:
		if sharded {
			if strings.HasSuffix(dst, ".safetensors") {
				return "", fmt.Errorf("%s: a per-device safetensors output is a folder (one file per rank), not a .safetensors file", dst)
			}
			return formats.SafetensorsRanks, nil
		}
		if strings.HasSuffix(dst, ".safetensors") {
			return formats.SafetensorsFile, nil
		}
		return formats.HFFolder, nil
	case DCP:
		return formats.DCPFolder, nil
	}
	return "", fmt.Errorf("unknown output format %q (torch, safetensors, dcp)", f)
}

// openSource opens the checkpoint to convert (a test counts what is read through it).
var openSource = formats.OpenWith

// Run performs the conversion. Cancelling ctx stops it between pieces of output and
// removes everything written so far; the destination is then as it was.
func Run(ctx context.Context, opts Options) (*Summary, error) {
	start := time.Now()
	if store.IsRemote(opts.Dst) {
		opts.Dst = strings.TrimSuffix(opts.Dst, "/")
	} else {
		opts.Dst = filepath.Clean(opts.Dst) // "DST/" names the folder DST
	}
	lay, err := layout(opts.Format, opts.Dst, opts.Target.Sharding() != nil)
	if err != nil {
		return nil, err
	}
	if err := opts.Hosts.check(opts.Target, lay); err != nil {
		return nil, err
	}
	if err := checkApart(opts.Src, opts.Dst); err != nil {
		return nil, err
	}
	if opts.Compress != "" && lay != formats.DCPFolder {
		return nil, fmt.Errorf("%s: %w: %s compression is for DCP outputs, this one is %s", opts.Dst, statedict.ErrUnsupported, opts.Compress, lay)
	}
	ck, err := openSource(opts.Src, formats.OpenOptions{ZeROOptimizer: opts.ZeROOptimizer})
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	if lay == formats.TorchFile {
		if ck, err = withTrainingState(ck); err != nil {
			return nil, err
		}
		defer ck.Close()
	}
	p, err := plan(ck, opts, lay)
	if err != nil {
		return nil, err
	}
	ck.Root = nil // as plan let p.src's go (the tree withTrainingState wraps)
	if opts.Hosts.Count > 1 {
		return runHost(ctx, opts, p, start)
	}
	folder := formats.Writers[lay].Folder
	var run string
	if folder && store.IsRemote(opts.Dst) {
		if run, err = runKey(p, opts); err != nil {
			return nil, err
		}
	}
	out, err := newOutput(ctx, opts, folder, run)
	if err != nil {
		return nil, err
	}
	defer out.abort()
	if out.dir != nil || out.share != nil {
		switch cleaned, resumed := out.leftovers(); {
		case resumed != nil: // (a bucket's files the killed run had not finished are removed)
			p.sum.Resumed = len(resumed)
		case cleaned:
			p.sum.Warnings = append(p.sum.Warnings, remap.Warning{Kind: "partial_removed", Message: "removed the partial output an interrupted conversion left"})
		}
	} else if out.file != nil && out.file.CleanedUp {
		p.sum.Warnings = append(p.sum.Warnings, remap.Warning{Kind: "partial_removed", Message: "removed the partial output an interrupted conversion left"})
	}
	out.total = p.total
	if err := write(out.root(), p, opts); err != nil {
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

// planned is a conversion planned: the remapped checkpoint to write and what was decided.
type planned struct {
	ck, src *statedict.Checkpoint // the remapped checkpoint; the source it reads from
	lay     formats.Layout
	sum     *Summary
	rewrite map[string][]byte
	// alongside are training-state files of the source folder to convert next to the
	// weights.
	alongside []string
	total     int64
	// sharding splits the tensors across the target's ranks (nil: not per device).
	sharding *statedict.Sharding
}

// plan decides what to write: quantized groups unpacked or shielded from the cast, the
// training state's policies, the remap, config rewrites and the files taken along.
func plan(ck *statedict.Checkpoint, opts Options, lay formats.Layout) (*planned, error) {
	q, err := prepareQuantized(ck, opts)
	if err != nil {
		return nil, err
	}
	ro := opts.Remap
	if ro.Place == nil && opts.Target != nil {
		ro.Place = placement(opts.Target)
	}
	pol := statedict.Policies{}
	pol.Merge(ro.Policies)
	pol.Merge(q.policies)
	ro.Policies = pol
	ro.Consume = true // the source tree is let go once remapped (below)
	root, rep, err := remap.Apply(q.root, ro)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", opts.Src, err)
	}
	p := &planned{src: ck, lay: lay, rewrite: q.rewrite}
	p.sum = &Summary{Src: opts.Src, Dst: opts.Dst, SrcFormat: ck.Format, Format: opts.Format, Remap: rep, Warnings: rep.Warnings}
	p.sum.Quantization, p.sum.Warnings = q.report, append(p.sum.Warnings, q.warnings...)
	if p.rewrite == nil {
		p.rewrite = map[string][]byte{}
	}
	p.rewrite[manifest.Name] = nil // a source's own manifest describes the source
	// A folder output takes an HF Trainer checkpoint's training state along, converted (a
	// torch file holds it inside: withTrainingState); the other files of other layouts are
	// left out.
	folderOut := formats.Writers[lay].Folder
	var left, training []string
	for _, f := range ck.Ignored {
		switch {
		case folderOut && hf.IsTrainerState(f):
			p.alongside = append(p.alongside, f)
		case folderOut && hf.IsTrainingStateFolder(f):
			// Carried as it is among the extras: a DCP folder of training state.
		case hf.IsTrainerState(f) || hf.IsTrainingStateFolder(f):
			training = append(training, f)
		default:
			left = append(left, f)
		}
	}
	if len(training) > 0 {
		p.sum.Warnings = append(p.sum.Warnings, remap.Warning{Kind: "training_state_left_out", Items: training, Dropped: true,
			Message: fmt.Sprintf("left out the training state %s: a %s file holds tensors only; a folder, torch or DCP output keeps it", remap.Summarize(training), lay)})
	}
	if len(ck.Outside) > 0 {
		p.sum.Warnings = append(p.sum.Warnings, remap.Warning{Kind: "links_outside", Items: ck.Outside,
			Message: fmt.Sprintf("left out %s: links leading outside the checkpoint folder or not regular files, never read", remap.Summarize(ck.Outside))})
	}
	if len(left) > 0 {
		p.sum.Warnings = append(p.sum.Warnings, remap.Warning{Kind: "files_left_out", Items: left, Dropped: true,
			Message: fmt.Sprintf("left out %s: weights or pickles outside the %s checkpoint that was read, not converted", remap.Summarize(left), ck.Format)})
	}
	p.ck = &statedict.Checkpoint{Format: ck.Format, Path: ck.Path, Root: root, Extras: ck.Extras, Files: ck.Files,
		Metadata: ck.Metadata, WeightsName: ck.WeightsName, Components: ck.Components}
	// A per-device layout hashes every tensor's bytes once, piece by piece.
	storages := formats.Writers[lay].Tree && opts.Target.Sharding() == nil
	if p.sum.Tensors, p.total, err = checkContent(ck, root, storages); err != nil {
		return nil, err
	}
	// Only the remapped tree is written from here on. remap consumed the source's tensors
	// and storages (Options.Consume: they are the output's now, so nothing may read ck.Root
	// or q.root for source values after this); let the source's containers go.
	ck.Root, q.root = nil, nil
	if sh := opts.Target.Sharding(); sh != nil {
		if len(ck.Components) > 0 {
			return nil, fmt.Errorf("%s: %w: a checkpoint of %d components (a pipeline) is not sharded per device; convert each component folder on its own", opts.Src, statedict.ErrUnsupported, len(ck.Components))
		}
		if q.report != nil && len(q.report.Kept) > 0 {
			return nil, fmt.Errorf("%s: %w: %s-quantized weights are not sharded per device (their scales follow blocks, not the weights' placements); --dequantize them", opts.Src, statedict.ErrUnsupported, q.report.Method)
		}
		var ws []remap.Warning
		if p.sharding, ws, err = sharding(root, opts.Target, opts.Remap.OptimizerNames); err != nil {
			return nil, fmt.Errorf("%s: %w", opts.Src, err)
		}
		p.sum.Warnings = append(p.sum.Warnings, ws...)
		p.sum.Sharding = &ShardingReport{Ranks: p.sharding.Ranks, Mesh: opts.Target.Mesh.String(), Sharded: len(p.sharding.Tensors)}
	}
	if !formats.Writers[lay].Folder && len(ck.Extras) > 0 {
		// A single file holds tensors only: say once what stays behind, and claim nothing
		// about files that are not written.
		p.sum.Warnings = append(p.sum.Warnings, remap.Warning{Kind: "files_not_carried", Items: ck.Extras,
			Message: fmt.Sprintf("not carried: %s (a single-file output holds the checkpoint only; a folder output keeps them)", remap.Summarize(ck.Extras))})
		if p.sum.Quantization != nil {
			p.sum.Quantization.ConfigRemoved = nil
		}
		return p, nil
	}
	if opts.Remap.DType == statedict.Invalid {
		return p, nil
	}
	// Every model configuration names the dtype its weights load in: the folder's, or each
	// component's (unet/config.json, text_encoder/config.json).
	for _, name := range ck.Extras {
		if path.Base(name) != hf.ConfigFile {
			continue
		}
		cfg, ok := p.rewrite[name]
		if !ok {
			if cfg, err = ck.ReadFile(name); err != nil {
				return nil, err
			}
		}
		if cfg == nil {
			continue
		}
		newCfg, old, err := hf.ConfigDType(cfg, opts.Remap.DType)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if old != "" {
			p.rewrite[name] = newCfg
			p.sum.ConfigDType = old + " → " + opts.Remap.DType.String()
		}
	}
	return p, nil
}

// writeOptions are what the layout's writer is given.
func (p *planned) writeOptions(o *output, opts Options) statedict.WriteOptions {
	return statedict.WriteOptions{Sum: o.sum, MaxShardSize: opts.MaxShardSize, Rewrite: p.rewrite, Sharding: p.sharding,
		WeightsOnly: opts.WeightsOnly, Metadata: p.ck.Metadata, Compress: opts.Compress}
}

// checkContent refuses an output of no tensors, or of placeholders only, from a source
// that holds weights: a conversion never succeeds having written nothing of them. It
// returns the number of tensors of the output tree out and the bytes the layout writes of
// them (contentBytes), in the one walk of the tree planning makes.
func checkContent(src *statedict.Checkpoint, out statedict.Value, storages bool) (int, int64, error) {
	var n int
	var first statedict.NamedTensor
	weights := false
	var c contentBytes
	err := statedict.Walk(out, "", func(name string, v statedict.Value) error {
		if t, ok := v.(*statedict.Tensor); ok {
			if n == 0 {
				first = statedict.NamedTensor{Name: name, Tensor: t}
			}
			n++
			weights = weights || t.NumEl() > 0
			c.add(t, storages)
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return n, c.total, checkTensors(src, n, first, weights)
}

// checkTensors is checkContent's verdict on an output of n tensors, the first of them
// first, some holding elements (weights).
func checkTensors(src *statedict.Checkpoint, n int, first statedict.NamedTensor, weights bool) error {
	if n == 0 {
		in, err := src.Tensors()
		if err != nil {
			return err
		}
		if h := statedict.HiddenTensors(src.Root); h.Tensors > 0 {
			return fmt.Errorf("%s: %w: %s inside %s objects, which ckpt does not read as data; nothing would be written", src.Path, statedict.ErrUnsupported, plural.Of(h.Tensors, "tensor"), strings.Join(h.Classes, ", "))
		} else if len(in) > 0 {
			return fmt.Errorf("%s: no tensor left to write: the selection and drops remove all %d", src.Path, len(in))
		}
		return nil
	}
	if weights {
		return nil
	}
	return fmt.Errorf("%s: %w: all %s empty (%s has shape %v): placeholders, not weights; nothing would be written", src.Path, statedict.ErrUnsupported, plural.Of(n, "tensor"), first.Name, first.Tensor.Shape)
}

// placement places tensors as the target does.
func placement(t *runtime.Target) remap.Placement {
	return func(name string, x *statedict.Tensor) (string, error) {
		p, err := t.Place(name, x.Shape, x.DType, x.Storage.Location)
		return p.Device, err
	}
}

// contentBytes counts how many tensor bytes a layout writes: every storage once for the
// layouts that keep storages shared (a torch.save file writes whole storages), every
// tensor's contiguous bytes for the others.
type contentBytes struct {
	total int64
	seen  map[any]bool
}

func (c *contentBytes) add(t *statedict.Tensor, storages bool) {
	var key any = t
	n := t.NBytes()
	if storages && t.Storage != nil {
		key, n = t.Storage, t.Storage.Size
	}
	if c.seen == nil {
		c.seen = map[any]bool{}
	}
	if !c.seen[key] {
		c.seen[key] = true
		c.total += n
	}
}

// write writes the planned checkpoint through out with the layout's writer, then the
// training state taken along and the manifest.
func write(out *subOutput, p *planned, opts Options) error {
	prev := out.o.src
	out.o.src = p.src
	defer func() { out.o.src = prev }()
	w, err := formats.Writers[p.lay].Write(out, p.ck, p.writeOptions(out.o, opts))
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
	for _, name := range p.alongside {
		sub, err := convertAlongside(out, p, opts, name)
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
	path, err := out.writeManifest(streamManifest(out.o, p, opts, w.Names, nil))
	if err != nil {
		return err
	}
	p.sum.Manifest = path
	return nil
}

// notWritten is the warning for the values a flat layout cannot hold, counted by the
// top-level entry they belong to ("optimizer (40), scheduler (10), epoch").
func notWritten(items []string, lay formats.Layout) remap.Warning {
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
	return remap.Warning{Kind: "values_not_written", Items: items, Dropped: true,
		Message: fmt.Sprintf("%s not written (%s holds tensors only): %s; a torch or DCP output keeps them", plural.Of(len(items), "value"), lay, remap.Summarize(parts))}
}

// kept is the warning for the Python objects written as the source pickled them: nothing
// about them is lost, but loading them needs their classes (and trusting them).
func kept(items []string, lay formats.Layout) remap.Warning {
	loader := "torch.load(weights_only=True) refuses them"
	if lay == formats.DCPFolder {
		loader = "DCP's loader imports their classes to unpickle them"
	}
	return remap.Warning{Kind: "objects_kept", Items: items,
		Message: fmt.Sprintf("kept %s as the source pickled them (%s): %s; dropping them loses nothing but those values", plural.Of(len(items), "Python object"), remap.Summarize(items), loader)}
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

// withTrainingState returns ck with the training state of an HF Trainer or accelerate
// checkpoint folder inside, for a single torch file to hold it: the weights under "model",
// each of optimizer.pt, scheduler.pt, scaler.pt and rng_state*.pth (accelerate's
// optimizer.bin, random_states_0.pkl, an FSDP optimizer_0/ folder, …) under its file's stem
// ("optimizer", "rng_state_1", "optimizer_0"), the names a training script resuming from one file uses.
// The optimizer state then follows the converted model as in any training checkpoint. ck is
// returned as it is when its folder holds no training state.
func withTrainingState(ck *statedict.Checkpoint) (*statedict.Checkpoint, error) {
	var files, rest []string
	for _, f := range ck.Ignored {
		if hf.IsTrainerState(f) || hf.IsTrainingStateFolder(f) {
			files = append(files, f)
		} else {
			rest = append(rest, f)
		}
	}
	if len(files) == 0 {
		return ck, nil
	}
	root := statedict.NewDict("")
	root.Set("model", ck.Root)
	// A training-state folder's files travel inside the tree, not as extras.
	var extras []string
	for _, e := range ck.Extras {
		if !slices.ContainsFunc(files, func(f string) bool { return strings.HasSuffix(f, "/") && strings.HasPrefix(e, f) }) {
			extras = append(extras, e)
		}
	}
	out := &statedict.Checkpoint{Format: ck.Format, Path: ck.Path, Root: root, Extras: extras, Ignored: rest, Outside: ck.Outside,
		Files: ck.Files, Metadata: ck.Metadata}
	for _, f := range files {
		part, err := formats.Open(store.Join(ck.Path, f))
		if err != nil {
			out.Close()
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out.Closers = append(out.Closers, part.Closers...)
		f = strings.TrimSuffix(f, "/")
		root.Set(strings.TrimSuffix(f, filepath.Ext(f)), part.Root)
	}
	return out, nil
}

// convertAlongside converts the training-state file name of the source folder into the
// folder being written, with the same device and training-state options.
func convertAlongside(parent *subOutput, p *planned, opts Options, name string) (*Summary, error) {
	src := store.Join(p.src.Path, name)
	ck, err := formats.Open(src)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	ro := opts.Remap
	sub := Options{Src: src, Dst: store.Join(opts.Dst, name), Format: Torch, ToolVersion: opts.ToolVersion, Args: opts.Args, Target: opts.Target, WeightsOnly: opts.WeightsOnly,
		Remap: remap.Options{Place: ro.Place, PlainData: ro.PlainData, OptimizerDType: ro.OptimizerDType, KeepCUDARNG: ro.KeepCUDARNG}}
	sp, err := plan(ck, sub, formats.TorchFile)
	if err != nil {
		return nil, err
	}
	parent.o.mu.Lock()
	parent.o.total += sp.total
	parent.o.mu.Unlock()
	if err := write(parent.sub(name), sp, sub); err != nil {
		return nil, err
	}
	return sp.sum, nil
}
