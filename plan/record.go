package plan

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Record is the manifest record of a conversion made with o for t.
func (o Options) Record(t *runtime.Target) *manifest.Conversion {
	c := &manifest.Conversion{Version: manifest.ConversionVersion, Target: t.Spec(), Layout: string(o.Layout),
		Dequantize: string(o.Dequantize), StripWrappers: o.StripWrappers, PlainData: o.PlainData, Select: o.Select,
		KeepCUDARNG: o.KeepCUDARNG, OptimizerNames: o.OptimizerNames, ZeROOptimizer: o.ZeROOptimizer}
	if t == nil {
		c.Target = runtime.Spec{}
	}
	if o.DType != statedict.Invalid {
		c.DType = o.DType.String()
	}
	if o.OptimizerDType != statedict.Invalid {
		c.OptimizerDType = o.OptimizerDType.String()
	}
	for _, r := range o.Renames {
		c.Renames = append(c.Renames, manifest.Rename{Pattern: r.Pattern.String(), Replacement: r.Repl})
	}
	for _, d := range o.Drop {
		c.Drop = append(c.Drop, d.String())
	}
	return c
}

// Bounds of a recorded conversion: far above what any command line or program asks, so
// that a record is only ever refused for being hostile.
const (
	maxRules     = 1024    // renames, drops
	maxPattern   = 4 << 10 // bytes of a pattern or replacement
	maxNameLists = 1024    // optimizers with names
	maxNames     = 1 << 22 // names in all
	maxNameBytes = 4 << 10 // bytes of one name
)

// ErrRecord marks a recorded conversion that cannot be replayed: a version this ckpt does
// not know, a value out of range, more than the bounds allow.
var ErrRecord = errors.New("recorded conversion")

func recordError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRecord, fmt.Sprintf(format, args...))
}

// FromRecord reads a manifest's conversion record back into the options and target it
// records, validating and bounding every field: a record is data, never orders, and a
// hostile one is refused before anything is done with it.
func FromRecord(c *manifest.Conversion) (Options, *runtime.Target, error) {
	var o Options
	if c.Version != manifest.ConversionVersion {
		return o, nil, recordError("version %d; this ckpt reads version %d", c.Version, manifest.ConversionVersion)
	}
	if !formats.Layout(c.Layout).Valid() {
		return o, nil, recordError("layout %q", c.Layout)
	}
	o.Layout = formats.Layout(c.Layout)
	var err error
	if o.DType, err = castRecord("dtype", c.DType); err != nil {
		return o, nil, err
	}
	if o.OptimizerDType, err = castRecord("optimizer_dtype", c.OptimizerDType); err != nil {
		return o, nil, err
	}
	if o.Dequantize, err = quant.ParseMode(c.Dequantize); err != nil {
		return o, nil, recordError("%v", err)
	}
	o.StripWrappers, o.PlainData, o.KeepCUDARNG, o.ZeROOptimizer = c.StripWrappers, c.PlainData, c.KeepCUDARNG, c.ZeROOptimizer
	if len(c.Select) > maxPattern {
		return o, nil, recordError("select of %d bytes", len(c.Select))
	}
	o.Select = c.Select
	if len(c.Renames) > maxRules || len(c.Drop) > maxRules {
		return o, nil, recordError("%d renames and %d drops; at most %d of each", len(c.Renames), len(c.Drop), maxRules)
	}
	for i, r := range c.Renames {
		if len(r.Pattern) > maxPattern || len(r.Replacement) > maxPattern {
			return o, nil, recordError("rename %d: longer than %d bytes", i, maxPattern)
		}
		re, err := regexp.Compile(r.Pattern)
		if err != nil {
			return o, nil, recordError("rename %d: %v", i, err)
		}
		o.Renames = append(o.Renames, remap.Rename{Pattern: re, Repl: r.Replacement})
	}
	for i, d := range c.Drop {
		if len(d) > maxPattern {
			return o, nil, recordError("drop %d: longer than %d bytes", i, maxPattern)
		}
		re, err := regexp.Compile(d)
		if err != nil {
			return o, nil, recordError("drop %d: %v", i, err)
		}
		o.Drop = append(o.Drop, re)
	}
	if len(c.OptimizerNames) > maxNameLists {
		return o, nil, recordError("names for %d optimizers", len(c.OptimizerNames))
	}
	total := 0
	for path, names := range c.OptimizerNames {
		total += len(names)
		if total > maxNames || len(path) > maxNameBytes || slices.ContainsFunc(names, func(n string) bool { return len(n) > maxNameBytes }) {
			return o, nil, recordError("optimizer names beyond %d names of %d bytes", maxNames, maxNameBytes)
		}
	}
	o.OptimizerNames = c.OptimizerNames
	t, err := runtime.NewTarget(c.Target)
	if err != nil {
		return o, nil, recordError("%v", err)
	}
	return o, t, nil
}

// castRecord reads a recorded cast: a floating dtype a conversion casts to, or none.
func castRecord(field, v string) (statedict.DType, error) {
	if v == "" {
		return statedict.Invalid, nil
	}
	d, ok := statedict.ParseDType(v)
	if !ok || !slices.Contains(CastTo, d) {
		return statedict.Invalid, recordError("%s %q", field, v)
	}
	return d, nil
}

// CastTo are the dtypes a conversion casts weights and optimizer moments to.
var CastTo = []statedict.DType{statedict.BFloat16, statedict.Float16, statedict.Float32}
