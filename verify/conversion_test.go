package verify

import (
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/formats/manifest"
	"github.com/ckpt-dev/ckpt/statedict"
)

// TestFromManifest reads the conversion a manifest's command line records.
func TestFromManifest(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ckpt", "convert", "--to", "tpu", "a.pt", "b.pt"}, "defaults"},
		{[]string{"/usr/bin/ckpt", "convert", "--dtype", "bfloat16", "--optimizer-dtype=float32", "--rename", `^m\.=model.`, "a", "b"},
			`--dtype bfloat16 --optimizer-dtype float32 --rename ^m\.=model.`},
		{[]string{"ckpt", "convert", "--dequantize", "a", "b"}, "--dequantize=all"},
		{[]string{"ckpt", "convert", "--dequantize=auto", "--tpu-gen", "v7x", "--select", "state_dict", "--no-strip-wrappers", "a", "b"},
			"--no-strip-wrappers --dequantize=auto --tpu-gen tpu7x --select state_dict"},
		{[]string{"ckpt", "convert", "--mesh", "tp=2", "--topology", "v6e-8", "--some-future-flag", "--drop", "^opt", "a", "b"}, "--drop ^opt"},
	} {
		c, _, err := FromManifest(&manifest.Manifest{Args: tc.args}, "")
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if got := c.String(); got != tc.want || !c.Recorded {
			t.Errorf("%q: %s, want %s", tc.args, got, tc.want)
		}
	}
	// No command line: the remap report's drops; renames it cannot reproduce are said.
	c, warn, err := FromManifest(&manifest.Manifest{Remap: map[string]any{"dropped": []any{"optimizer.state.3"}, "renamed": 2.0}}, "")
	if err != nil || c.Recorded || len(c.Drop) != 1 || !c.Drop[0].MatchString("optimizer.state.3") || c.Drop[0].MatchString("optimizer.state.30") || len(warn) != 1 {
		t.Fatalf("%+v %q %v", c, warn, err)
	}
	for _, bad := range [][]string{
		{"ckpt", "convert", "--dtype", "int8", "a", "b"},
		{"ckpt", "convert", "--rename", "(=x", "a", "b"},
		{"ckpt", "convert", "--tpu-gen", "v99", "a", "b"},
	} {
		if _, _, err := FromManifest(&manifest.Manifest{Args: bad}, ""); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// FuzzFromManifest parses arbitrary recorded command lines: an error or a conversion, never
// a panic.
func FuzzFromManifest(f *testing.F) {
	f.Add("ckpt\x00convert\x00--dtype\x00bfloat16\x00--rename\x00^a=b\x00a\x00b")
	f.Add("ckpt\x00convert\x00--dequantize\x00--tpu-gen=v6e\x00--\x00a")
	f.Add("x\x00convert\x00--optimizer-names\x00p=/nonexistent\x00-d")
	f.Fuzz(func(t *testing.T, s string) {
		c, _, err := FromManifest(&manifest.Manifest{Args: strings.Split(s, "\x00")}, "")
		if err == nil && c.DType != statedict.Invalid && c.DType.Size() == 0 {
			t.Fatal("invalid dtype accepted")
		}
	})
}
