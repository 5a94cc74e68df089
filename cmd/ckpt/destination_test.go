package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/atomicfile"
)

// TestDestinationRules: source kind × destination form × --format decide the output
// (issue 15, item 1), and what the command says matches what it wrote: configs carried into
// folder outputs, said to be left behind once for single files, never claimed when absent.
func TestDestinationRules(t *testing.T) {
	hf := "../../testdata/hf/mistral_sharded"
	dcp := "../../testdata/dcp/model"
	file := "../../testdata/torch/training_cuda.pt"
	st := "../../testdata/safetensors/every_dtype.safetensors"
	type want struct {
		path   string // relative to the test folder
		folder bool   // a folder output (else a file)
		files  []string
		say    string // in stdout or stderr
	}
	cases := []struct {
		name, src, dst, format string
		existing               bool // DST is an existing empty folder
		want                   want
	}{
		{"hf folder into out/", hf, "out/", "", false, want{"out", true, []string{"config.json", "generation_config.json", "model.safetensors"}, ""}},
		{"hf folder into plain name", hf, "out", "", false, want{"out", true, []string{"config.json", "model.safetensors"}, ""}},
		{"hf folder into existing folder", hf, "out", "", true, want{"out", true, []string{"config.json", "model.safetensors"}, ""}},
		{"hf folder as dcp", hf, "out/", "dcp", false, want{"out", true, []string{".metadata", "__0_0.distcp", "config.json"}, ""}},
		{"dcp folder into out/", dcp, "out/", "", false, want{"out", true, []string{".metadata", "__0_0.distcp"}, ""}},
		{"hf folder as torch file", hf, "model.pt", "", false, want{"model.pt", false, nil, "not carried: config.json, generation_config.json"}},
		{"hf folder, --format torch into out/", hf, "out/", "torch", true, want{"out/mistral_sharded.pt", false, nil, "not carried: config.json"}},
		{"file into existing folder", file, "out", "", true, want{"out/training_cuda.pt", false, nil, ""}},
		{"file into out/ as safetensors", file, "out/", "safetensors", false, want{"out", true, []string{"model.safetensors"}, ""}},
		{"safetensors file into folder", st, "out", "", true, want{"out/every_dtype.safetensors", false, nil, ""}},
		{"file to .safetensors", file, "x.safetensors", "", false, want{"x.safetensors", false, nil, ""}},
		{"file to plain name", file, "x", "", false, want{"x", false, nil, ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			dst := filepath.Join(dir, c.dst)
			if strings.HasSuffix(c.dst, "/") {
				dst += "/"
			}
			if c.existing {
				os.MkdirAll(filepath.Join(dir, strings.TrimSuffix(c.dst, "/")), 0o755)
			}
			args := []string{"convert"}
			if c.format != "" {
				args = append(args, "--format", c.format)
			}
			root := newRoot()
			var stdout, stderr strings.Builder
			root.SetOut(&stdout)
			root.SetErr(&stderr)
			if err := execute(root, append(args, c.src, dst)); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, c.want.path)
			fi, err := os.Stat(out)
			if err != nil {
				t.Fatalf("no output at %s: %v", c.want.path, err)
			}
			if fi.IsDir() != c.want.folder {
				t.Fatalf("%s is a folder: %v, want %v", c.want.path, fi.IsDir(), c.want.folder)
			}
			if c.want.folder {
				entries, _ := os.ReadDir(out)
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				for _, f := range c.want.files {
					if !slices.Contains(names, f) {
						t.Errorf("%s holds %v, not %s", c.want.path, names, f)
					}
				}
			}
			said := stdout.String() + stderr.String()
			if c.want.say != "" && !strings.Contains(said, c.want.say) {
				t.Errorf("output does not say %q:\n%s", c.want.say, said)
			}
			if !c.want.folder && strings.Contains(said, "config.json") && !strings.Contains(said, "not carried") {
				t.Errorf("claims work on config.json for a single-file output:\n%s", said)
			}
		})
	}
}

// TestNoClaimsForFilesNotWritten: dequantizing a folder into a single file removes no
// config from anywhere, and must not say it did.
func TestNoClaimsForFilesNotWritten(t *testing.T) {
	out, err := run(t, "convert", "--dequantize", "../../testdata/quantized/fp8_block", filepath.Join(t.TempDir(), "x.pt"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "removed the quantization config") || !strings.Contains(out, "dequantized ") {
		t.Errorf("summary claims work not done:\n%s", out)
	}
}

// TestFirstRefusalSaysWhy: a folder that is itself an earlier output never receives a
// second checkpoint inside (check would still pass it); and a destination --force would
// refuse too is refused the first time with that reason, not with a --force hint (issue
// 28, item 6).
func TestFirstRefusalSaysWhy(t *testing.T) {
	pt := "../../testdata/torch/training_cuda.pt"
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if _, err := run(t, "convert", "-q", "../../testdata/hf/mistral_sharded", out); err != nil {
		t.Fatal(err)
	}
	before := treeHashes(t, out)
	for _, args := range [][]string{{out}, {out + "/"}, {"--format", "torch", out}, {"--force", out}} {
		_, err := run(t, append(append([]string{"convert", "-q"}, args[:len(args)-1]...), pt, args[len(args)-1])...)
		if exitStatus(err) != exitUsage || !strings.Contains(fmt.Sprint(err), "holds ckpt-manifest.json") || !strings.Contains(err.Error(), "name a new DST") {
			t.Errorf("%v into an earlier output folder: exit %d, %v", args, exitStatus(err), err)
		}
	}
	if got := treeHashes(t, out); !maps.Equal(got, before) {
		t.Errorf("the earlier output changed: %v, was %v", got, before)
	}
	user := filepath.Join(dir, "user")
	os.Mkdir(user, 0o755)
	os.WriteFile(filepath.Join(user, "training_cuda.pt"), []byte("mine"), 0o644)
	other := filepath.Join(dir, "other")
	os.Mkdir(other, 0o755)
	os.WriteFile(filepath.Join(other, "notes.txt"), []byte("mine"), 0o644)
	for _, c := range []struct {
		args []string
		why  string
	}{
		{[]string{pt, user}, "no ckpt manifest beside it records it"},
		{[]string{"--format", "dcp", pt, other}, "no ckpt manifest there proves it wrote notes.txt"},
		{[]string{pt, filepath.Join(user, "training_cuda.pt")}, "no ckpt manifest beside it records it"},
	} {
		for _, force := range []bool{false, true} {
			args := append([]string{"convert", "-q"}, c.args...)
			if force {
				args = append(args, "--force")
			}
			_, err := run(t, args...)
			if !errors.Is(err, atomicfile.ErrForeign) || !strings.Contains(err.Error(), c.why) || strings.Contains(err.Error(), "--force") {
				t.Errorf("%v: %v, want the reason %q and no --force hint", args, err, c.why)
			}
		}
	}
	if b, _ := os.ReadFile(filepath.Join(user, "training_cuda.pt")); string(b) != "mine" {
		t.Errorf("the user's file changed: %q", b)
	}
	// An earlier output --force does replace still gets the hint.
	dst := filepath.Join(dir, "o.pt")
	run(t, "convert", "-q", pt, dst)
	if _, err := run(t, "convert", "-q", pt, dst); !errors.Is(err, atomicfile.ErrExists) || !strings.Contains(err.Error(), "--force replaces") {
		t.Errorf("an earlier output: %v", err)
	}
}
