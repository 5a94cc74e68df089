package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Conversion is how DST was made from SRC: the plan's options and its target. Parity makes
// the same plan of the source to know the name, dtype and exact value every converted
// tensor must have.
type Conversion struct {
	// Recorded is set when the options come from the manifest's conversion record: dtypes
	// are then checked against them. Otherwise (Standard, or a manifest without a record)
	// any float cast between float16, bfloat16, float32 and float64 is accepted and compared
	// against the exactly rounded value, and quantized groups are compared dequantized or
	// kept as the destination holds them.
	Recorded bool
	Options  plan.Options
	// Target is the conversion's target (nil: device tags kept).
	Target *runtime.Target
}

// openSource opens the source as the conversion read it: with a Trainer or accelerate
// folder's training state inside the tree when the output held it there
// (plan.TrainingInTree).
func (c *Conversion) openSource(ctx context.Context, src string) (*statedict.Checkpoint, error) {
	ck, err := formats.OpenWith(ctx, src, c.Options.OpenOptions())
	if err != nil || !plan.TrainingInTree(c.Options.Layout, c.Target) {
		return ck, err
	}
	wrapped, err := formats.WithTrainingState(ctx, ck)
	if err != nil {
		ck.Close()
		return nil, err
	}
	return wrapped, nil
}

// Standard is the conversion assumed when nothing was recorded: `ckpt convert`'s defaults
// (DDP and torch.compile prefixes stripped, numpy data turned into tensors), no renames,
// casts and quantization modes inferred from the destination, CUDA RNG states compared
// where the destination kept them.
func Standard() *Conversion {
	return &Conversion{Options: plan.Options{StripWrappers: true, PlainData: true, KeepCUDARNG: true}}
}

// alongside is the conversion of a training-state file taken along into an HF folder
// output (optimizer.pt, …), as convert derives it.
func (c *Conversion) alongside() *Conversion {
	return &Conversion{Recorded: c.Recorded, Options: c.Options.Alongside(), Target: plan.AlongsideTarget(c.Target)}
}

// String is the conversion in the words of convert's options.
func (c *Conversion) String() string {
	o := c.Options
	var f []string
	if !c.Recorded {
		f = append(f, "(not recorded: casts and quantization inferred)")
	}
	if !o.StripWrappers {
		f = append(f, "--no-strip-wrappers")
	}
	if o.DType != statedict.Invalid {
		f = append(f, "--dtype "+o.DType.String())
	}
	if o.OptimizerDType != statedict.Invalid {
		f = append(f, "--optimizer-dtype "+o.OptimizerDType.String())
	}
	if o.Dequantize != "" {
		f = append(f, "--dequantize="+string(o.Dequantize))
	}
	if c.Target != nil && c.Target.Generation != nil && o.Dequantize != "" {
		f = append(f, "--tpu-gen "+c.Target.Generation.Name)
	}
	for _, r := range o.Renames {
		f = append(f, fmt.Sprintf("--rename %s=%s", r.Pattern, r.Repl))
	}
	if o.Select != "" {
		f = append(f, "--select "+o.Select)
	}
	for _, d := range o.Drop {
		f = append(f, "--drop "+d.String())
	}
	if o.KeepCUDARNG && c.Recorded {
		f = append(f, "--keep-cuda-rng")
	}
	if len(f) == 0 {
		return "defaults"
	}
	return strings.Join(f, " ")
}

// FromManifest reads the conversion a manifest records: its conversion record, validated
// and bounded (plan.FromRecord) — data only: no file it names is opened. A manifest of an
// older ckpt, without the record, gives Standard's inference with what its remap report
// says (wrapper prefixes stripped, entries dropped).
func FromManifest(m *manifest.Manifest) (*Conversion, []string, error) {
	if m.Conversion != nil {
		o, t, err := plan.FromRecord(m.Conversion)
		if err != nil {
			return nil, nil, err
		}
		return &Conversion{Recorded: true, Options: o, Target: t}, nil, nil
	}
	c := Standard()
	c.Options.KeepCUDARNG = false
	var rep struct {
		Renamed int      `json:"renamed"`
		Dropped []string `json:"dropped"`
	}
	if m.Remap != nil {
		b, _ := json.Marshal(m.Remap)
		_ = json.Unmarshal(b, &rep)
	}
	var warn []string
	if len(rep.Dropped) > maxDroppedNames {
		warn = append(warn, fmt.Sprintf("the manifest records %d dropped entries, more than the %d this check replays: the others are reported missing", len(rep.Dropped), maxDroppedNames))
		rep.Dropped = rep.Dropped[:maxDroppedNames]
	}
	if len(rep.Dropped) > 0 {
		var quoted []string
		for _, d := range rep.Dropped {
			if len(d) <= maxDroppedName {
				quoted = append(quoted, regexp.QuoteMeta(d))
			}
		}
		c.Options.Drop = []*regexp.Regexp{regexp.MustCompile("^(?:" + strings.Join(quoted, "|") + ")$")}
	}
	if rep.Renamed > 0 {
		warn = append(warn, fmt.Sprintf("the manifest records %d renamed tensors but not the rules: renamed tensors are paired by name only", rep.Renamed))
	}
	return c, warn, nil
}

// maxDroppedNames bounds the dropped entries an older manifest's report is replayed with.
const (
	maxDroppedNames = 1 << 12
	maxDroppedName  = 1 << 12
)
