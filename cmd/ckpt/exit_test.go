package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/storage"
	"github.com/ckpt-dev/ckpt/verify/forward"
)

// TestDescribeForceHint: only an earlier output --force would replace gets the --force
// hint; a destination ckpt may not write whatever the flags, and an unrelated "file exists"
// from the system, do not.
func TestDescribeForceHint(t *testing.T) {
	for _, c := range []struct {
		err  error
		hint bool
	}{
		{fmt.Errorf("out: %w", atomicfile.ErrExists), true},
		{fmt.Errorf("gs://b/out: %w: holds 3 object(s)", storage.ErrExists), true},
		{fmt.Errorf("gs://b/out/x: %w: not listed by the ckpt manifest there", storage.ErrForeign), false},
		{fmt.Errorf("out: %w", atomicfile.ErrForeign), false},
		{&fs.PathError{Op: "mkdir", Path: "/tmp/x", Err: fs.ErrExist}, false},
	} {
		got := strings.Contains(describe(c.err).Error(), "--force")
		if got != c.hint {
			t.Errorf("%v: --force hint %v, want %v", c.err, got, c.hint)
		}
	}
}

// TestUsageTable: every command's command-line mistakes — missing and extra arguments,
// missing required flags, unknown flags, bad values, topologies, meshes and token lists —
// exit 2, and with --json (given last, after the mistake) print {"error": {"kind": "usage",
// "exit_status": 2}} (issue 28, item 1). Every command has a row.
func TestUsageTable(t *testing.T) {
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	pt := "../../testdata/torch/training_cuda.pt"
	hf := "../../testdata/hf/mistral_sharded"
	out := filepath.Join(t.TempDir(), "out")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"version", "extra"}, "ckpt version takes no arguments; 1 extra argument"},
		{[]string{"version", "--nonsense"}, "unknown flag: --nonsense"},
		{[]string{"inspect"}, "missing PATH"},
		{[]string{"inspect", "--nonsense", pt}, "unknown flag: --nonsense"},
		{[]string{"inspect", "--hash=maybe", pt}, `invalid argument "maybe" for "--hash"`},
		{[]string{"scan"}, "missing PATH"},
		{[]string{"scan", pt, pt}, "1 extra argument"},
		{[]string{"scan", "--nonsense", pt}, "unknown flag"},
		{[]string{"convert", pt}, "missing DST"},
		{[]string{"convert", "--nonsense", pt, out}, "unknown flag"},
		{[]string{"convert", "--max-shard-size", "abc", hf, out}, `--max-shard-size: size "abc"`},
		{[]string{"convert", "--topology", "v3-8", hf, out}, `--topology: topology "v3-8"`},
		{[]string{"convert", "--topology", "v5p-8", "--mesh", "fsdp=3", hf, out}, "--mesh: mesh fsdp=3 has 3 ranks"},
		{[]string{"convert", "--progress", "bogus", pt, out}, "one of auto, always or never"},
		{[]string{"convert", "--rename", "(", pt, out}, `--rename "(" is not REGEX=REPL`},
		{[]string{"convert", "--drop", "(", pt, out}, `--drop "("`},
		{[]string{"convert", "--host-wait", "abc", pt, out}, `invalid argument "abc" for "--host-wait"`},
		{[]string{"convert", "--map-location", "bogus::", pt, out}, "is not a device tag"},
		{[]string{"convert", "--topology", "v5p-16", "--num-hosts", "-1", hf, out}, "--num-hosts -1: a conversion has at least 1 host"},
		{[]string{"convert", "--topology", "v5p-16", "--num-hosts", "2", "--host-index", "5", hf, out}, "--host-index 5 of 2 hosts"},
		{[]string{"convert", "--topology", "v5p-16", "--num-hosts", "2", "--host-index", "-1", hf, out}, "--host-index -1: hosts count from 0"},
		{[]string{"convert", "--dequantize=bogus", hf, out}, `--dequantize "bogus": one of all or auto`},
		{[]string{"convert", "--max-shard-size", "-5GB", hf, out}, "--max-shard-size"},
		{[]string{"check"}, "missing OUTPUT"},
		{[]string{"check", "--nonsense", pt}, "unknown flag"},
		{[]string{"devices"}, "ckpt devices needs --topology (e.g. ckpt devices --topology v6e-8)"},
		{[]string{"devices", "--topology", "v3-8"}, `--topology: topology "v3-8": TPU generation "v3"`},
		{[]string{"devices", "--topology", "bogus"}, `--topology: topology "bogus"`},
		{[]string{"devices", "--topology", "v5p-8", "extra"}, "ckpt devices takes no arguments; 1 extra argument"},
		{[]string{"plan", "--topology", "v5p-8"}, "ckpt plan needs PATH; missing PATH"},
		{[]string{"plan", hf}, "ckpt plan needs --topology (e.g. ckpt plan Llama-3.1-70B/ --topology v5p-32)"},
		{[]string{"plan", "--topology", "v3-8", hf}, `--topology: topology "v3-8"`},
		{[]string{"plan", "--topology", "v5p-8", "--mesh", "fsdp=3", hf}, "--mesh: mesh fsdp=3 has 3 ranks"},
		{[]string{"plan", "--topology", "v5p-8", "--mesh", "bogus", hf}, `is not NAME=SIZE`},
		{[]string{"plan", "--topology", "v5p-8", "--dtype", "bf61", hf}, "did you mean bfloat16?"},
		{[]string{"forward", "--tokens", "1"}, "ckpt forward needs PATH; missing PATH"},
		{[]string{"forward", hf}, "ckpt forward needs --tokens or --prompt-ids (e.g. ckpt forward Qwen3-0.6B/ --tokens 151644,872,198)"},
		{[]string{"forward", "--tokens", "1,x", hf}, `--tokens: "x" is not a token id`},
		{[]string{"forward", "--tokens", "", hf}, "--tokens: no token ids"},
		{[]string{"forward", "--tokens", "1", "--precision", "fp8", hf}, "--precision"},
		{[]string{"verify", pt}, "missing DST"},
		{[]string{"verify", "--nonsense", pt, pt}, "unknown flag"},
		{[]string{"verify", "--forward", "--tokens", "x", hf, hf}, `--tokens: "x" is not a token id`},
		{[]string{"verify", "--min-agree", "abc", hf, hf}, `invalid argument "abc" for "--min-agree"`},
		{[]string{"verify", "--forward", "--min-agree", "2", hf, hf}, "--min-agree within [0, 1]"},
		{[]string{"nonsense"}, `unknown command "nonsense"`},
	}
	covered := map[string]bool{}
	root := newRoot()
	for _, c := range cases {
		covered[c.args[0]] = true
		sub, _, _ := root.Find(c.args[:1])
		for _, asJSON := range []bool{false, true} {
			args := c.args
			if asJSON {
				if sub.Flags().Lookup("json") == nil {
					continue // the root: an unknown command has no --json
				}
				args = append(append([]string(nil), args...), "--json")
			}
			stdout, err := run(t, args...)
			if got := exitStatus(err); got != exitUsage || !strings.Contains(fmt.Sprint(err), c.want) {
				t.Errorf("%q: exit %d (%v); want exit 2 and %q", args, got, err, c.want)
				continue
			}
			if !asJSON {
				continue
			}
			var e struct {
				Error errorReport `json:"error"`
			}
			if jerr := json.Unmarshal([]byte(stdout), &e); jerr != nil || e.Error.Kind != "usage" || e.Error.ExitStatus != exitUsage || e.Error.Message != err.Error() {
				t.Errorf("%q: --json printed %+v (%v):\n%s", args, e.Error, jerr, stdout)
			}
		}
	}
	for _, c := range root.Commands() {
		if !c.Hidden && c.Name() != "help" && c.Name() != "completion" && !covered[c.Name()] {
			t.Errorf("no usage mistakes of %s in the table", c.Name())
		}
	}
}

// TestREADMEExitTable: the README's exit-status table is the one `ckpt --help` shows,
// rendered from exitTable (-update rewrites it) (issue 28, item 8).
func TestREADMEExitTable(t *testing.T) {
	const path = "../../README.md"
	const open, end = "<!-- exit-status: generated from cmd/ckpt/exit.go (go test ./cmd/ckpt -run TestREADMEExitTable -update) -->\n", "<!-- /exit-status -->\n"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i, j := strings.Index(readme, open), strings.Index(readme, end)
	if i < 0 || j < i {
		t.Fatalf("README.md has no exit-status section (%q … %q)", open, end)
	}
	got, want := readme[i+len(open):j], exitMarkdown()
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(readme[:i+len(open)]+want+readme[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's exit-status table differs from ckpt --help's:\n%s\nwant:\n%s", got, want)
}

// flagsInLibrary are the library files whose strings may name flags: a verify report
// describes the conversion it assumed as convert's flags (docs/json.md, "conversion"), the
// hub cache says the `hf download` command line that fetches a missing model, and the
// Megatron reader names Megatron-LM's own flag that re-saves an old distributed optimizer.
var flagsInLibrary = map[string]bool{
	"verify/conversion.go":              true,
	"formats/hf/cache.go":               true,
	"formats/megatron/merge_distopt.go": true,
}

// TestLibraryMessagesNameNoFlags: the library's messages speak in domain terms; only the
// command line's describe adds the flags that change what went wrong (issue 28, item 12).
// It reads every string the library formats into an error, a warning or a suggestion.
func TestLibraryMessagesNameNoFlags(t *testing.T) {
	flag := regexp.MustCompile(`(^|[ (:])--[a-z][a-z-]+`)
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "cmd" || rel == "scripts" || rel == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || flagsInLibrary[filepath.ToSlash(rel)] {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && flag.MatchString(s) {
					t.Errorf("%s: %q names a flag of the command line", rel, s)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDescribeHints: the flags that change what went wrong are added by describe, to the
// library's error in domain terms: a model without config.json points at --config (issue
// 28, item 12).
func TestDescribeHints(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors", "model-00004-of-00004.safetensors", "model.safetensors.index.json"} {
		b, err := os.ReadFile(filepath.Join("../../testdata/hf/mistral_sharded", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	for _, args := range [][]string{{"forward", "--tokens", "1", dir}, {"verify", "--forward", "--tokens", "1", dir, dir}} {
		_, err := run(t, args...)
		if !errors.Is(err, forward.ErrNoConfig) || !strings.HasSuffix(err.Error(), "(--config FILE gives the model's config.json)") || strings.Count(err.Error(), "no config.json") != 1 {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// TestNoDoubledPrefix: a source's path starts an error once, whichever layer found it — a
// broken config.json read for --dequantize said "q: q: config.json: …" (issue 28, item 7).
func TestNoDoubledPrefix(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	copyDir(t, "../../testdata/hf/mistral_sharded", dir)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte("{"), 0o644)
	for _, args := range [][]string{
		{"convert", "--dequantize", dir, filepath.Join(t.TempDir(), "o")},
		{"convert", "--dequantize=auto", "--tpu-gen", "v5p", dir, filepath.Join(t.TempDir(), "o")},
		{"convert", "--dtype", "bf16", dir, filepath.Join(t.TempDir(), "o")},
	} {
		_, err := run(t, args...)
		if err == nil || strings.Count(err.Error(), dir) != 1 || !strings.Contains(err.Error(), "config.json") {
			t.Errorf("%v: %v, want the folder named once", args, err)
		}
	}
}
