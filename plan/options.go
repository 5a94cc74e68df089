package plan

import (
	"regexp"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Options are a conversion's decisions about values, as its user states them: the casts,
// what to do with quantized tensors, the name rules and the training-state options. With
// the target and the layout written, they decide everything the conversion does to each
// value; a manifest records them (Record) so that `ckpt verify` replays the same plan. The
// zero value changes nothing: no cast, names kept, quantized tensors passed through.
type Options struct {
	// Layout is the layout written; it decides what the output can hold (a tree or tensors
	// only, a folder with files alongside or one file).
	Layout formats.Layout
	// DType, when valid, is the dtype floating-point weights are cast to (float16,
	// bfloat16, float32, float64 sources only; integer, bool, fp8/fp4 and optimizer state
	// untouched). Dequantized tensors take it too (bfloat16 when unset).
	DType statedict.DType
	// OptimizerDType, when valid, is the dtype optimizer moments (per-parameter state
	// except step) are cast to; by default they keep theirs whatever DType does to weights.
	OptimizerDType statedict.DType
	// Dequantize says what to do with quantized tensors.
	Dequantize quant.Mode
	// StripWrappers removes the DDP "module." and torch.compile "_orig_mod." prefixes when
	// every name of a model state dict carries them.
	StripWrappers bool
	// PlainData turns values torch.load(weights_only=True) refuses into the data they hold
	// (remap.Plain).
	PlainData bool
	// Renames are applied in order to each tensor name of the model state dicts.
	Renames []remap.Rename
	// Select keeps only the sub-tree at this dotted path (e.g. "state_dict").
	Select string
	// Drop removes every entry whose flattened name matches one of these.
	Drop []*regexp.Regexp
	// KeepCUDARNG keeps CUDA RNG states, as CPU byte tensors, instead of dropping them.
	KeepCUDARNG bool
	// OptimizerNames lists the model entry names of an optimizer's parameters in id order,
	// by optimizer state path ("" for the only one), for ids shapes cannot map.
	OptimizerNames map[string][]string
	// ZeROOptimizer: the source, a DeepSpeed ZeRO folder, is read with its optimizer state
	// consolidated (formats.OpenOptions).
	ZeROOptimizer bool
	// Consume lets the plan remap the source's tensors and storages in place (remap's
	// Options.Consume): for a caller that gives the source tree up. It is how the plan is
	// made, not what it decides, and is not recorded.
	Consume bool
}

// OpenOptions are the options the source is read with.
func (o Options) OpenOptions() formats.OpenOptions {
	return formats.OpenOptions{ZeROOptimizer: o.ZeROOptimizer}
}

// Alongside are the options of a training-state file of a Hugging Face Trainer folder
// converted next to the weights (optimizer.pt, scheduler.pt, rng_state.pth): a torch file,
// with the device, plain-data, optimizer-dtype and RNG options and nothing else.
func (o Options) Alongside() Options {
	return Options{Layout: formats.TorchFile, PlainData: o.PlainData, OptimizerDType: o.OptimizerDType, KeepCUDARNG: o.KeepCUDARNG}
}

// AlongsideTarget is the target of a training-state file converted alongside the weights
// (Alongside): t itself, or for a per-device output t's device and generation without its
// slice and mesh — a torch file holds whole tensors.
func AlongsideTarget(t *runtime.Target) *runtime.Target {
	if t.Sharding() == nil {
		return t
	}
	return &runtime.Target{Device: t.Device, MapLocation: t.MapLocation, Generation: t.Generation}
}

// TrainingInTree reports whether a conversion into layout for t carries the training state
// of a Trainer or accelerate folder inside the tree it writes (formats.WithTrainingState):
// a torch file holds it whole, and a per-device DCP output shards each optimizer moment
// with its parameter. Other folder outputs convert each training-state file alongside.
func TrainingInTree(layout formats.Layout, t *runtime.Target) bool {
	return layout == formats.TorchFile || layout == formats.DCPFolder && t.Sharding() != nil
}
