package verify

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// TestFromManifest reads the conversion a manifest's record holds: what the plan was made
// with, whoever asked (the record replaces the command line verify once re-parsed).
func TestFromManifest(t *testing.T) {
	rename := remap.Rename{Pattern: regexp.MustCompile(`^m\.`), Repl: "model."}
	for _, tc := range []struct {
		opts plan.Options
		spec runtime.Spec
		want string
	}{
		{plan.Options{Layout: formats.TorchFile, StripWrappers: true, PlainData: true}, runtime.Spec{Device: "tpu"}, "defaults"},
		{plan.Options{Layout: formats.HFFolder, StripWrappers: true, DType: statedict.BFloat16, OptimizerDType: statedict.Float32, Renames: []remap.Rename{rename}},
			runtime.Spec{Device: "tpu"}, `--dtype bfloat16 --optimizer-dtype float32 --rename ^m\.=model.`},
		{plan.Options{Layout: formats.HFFolder, StripWrappers: true, Dequantize: quant.DequantizeAll}, runtime.Spec{Device: "cpu"}, "--dequantize=all"},
		{plan.Options{Layout: formats.DCPFolder, Dequantize: quant.DequantizeAuto, Select: "state_dict"}, runtime.Spec{Device: "tpu", Topology: "tpu7x-8"},
			"--no-strip-wrappers --dequantize=auto --tpu-gen tpu7x --select state_dict"},
		{plan.Options{Layout: formats.DCPFolder, StripWrappers: true, Drop: []*regexp.Regexp{regexp.MustCompile("^opt")}, KeepCUDARNG: true,
			OptimizerNames: map[string][]string{"": {"a.weight", "b.weight"}}}, runtime.Spec{Device: "tpu", Topology: "v6e-8", Mesh: "dp=2,fsdp=4"},
			"--drop ^opt --keep-cuda-rng"},
	} {
		tg, err := runtime.NewTarget(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		// Through JSON, as a manifest holds it.
		b, err := json.Marshal(&manifest.Manifest{Tool: manifest.Tool, Conversion: tc.opts.Record(tg)})
		if err != nil {
			t.Fatal(err)
		}
		var m manifest.Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		c, _, err := FromManifest(&m)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got := c.String(); got != tc.want || !c.Recorded {
			t.Errorf("%s: %s, want %s", b, got, tc.want)
		}
		if c.Options.Layout != tc.opts.Layout || len(c.Options.OptimizerNames[""]) != len(tc.opts.OptimizerNames[""]) || c.Target.Spec() != tg.Spec() {
			t.Errorf("%s: read back as %+v for %+v", b, c.Options, c.Target.Spec())
		}
	}
	// No record (an older ckpt's manifest): the remap report's drops; renames it cannot
	// reproduce are said.
	c, warn, err := FromManifest(&manifest.Manifest{Args: []string{"ckpt", "convert", "--dtype", "bfloat16", "a", "b"},
		Remap: map[string]any{"dropped": []any{"optimizer.state.3"}, "renamed": 2.0}})
	if err != nil || c.Recorded || c.Options.DType != statedict.Invalid || len(c.Options.Drop) != 1 ||
		!c.Options.Drop[0].MatchString("optimizer.state.3") || c.Options.Drop[0].MatchString("optimizer.state.30") || len(warn) != 1 {
		t.Fatalf("%+v %q %v", c, warn, err)
	}
}

// TestFromManifestHostile: a record is data. Whatever a destination's manifest says, it is
// validated and bounded before anything is done with it, and nothing it names is opened.
func TestFromManifestHostile(t *testing.T) {
	good := func() *manifest.Conversion {
		return &manifest.Conversion{Version: manifest.ConversionVersion, Target: runtime.Spec{Device: "tpu"}, Layout: "torch"}
	}
	many := func(n int, s string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	for _, tc := range []struct {
		name string
		edit func(*manifest.Conversion)
		why  string
	}{
		{"future version", func(c *manifest.Conversion) { c.Version = 99 }, "version 99"},
		{"unknown layout", func(c *manifest.Conversion) { c.Layout = "../../etc" }, "layout"},
		{"integer cast", func(c *manifest.Conversion) { c.DType = "int8" }, "dtype"},
		{"bad dequantize", func(c *manifest.Conversion) { c.Dequantize = "some" }, "dequantize"},
		{"bad pattern", func(c *manifest.Conversion) { c.Renames = []manifest.Rename{{Pattern: "(", Replacement: "x"}} }, "rename 0"},
		{"rename bomb", func(c *manifest.Conversion) {
			c.Renames = make([]manifest.Rename, 2000)
			for i := range c.Renames {
				c.Renames[i] = manifest.Rename{Pattern: "(.*)", Replacement: "$1$1"}
			}
		}, "at most"},
		{"long pattern", func(c *manifest.Conversion) { c.Drop = []string{strings.Repeat("a", 5000)} }, "longer than"},
		{"names flood", func(c *manifest.Conversion) {
			c.OptimizerNames = map[string][]string{"": many(1<<22+1, "w")}
		}, "optimizer names"},
		{"a path to read names from", func(c *manifest.Conversion) { c.Target.Topology = "/dev/zero" }, "topology"},
		{"a plan file", func(c *manifest.Conversion) { c.Target.Mesh = "fsdp=2"; c.Target.MapLocation = "/etc/passwd" }, "map_location"},
	} {
		c := good()
		tc.edit(c)
		_, _, err := FromManifest(&manifest.Manifest{Conversion: c})
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.why)
		}
	}
}

// FuzzFromManifest reads arbitrary conversion records: an error or a conversion, never a
// panic, never a cast to a dtype a conversion does not make.
func FuzzFromManifest(f *testing.F) {
	f.Add(`{"version":1,"target":{"device":"tpu"},"layout":"torch","dtype":"bfloat16","renames":[{"pattern":"^a","replacement":"b"}]}`)
	f.Add(`{"version":1,"target":{"device":"tpu","topology":"v6e-8","mesh":"fsdp=8","plan":{"rules":[{"match":"x","placements":{"fsdp":"Shard(0)"}}]}},"layout":"dcp","dequantize":"auto"}`)
	f.Add(`{"version":1,"target":{"device":"cpu","map_location":"cuda:0=tpu"},"layout":"hf","optimizer_names":{"":["a"]},"drop":["^x"]}`)
	f.Fuzz(func(t *testing.T, s string) {
		var rec manifest.Conversion
		if json.Unmarshal([]byte(s), &rec) != nil {
			return
		}
		c, _, err := FromManifest(&manifest.Manifest{Conversion: &rec})
		if err == nil && c.Options.DType != statedict.Invalid && c.Options.DType.Size() == 0 {
			t.Fatal("invalid dtype accepted")
		}
	})
}
