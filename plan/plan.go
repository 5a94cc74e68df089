package plan

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/internal/plural"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Plan is a conversion decided: the output tree and what travels with it, what every value
// is and what happens to it, how the tensors shard over the target's mesh, and what to
// tell the user. It reads no tensor byte.
type Plan struct {
	// Options and Target are what the plan was made for.
	Options Options
	Target  *runtime.Target
	// Output is the checkpoint to write: the remapped tree, the files that travel with it
	// (Extras, read through Files), the metadata and components of the source.
	Output *statedict.Checkpoint
	// Report says what the values went through (the manifest's "remap" record).
	Report *Report
	// Quantization says what happened to a quantized checkpoint's tensors and config; nil
	// for a checkpoint that is not quantized.
	Quantization *quant.Report
	// Warnings are the problems the conversion works around, one per kind.
	Warnings []Warning
	// Rewrite replaces extra files of a folder output (config.json without its
	// quantization config or with the cast dtype); a nil content leaves the file out.
	Rewrite map[string][]byte
	// ConfigDType is set ("float32 → bfloat16") when config.json's dtype is rewritten to the
	// dtype the weights are cast to.
	ConfigDType string
	// Alongside are training-state files of the source folder (an HF Trainer checkpoint's
	// optimizer.pt, scheduler.pt, rng_state.pth) to convert next to the weights, each with
	// Options.Alongside.
	Alongside []string
	// Sharding splits the tensors across the target's ranks; nil when the output is not
	// per device.
	Sharding *statedict.Sharding
	// CUDARNG are the CUDA RNG entries of the source: dropped unless
	// Options.KeepCUDARNG.
	CUDARNG []string
	// Tensors counts the tensors of Output; Bytes is how many bytes of them the layout
	// writes (every storage once for a torch.save file, every tensor's bytes otherwise).
	Tensors int
	Bytes   int64

	decisions *optimizerstate.Decisions
	trace     *remap.Trace
	// policies are the decisions about the source's tensors (training state, quantized
	// groups kept, host data), keyed by the tensors remap was given.
	policies statedict.Policies
	// follows ties the rewritten optimizer states' tensors to their parameters.
	follows []optimizerstate.Follows
	// groups gives the quantized group each dequantized tensor (as remap was given it)
	// unpacks.
	groups map[*statedict.Tensor]*quant.Group
	// kept are the members of quantized groups passed through as stored.
	kept statedict.Policies
	// host are the tensors made from numpy arrays.
	host map[*statedict.Tensor]bool
	// unsharded are the optimizer states whose tensors cannot follow their parameters'
	// sharding (not understood, not tied to a model, or their model not converted).
	unsharded []string
	// config is the source folder's config.json, nil when it has none.
	config []byte
}

// Make plans the conversion of ck with opts for t (nil: device tags kept, nothing
// sharded). With opts.Consume the source's tensors become the output's (ck.Root must not
// be read for source values afterwards).
func Make(ck *statedict.Checkpoint, opts Options, t *runtime.Target) (*Plan, error) {
	lay := opts.Layout
	if !lay.Valid() {
		return nil, fmt.Errorf("plan: unknown layout %q", lay)
	}
	sharded := t.Sharding() != nil
	if sharded && !lay.PerRank() {
		return nil, fmt.Errorf("%w: %w: a %s output is not one file per rank", ckpterr.ErrUnsupported, formats.ErrLayout, lay)
	}
	var gen *runtime.Generation
	if t != nil {
		gen = t.Generation
	}
	q, err := quant.Prepare(ck, opts.Dequantize, opts.DType, opts.DType != statedict.Invalid, gen)
	if err != nil {
		return nil, err
	}
	p := &Plan{Options: opts, Target: t, Quantization: q.Report, Rewrite: q.Rewrite, policies: statedict.Policies{}, groups: q.Groups, kept: q.Policies}
	if slices.Contains(ck.Extras, hf.ConfigFile) {
		// The model's configuration says in which order it registers its parameters.
		if p.config, err = hf.ReadConfig(ck.Files); err != nil {
			return nil, fmt.Errorf("%s: %w", ck.Path, err)
		}
	}
	if p.Rewrite == nil {
		p.Rewrite = map[string][]byte{}
	}
	p.Rewrite[manifest.Name] = nil // a source's own manifest describes the source
	root, err := p.remap(q)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ck.Path, err)
	}
	switch {
	case q.NotUnderstood != nil:
		p.warn(Warning{Kind: "quantization_not_understood",
			Message: fmt.Sprintf("quantization not understood, tensors passed through unchanged: %v", q.NotUnderstood)})
	case q.NothingToUnpack:
		p.warn(Warning{Kind: "not_quantized", Message: "nothing to dequantize: the checkpoint is not quantized"})
	}
	p.Output = &statedict.Checkpoint{Format: ck.Format, Path: ck.Path, Root: root, Extras: ck.Extras, Files: ck.Files,
		Metadata: ck.Metadata, WeightsName: ck.WeightsName, Components: ck.Components}
	p.files(ck, lay.Folder())
	// A per-device layout hashes every tensor's bytes once, piece by piece.
	if p.Tensors, p.Bytes, err = checkContent(ck, root, lay.Tree() && !sharded); err != nil {
		return nil, err
	}
	if sharded {
		if len(ck.Components) > 0 {
			return nil, fmt.Errorf("%s: %w: a checkpoint of %d components (a pipeline) is not sharded per device; convert each component folder on its own", ck.Path, ckpterr.ErrUnsupported, len(ck.Components))
		}
		if q.Report != nil && len(q.Report.Kept) > 0 {
			return nil, fmt.Errorf("%s: %w: %s-quantized weights are not sharded per device (their scales follow blocks, not the weights' placements); dequantize them", ck.Path, ckpterr.ErrUnsupported, q.Report.Method)
		}
		if err := p.shard(); err != nil {
			return nil, fmt.Errorf("%s: %w", ck.Path, err)
		}
	}
	if !lay.Folder() && len(ck.Extras) > 0 {
		// A single file holds tensors only: say once what stays behind, and claim nothing
		// about files that are not written.
		p.warn(Warning{Kind: "files_not_carried", Items: ck.Extras,
			Message: fmt.Sprintf("not carried: %s (a single-file output holds the checkpoint only; a folder output keeps them)", Summarize(ck.Extras))})
		if p.Quantization != nil {
			p.Quantization.ConfigRemoved = nil
		}
		return p, nil
	}
	if err := p.configDType(ck); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Plan) warn(w ...Warning) { p.Warnings = append(p.Warnings, w...) }

// remap decides what the training state of the (dequantized) tree is and remaps it: the
// selection, plain data, the policies of every tensor, names, device tags and casts, then
// the optimizer states made to follow their converted models and the schedulers a DCP
// round trip broke repaired.
func (p *Plan) remap(q *quant.Prepared) (statedict.Value, error) {
	opts := p.Options
	root := q.Root
	var err error
	if opts.Select != "" {
		if root, err = remap.Select(root, opts.Select); err != nil {
			return nil, err
		}
	}
	var plain *remap.PlainReport
	if opts.PlainData {
		dropped := func(name string) bool {
			for _, re := range opts.Drop {
				if re.MatchString(name) {
					return true
				}
			}
			return false
		}
		if root, plain, err = remap.Plain(root, dropped); err != nil {
			return nil, err
		}
		p.host = plain.Host
	}
	oo := optimizerstate.Options{Names: opts.OptimizerNames, MomentDType: opts.OptimizerDType, KeepCUDARNG: opts.KeepCUDARNG, Config: p.config}
	if p.Target.Sharding() != nil {
		oo.DataParallel = p.Target.Mesh.DataParallel()
	}
	dec, err := optimizerstate.Decide(root, oo)
	if err != nil {
		return nil, err
	}
	p.decisions, p.CUDARNG = dec, dec.RNG.CUDAEntries
	p.policies.Merge(dec.Policies)
	p.policies.Merge(q.Policies)
	for t := range p.host {
		p.policies.Merge(statedict.Policies{t: {Host: true, Why: "host data (a numpy array)"}})
	}
	ro := remap.Options{DType: opts.DType, StripWrappers: opts.StripWrappers, Renames: opts.Renames, Drop: opts.Drop,
		Decisions: decider{p}, Consume: opts.Consume}
	if p.Target != nil {
		ro.Device = p.Target.DeviceFor
	}
	out, rep, trace, err := remap.Apply(root, ro)
	if err != nil {
		return nil, err
	}
	p.trace = trace
	p.Report = &Report{Stripped: rep.Stripped, Renamed: rep.Renamed, Dropped: rep.Dropped, Cast: rep.Cast, Locations: rep.Locations}
	if plain != nil {
		p.Report.Converted, p.Report.HostData = plain.Converted, plain.HostData
	}
	for _, n := range rep.Hosted {
		if dec.OnCPU[n] {
			p.Report.RNG = append(p.Report.RNG, n)
		}
	}
	cuda := map[string]bool{}
	for _, n := range dec.RNG.CUDAEntries {
		cuda[n] = true
	}
	var carriedDropped []string
	for _, n := range rep.PolicyDropped {
		if cuda[n] {
			p.Report.DroppedRNG = append(p.Report.DroppedRNG, n)
		} else {
			carriedDropped = append(carriedDropped, n)
		}
	}
	p.Report.Carried = dec.Carried
	if !opts.Layout.Tree() {
		// A layout of tensors alone carries the tensors of the training state; the rest is
		// in the values_not_written warning, not kept.
		p.Report.Carried = slices.DeleteFunc(slices.Clone(dec.Carried), func(c optimizerstate.Carried) bool { return !c.HoldsTensors() })
	}
	if err := p.followModels(); err != nil {
		return nil, err
	}
	if n := len(p.Report.DroppedRNG); n > 0 {
		where := "a TPU"
		if p.Target != nil && p.Target.Device != runtime.TPU {
			where = "a machine without CUDA"
		}
		p.Report.Warnings = append(p.Report.Warnings, Warning{Kind: "cuda_rng_dropped", Items: p.Report.DroppedRNG, Dropped: true,
			Message: fmt.Sprintf("dropped %s (%s): they mean nothing on %s", plural.Of(n, "CUDA RNG state"), Summarize(p.Report.DroppedRNG), where)})
	}
	if n := len(carriedDropped); n > 0 {
		var why []string
		for _, c := range dec.Carried {
			if slices.Contains(carriedDropped, c.Path) {
				why = append(why, c.Path+": "+c.Why)
			}
		}
		p.Report.Warnings = append(p.Report.Warnings, Warning{Kind: "training_state_dropped", Items: carriedDropped, Dropped: true,
			Message: fmt.Sprintf("dropped %s: %s", plural.Of(n, "per-rank training state"), strings.Join(why, "; "))})
	}
	p.warn(p.Report.Warnings...)
	return out, nil
}

// followModels rewrites each optimizer state to follow its converted model (its
// parameters' entries renamed, dropped, placed) and repairs the MultiStepLR milestones a
// DCP round trip broke.
func (p *Plan) followModels() error {
	dec := p.decisions
	found := map[*statedict.Dict]*optimizerstate.Found{}
	followed := map[*statedict.Dict]bool{}
	for _, f := range dec.Found {
		found[f.Dict] = f
		if f.Model != nil {
			followed[f.Model] = true
		}
	}
	type pending struct {
		f   *optimizerstate.Found
		out *statedict.Dict
	}
	var optims []pending
	models := map[*statedict.Dict]map[string]optimizerstate.Fate{}
	modelPath := map[*statedict.Dict]string{}
	for _, dt := range p.trace.Dicts {
		if optimizerstate.RepairMilestones(dt.Out) {
			p.Report.Repaired = append(p.Report.Repaired, statedict.JoinName(dt.Name, "milestones"))
		}
		if f, ok := found[dt.Src]; ok {
			optims = append(optims, pending{f, dt.Out})
			continue
		}
		if !followed[dt.Src] || !dec.Models[dt.Src] {
			continue // no optimizer state follows it: its keys' fates are not needed
		}
		fates := map[string]optimizerstate.Fate{}
		for i, e := range dt.Src.Entries() {
			key, _ := e.Key.(string)
			to := key
			if dt.Keys != nil {
				to, _ = dt.Keys[i].(string)
			}
			v, kept := dt.Out.Get(to)
			ft := optimizerstate.Fate{Name: to, Dropped: !kept}
			if t, ok := v.(*statedict.Tensor); ok && t.Storage != nil {
				ft.Location = t.Storage.Location
			}
			fates[key] = ft
		}
		models[dt.Src], modelPath[dt.Src] = fates, dt.Name
	}
	tied, traced := map[*optimizerstate.Found]bool{}, map[*optimizerstate.Found]bool{}
	defer func() {
		for _, f := range dec.Found {
			if traced[f] && !tied[f] {
				p.unsharded = append(p.unsharded, f.Path)
			}
		}
	}()
	for _, o := range optims {
		f := o.f
		traced[f] = true
		if f.Err != nil && p.Options.OptimizerNames != nil && errors.Is(f.Err, optimizerstate.ErrNotFitting) {
			// Names were given to tie this optimizer to its model, and they do not fit it.
			return fmt.Errorf("optimizer state %s: %w", f.Path, f.Err)
		}
		if f.Optimizer == nil {
			p.Report.Warnings = append(p.Report.Warnings, Warning{Kind: "optimizer_not_understood", Items: []string{f.Path},
				Message: fmt.Sprintf("%s: not understood as an optimizer state, converted as plain data: %v", f.Path, f.Err)})
			continue
		}
		fates, converted := models[f.Model]
		fate := func(key string) (optimizerstate.Fate, bool) {
			if !converted { // the model was dropped or not selected: nothing to follow
				return optimizerstate.Fate{Name: key}, true
			}
			ft, ok := fates[key]
			return ft, ok
		}
		rep, follows, err := optimizerstate.Rewrite(o.out, f, fate)
		if err != nil {
			return err
		}
		if converted && f.Mapping != nil {
			for _, fl := range follows {
				fl.Param = statedict.JoinName(modelPath[f.Model], fl.Param)
				p.follows = append(p.follows, fl)
			}
			tied[f] = true
		}
		if rep.Unmapped != "" {
			p.Report.Warnings = append(p.Report.Warnings, Warning{Kind: "optimizer_unmapped", Items: []string{f.Path},
				Message: fmt.Sprintf("%s: its parameters could not be tied to the model, so its state keeps its own device tags: %s", f.Path, rep.Unmapped)})
		}
		p.Report.Optimizers = append(p.Report.Optimizers, rep)
	}
	return nil
}

// decider gives remap the plan's decisions.
type decider struct{ p *Plan }

// Policy is the policy of a tensor, wherever it is; an entry the training state drops is
// dropped whatever it holds.
func (d decider) Policy(name string, v statedict.Value) statedict.Policy {
	var pol statedict.Policy
	if t, ok := v.(*statedict.Tensor); ok {
		pol = d.p.policies[t]
	}
	if why, ok := d.p.decisions.Drop[name]; ok {
		pol.Drop, pol.Why = true, why
	}
	return pol
}

// Model reports whether d is one of the tree's model state dicts, or holds one in its
// tensor entries.
func (d decider) Model(dict *statedict.Dict) (bool, bool) {
	return d.p.decisions.Models[dict], d.p.decisions.Inline[dict]
}

// files decides what becomes of the files of a source folder that are not the weights: an
// HF Trainer checkpoint's training state converted alongside into a folder output
// (a torch file holds it inside: see convert), the other layouts' files left out, links
// leading outside never read.
func (p *Plan) files(ck *statedict.Checkpoint, folderOut bool) {
	var left, training []string
	for _, f := range ck.Ignored {
		switch {
		case folderOut && hf.IsTrainerState(f):
			p.Alongside = append(p.Alongside, f)
		case folderOut && hf.IsTrainingStateFolder(f):
			// Carried as it is among the extras: a DCP folder of training state.
		case hf.IsTrainerState(f) || hf.IsTrainingStateFolder(f):
			training = append(training, f)
		default:
			left = append(left, f)
		}
	}
	if len(p.Alongside) > 0 && p.Target.Sharding() != nil {
		p.warn(Warning{Kind: "training_state_whole", Items: p.Alongside,
			Message: fmt.Sprintf("converted %s whole next to the per-device weights (each a torch file for every rank); a per-device dcp output shards the optimizer moments with their parameters", Summarize(p.Alongside))})
	}
	if len(training) > 0 {
		p.warn(Warning{Kind: "training_state_left_out", Items: training, Dropped: true,
			Message: fmt.Sprintf("left out the training state %s: a %s file holds tensors only; a folder, torch or DCP output keeps it", Summarize(training), p.Options.Layout)})
	}
	if len(ck.Outside) > 0 {
		p.warn(Warning{Kind: "links_outside", Items: ck.Outside,
			Message: fmt.Sprintf("left out %s: links leading outside the checkpoint folder or not regular files, never read", Summarize(ck.Outside))})
	}
	if len(left) > 0 {
		p.warn(Warning{Kind: "files_left_out", Items: left, Dropped: true,
			Message: fmt.Sprintf("left out %s: weights or pickles outside the %s checkpoint that was read, not converted", Summarize(left), ck.Format)})
	}
}

// configDType rewrites the dtype every model configuration names (the folder's, or each
// component's: unet/config.json, text_encoder/config.json) to the cast's.
func (p *Plan) configDType(ck *statedict.Checkpoint) error {
	if p.Options.DType == statedict.Invalid {
		return nil
	}
	for _, name := range ck.Extras {
		if path.Base(name) != hf.ConfigFile {
			continue
		}
		cfg, ok := p.Rewrite[name]
		if !ok {
			var err error
			if cfg, err = ck.ReadFile(name); err != nil {
				return err
			}
		}
		if cfg == nil {
			continue
		}
		newCfg, old, err := hf.ConfigDType(cfg, p.Options.DType)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if old != "" {
			p.Rewrite[name] = newCfg
			p.ConfigDType = old + " → " + p.Options.DType.String()
		}
	}
	return nil
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
			return fmt.Errorf("%s: %w: %s inside %s objects, which ckpt does not read as data; nothing would be written", src.Path, ckpterr.ErrUnsupported, plural.Of(h.Tensors, "tensor"), strings.Join(h.Classes, ", "))
		} else if len(in) > 0 {
			return fmt.Errorf("%s: no tensor left to write: the selection and drops remove all %d", src.Path, len(in))
		}
		return nil
	}
	if weights {
		return nil
	}
	return fmt.Errorf("%s: %w: all %s empty (%s has shape %v): placeholders, not weights; nothing would be written", src.Path, ckpterr.ErrUnsupported, plural.Of(n, "tensor"), first.Name, first.Tensor.Shape)
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
