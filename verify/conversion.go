package verify

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/manifest"
	"github.com/ckpt-dev/ckpt/formats/store"
	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/spf13/pflag"
)

// Conversion is what a conversion did to names, dtypes and quantized tensors — the part of
// `ckpt convert`'s options that decides what each source tensor becomes. Parity applies it to
// the source to know the name, dtype and exact value every converted tensor must have.
type Conversion struct {
	// Recorded is set when the options come from the command line the manifest recorded:
	// dtypes are then checked against them. Otherwise (Standard, or a manifest without a
	// command line) any float cast between float16, bfloat16, float32 and float64 is accepted
	// and compared against the exactly rounded value, and quantized groups are compared
	// dequantized or kept as the destination holds them.
	Recorded bool `json:"recorded"`
	// StripWrappers, Renames, Select, Drop, PlainData, KeepCUDARNG and OptimizerNames
	// decide names, as remap.Options do.
	StripWrappers  bool                `json:"strip_wrappers"`
	PlainData      bool                `json:"plain_data"`
	Renames        []remap.Rename      `json:"-"`
	Select         string              `json:"select,omitempty"`
	Drop           []*regexp.Regexp    `json:"-"`
	KeepCUDARNG    bool                `json:"keep_cuda_rng,omitempty"`
	OptimizerNames map[string][]string `json:"-"`
	// DType and OptimizerDType are the casts (Invalid: none).
	DType          statedict.DType `json:"-"`
	OptimizerDType statedict.DType `json:"-"`
	// Dequantize is "" (quantized tensors kept), "all" or "auto" (unpacked unless
	// Generation runs them natively).
	Dequantize string              `json:"dequantize,omitempty"`
	Generation *runtime.Generation `json:"-"`
	// ZeROOptimizer: the source, a DeepSpeed ZeRO folder, was read with its optimizer state
	// consolidated (convert --zero-optimizer); the source is opened the same way.
	ZeROOptimizer bool `json:"zero_optimizer,omitempty"`
	// Args is the command line the options were read from.
	Args []string `json:"args,omitempty"`
}

// openSource opens the source as the conversion read it.
func (c *Conversion) openSource(src string) (*statedict.Checkpoint, error) {
	return formats.OpenWith(src, formats.OpenOptions{ZeROOptimizer: c.ZeROOptimizer})
}

// Standard is the conversion assumed when nothing was recorded: `ckpt convert`'s defaults
// (DDP and torch.compile prefixes stripped, numpy data turned into tensors), no renames,
// casts and quantization modes inferred from the destination, CUDA RNG states compared
// where the destination kept them.
func Standard() *Conversion {
	return &Conversion{StripWrappers: true, PlainData: true, KeepCUDARNG: true}
}

// remapOptions are the remap rules of c, with the quantization policies pol.
func (c *Conversion) remapOptions(pol statedict.Policies) remap.Options {
	o := remap.Options{StripWrappers: c.StripWrappers, PlainData: c.PlainData, Renames: c.Renames, Select: c.Select,
		Drop: c.Drop, KeepCUDARNG: c.KeepCUDARNG, OptimizerNames: c.OptimizerNames, Policies: pol}
	if c.Recorded {
		o.DType, o.OptimizerDType = c.DType, c.OptimizerDType
	}
	return o
}

// alongside is the conversion of a training-state file taken along into an HF folder
// output (optimizer.pt, …): convert keeps the device, plain-data, optimizer-dtype and RNG
// options and nothing else.
func (c *Conversion) alongside() *Conversion {
	return &Conversion{Recorded: c.Recorded, PlainData: c.PlainData, OptimizerDType: c.OptimizerDType, KeepCUDARNG: c.KeepCUDARNG}
}

// String is the conversion as convert flags.
func (c *Conversion) String() string {
	var f []string
	if !c.Recorded {
		f = append(f, "(not recorded: casts and quantization inferred)")
	}
	if !c.StripWrappers {
		f = append(f, "--no-strip-wrappers")
	}
	if c.DType != statedict.Invalid {
		f = append(f, "--dtype "+c.DType.String())
	}
	if c.OptimizerDType != statedict.Invalid {
		f = append(f, "--optimizer-dtype "+c.OptimizerDType.String())
	}
	if c.Dequantize != "" {
		f = append(f, "--dequantize="+c.Dequantize)
	}
	if c.Generation != nil {
		f = append(f, "--tpu-gen "+c.Generation.Name)
	}
	for _, r := range c.Renames {
		f = append(f, fmt.Sprintf("--rename %s=%s", r.Pattern, r.Repl))
	}
	if c.Select != "" {
		f = append(f, "--select "+c.Select)
	}
	for _, d := range c.Drop {
		f = append(f, "--drop "+d.String())
	}
	if c.KeepCUDARNG && c.Recorded {
		f = append(f, "--keep-cuda-rng")
	}
	if len(f) == 0 {
		return "defaults"
	}
	return strings.Join(f, " ")
}

// FromManifest reads the conversion a manifest records: its command line (Args) when it
// has one — the flags of `ckpt convert` that decide names, dtypes and quantization — else
// its remap report (wrapper prefixes stripped, entries dropped). Flags that do not bear on
// values (--to, --format, --map-location, --force, …) are ignored, as are flags this
// version does not know. An --optimizer-names file that can no longer be read is left out
// with a warning.
func FromManifest(m *manifest.Manifest, dir string) (*Conversion, []string, error) {
	if args, ok := convertArgs(m.Args); ok {
		return parseConvertArgs(args, dir)
	}
	c := Standard()
	c.KeepCUDARNG = false
	var rep struct {
		Stripped []string `json:"stripped"`
		Renamed  int      `json:"renamed"`
		Dropped  []string `json:"dropped"`
	}
	if m.Remap != nil {
		b, _ := json.Marshal(m.Remap)
		_ = json.Unmarshal(b, &rep)
	}
	for _, d := range rep.Dropped {
		c.Drop = append(c.Drop, regexp.MustCompile("^"+regexp.QuoteMeta(d)+"$"))
	}
	var warn []string
	if rep.Renamed > 0 {
		warn = append(warn, fmt.Sprintf("the manifest records %d renamed tensors but not the rules: renamed tensors are paired by name only", rep.Renamed))
	}
	return c, warn, nil
}

// convertArgs returns the arguments after the convert subcommand of a recorded command line.
func convertArgs(args []string) ([]string, bool) {
	for i, a := range args {
		if i > 0 && a == "convert" {
			return args[i+1:], true
		}
	}
	return nil, false
}

// parseConvertArgs parses convert's flags; dir resolves relative --optimizer-names files.
func parseConvertArgs(args []string, dir string) (*Conversion, []string, error) {
	fs := pflag.NewFlagSet("convert", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(discard{})
	var (
		dtype, optimDType, dequantize, tpuGen, sel string
		renames, drops, optimNames                 []string
		noStrip, keepRNG, zeroOptim                bool
	)
	fs.StringVar(&dtype, "dtype", "keep", "")
	fs.StringVar(&optimDType, "optimizer-dtype", "keep", "")
	fs.StringVar(&dequantize, "dequantize", "", "")
	fs.Lookup("dequantize").NoOptDefVal = "all"
	fs.StringVar(&tpuGen, "tpu-gen", "", "")
	fs.StringVar(&sel, "select", "", "")
	fs.StringArrayVar(&renames, "rename", nil, "")
	fs.StringArrayVar(&drops, "drop", nil, "")
	fs.StringArrayVar(&optimNames, "optimizer-names", nil, "")
	fs.BoolVar(&noStrip, "no-strip-wrappers", false, "")
	fs.BoolVar(&keepRNG, "keep-cuda-rng", false, "")
	fs.BoolVar(&zeroOptim, "zero-optimizer", false, "")
	// Value flags that do not bear on values, declared so that their values are not taken
	// for arguments.
	for _, name := range []string{"to", "format", "map-location", "max-shard-size", "topology", "mesh", "plan"} {
		fs.String(name, "", "")
	}
	for _, name := range []string{"force", "resume", "json"} {
		fs.Bool(name, false, "")
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, fmt.Errorf("the manifest's command line: %w", err)
	}
	c := &Conversion{Recorded: true, StripWrappers: !noStrip, PlainData: true, Select: sel, KeepCUDARNG: keepRNG, ZeROOptimizer: zeroOptim, Args: args}
	var err error
	if c.DType, err = castFlag("dtype", dtype); err != nil {
		return nil, nil, err
	}
	if c.OptimizerDType, err = castFlag("optimizer-dtype", optimDType); err != nil {
		return nil, nil, err
	}
	switch dequantize {
	case "", "none":
	case "all", "auto":
		c.Dequantize = dequantize
	default:
		return nil, nil, fmt.Errorf("the manifest's command line: --dequantize=%q", dequantize)
	}
	if tpuGen != "" {
		if c.Generation, err = runtime.LookupGeneration(tpuGen); err != nil {
			return nil, nil, fmt.Errorf("the manifest's command line: --tpu-gen: %w", err)
		}
	}
	for _, r := range renames {
		rr, err := remap.ParseRename(r)
		if err != nil {
			return nil, nil, fmt.Errorf("the manifest's command line: %w", err)
		}
		c.Renames = append(c.Renames, rr)
	}
	for _, d := range drops {
		re, err := regexp.Compile(d)
		if err != nil {
			return nil, nil, fmt.Errorf("the manifest's command line: --drop %q: %w", d, err)
		}
		c.Drop = append(c.Drop, re)
	}
	var warn []string
	for _, v := range optimNames {
		path, file, ok := strings.Cut(v, "=")
		if !ok {
			path, file = "", v
		}
		if !filepath.IsAbs(file) && dir != "" {
			if _, err := optimizerstate.ReadNames(file); err != nil {
				file = store.Join(dir, file)
			}
		}
		names, err := optimizerstate.ReadNames(file)
		if err != nil {
			warn = append(warn, fmt.Sprintf("--optimizer-names %s is not readable here (%v): the optimizer state is mapped by shapes", v, err))
			continue
		}
		if c.OptimizerNames == nil {
			c.OptimizerNames = map[string][]string{}
		}
		c.OptimizerNames[path] = names
	}
	return c, warn, nil
}

// castFlag reads a --dtype value.
func castFlag(flag, v string) (statedict.DType, error) {
	if v == "" || v == "keep" {
		return statedict.Invalid, nil
	}
	d, ok := statedict.ParseDType(v)
	if !ok || !slices.Contains([]statedict.DType{statedict.BFloat16, statedict.Float16, statedict.Float32}, d) {
		return statedict.Invalid, fmt.Errorf("the manifest's command line: --%s %q", flag, v)
	}
	return d, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
