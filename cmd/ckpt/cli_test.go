package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestArgumentErrorsTeach: wrong command lines are usage errors (exit 2) that say what is
// missing or wrong, suggest the nearest value and recognize paths ckpt does not read
// (issue 15, item 5); the usual aliases are accepted.
func TestArgumentErrorsTeach(t *testing.T) {
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	src := "../../testdata/torch/training_cuda.pt"
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"convert", "--to", "tpu", "x.pt"}, exitUsage, "missing DST (e.g. ckpt convert"},
		{[]string{"convert", "--dequantize", "auto", "x.pt", "y.pt"}, exitUsage, "write --dequantize=auto"},
		{[]string{"convert", "--dtype", "bfloat61", src, "y.pt"}, exitUsage, "did you mean bfloat16?"},
		{[]string{"convert", "--format", "safetensor", src, "y.pt"}, exitUsage, "did you mean safetensors?"},
		{[]string{"convert", "--to", "gpu", src, "y.pt"}, exitUsage, "one of tpu or cpu"},
		{[]string{"convert", "--nonsense", src, "y.pt"}, exitUsage, "unknown flag"},
		{[]string{"inspect", "gs://b/run/step-1000"}, exitFailure, "not a valid bucket name"},
		{[]string{"inspect", "s3://user:secret@bucket/ckpt.pt"}, exitFailure, "takes no user information"},
		{[]string{"inspect", "Qwen/Qwen3-0.6B"}, exitFailure, "hf download Qwen/Qwen3-0.6B"},
		{[]string{"inspect", "a.pt", "b.pt"}, exitUsage, "1 extra argument"},
	}
	for _, c := range cases {
		_, err := run(t, c.args...)
		if got := exitStatus(err); got != c.code || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d, %v; want exit %d and %q", c.args, got, err, c.code, c.want)
		}
	}
	for _, alias := range []string{"bf16", "fp16", "fp32", "BFloat16"} {
		if _, err := run(t, "convert", "--dtype", alias, src, filepath.Join(t.TempDir(), "o.pt")); err != nil {
			t.Errorf("--dtype %s: %v", alias, err)
		}
	}
}

// TestConventions: --version, -q, progress lines where stderr is not a terminal, and flag
// values offered to shell completion (issue 15, item 6).
func TestConventions(t *testing.T) {
	out, err := run(t, "--version")
	if err != nil || !strings.HasPrefix(out, "ckpt ") {
		t.Errorf("--version: %q, %v", out, err)
	}
	src := "../../testdata/torch/training_cuda.pt"
	root := newRoot()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	if err := execute(root, []string{"convert", "-q", src, filepath.Join(t.TempDir(), "q.pt")}); err != nil || stdout.Len() != 0 || stderr.Len() != 0 {
		t.Errorf("-q printed %q / %q (%v)", stdout.String(), stderr.String(), err)
	}
	root = newRoot()
	stdout.Reset()
	stderr.Reset()
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	if err := execute(root, []string{"convert", src, filepath.Join(t.TempDir(), "p.pt")}); err != nil || !strings.Contains(stderr.String(), "converting: ") || !strings.Contains(stderr.String(), "(100%)") {
		t.Errorf("progress lines on a non-terminal stderr: %q (%v)", stderr.String(), err)
	}
	for flag, want := range map[string]string{"--format": "safetensors", "--dtype": "bfloat16", "--tpu-gen": "tpu7x", "--progress": "never", "--map-location": "cpu"} {
		out, err := run(t, "__complete", "convert", flag, "")
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("completion of %s: %q, %v", flag, out, err)
		}
	}
}

// TestPlainProgress: lines at every tenth, one at the end, and none past 100%.
func TestPlainProgress(t *testing.T) {
	var b bytes.Buffer
	p := plainProgress(&b, "converting", time.Hour)
	for d := int64(0); d <= 1000; d += 7 {
		p.report(d, 1000)
	}
	p.report(1000, 1000)
	p.finish()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 11 || !strings.Contains(lines[10], "(100%)") {
		t.Errorf("%d lines:\n%s", len(lines), b.String())
	}
}

// TestExitStatusesAgree: a names file that does not fit the model fails convert with the
// status inspect gives it (4), and a corrupt output fails check with 5 whether the damage is
// in a tensor or in the header (issue 15, item 4).
func TestExitStatusesAgree(t *testing.T) {
	dir := t.TempDir()
	names := filepath.Join(dir, "names.txt")
	os.WriteFile(names, []byte("fc1.weight\nfc2.weight\nfc1.bias\nfc2.bias\nnorm.weight\nnorm.bias\n"), 0o644)
	src := "../../testdata/torch/training_cuda.pt"
	_, err := run(t, "inspect", "--optimizer-names", names, src)
	if exitStatus(err) != exitMismatch {
		t.Fatalf("inspect with a wrong names file: exit %d (%v)", exitStatus(err), err)
	}
	_, err = run(t, "convert", "--optimizer-names", names, src, filepath.Join(dir, "o.pt"))
	if exitStatus(err) != exitMismatch {
		t.Errorf("convert with a wrong names file: exit %d (%v)", exitStatus(err), err)
	}
	out := filepath.Join(dir, "out.safetensors")
	if _, err := run(t, "convert", src, out); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	b[12] = '!' // inside the header's JSON
	os.WriteFile(out, b, 0o644)
	if _, err := run(t, "check", out); exitStatus(err) != exitCorrupt {
		t.Errorf("check of a corrupt header: exit %d (%v)", exitStatus(err), err)
	}
}

// TestJSONContract: every --json output is an object carrying schema_version, and a command
// that fails with --json still prints JSON — the error, its kind and the exit status (issue
// 15, item 7).
func TestJSONContract(t *testing.T) {
	src := "../../testdata/torch/training_cuda.pt"
	dst := filepath.Join(t.TempDir(), "o.pt")
	for _, args := range [][]string{
		{"inspect", "--json", "--optimizer", src},
		{"convert", "--json", src, dst},
		{"check", "--json", dst},
		{"scan", "--json", src},
		{"devices", "--json", "--topology", "v5p-32"},
	} {
		out, err := run(t, args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var obj map[string]any
		if err := json.Unmarshal([]byte(out), &obj); err != nil || obj["schema_version"] != float64(schemaVersion) {
			t.Errorf("%v: not a JSON object with schema_version (%v):\n%.300s", args, err, out)
		}
	}
	out, err := run(t, "inspect", "--json", filepath.Join(t.TempDir(), "missing.pt"))
	var e struct {
		SchemaVersion int `json:"schema_version"`
		Error         struct {
			Message    string `json:"message"`
			Kind       string `json:"kind"`
			ExitStatus int    `json:"exit_status"`
		} `json:"error"`
	}
	if jerr := json.Unmarshal([]byte(out), &e); jerr != nil || err == nil || e.Error.Kind != "not_found" || e.Error.ExitStatus != 1 || e.SchemaVersion != schemaVersion {
		t.Errorf("error as JSON: %+v (%v, %v):\n%s", e, jerr, err, out)
	}
	out, err = run(t, "convert", "--json", "--dtype", "bf61", src, dst+"2")
	if json.Unmarshal([]byte(out), &e) != nil || e.Error.Kind != "usage" || e.Error.ExitStatus != exitUsage {
		t.Errorf("usage error as JSON: %+v (%v):\n%s", e, err, out)
	}
}

// TestCompletionScripts: the generated completion scripts exist for bash, zsh and fish, and
// bash accepts the bash one.
func TestCompletionScripts(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, err := run(t, "completion", sh)
		if err != nil || len(out) < 500 {
			t.Fatalf("completion %s: %d bytes, %v", sh, len(out), err)
		}
		if sh == "bash" {
			f := filepath.Join(t.TempDir(), "ckpt.bash")
			os.WriteFile(f, []byte(out), 0o644)
			if b, err := exec.Command("bash", "-n", f).CombinedOutput(); err != nil {
				t.Errorf("bash -n: %v\n%s", err, b)
			}
		}
	}
}

// TestInspectDangerous: inspect prints what it read of a checkpoint whose pickle references
// code Python would run, and exits 3 as scan does (issue 15, item 4).
func TestInspectDangerous(t *testing.T) {
	out, err := run(t, "inspect", "../../testdata/torch/malicious.pt")
	if exitStatus(err) != exitDangerous || !strings.Contains(err.Error(), "posix.system") || !strings.Contains(out, "payload (posix.system)") {
		t.Errorf("exit %d (%v), report:\n%s", exitStatus(err), err, out)
	}
	if _, err := run(t, "inspect", "../../testdata/torch/training_cuda.pt"); err != nil {
		t.Errorf("a clean checkpoint: %v", err)
	}
}

// TestEveryCommandHasExamples: every command's help shows how it is used (issue 15, item 6).
func TestEveryCommandHasExamples(t *testing.T) {
	for _, c := range newRoot().Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		if !strings.Contains(c.Example, "ckpt "+c.Name()) {
			t.Errorf("ckpt %s: no example of its use in its help", c.Name())
		}
	}
}

// TestQuietEverywhere: -q prints nothing on stdout or stderr for every command that
// succeeds, and only the JSON with --json; a failure is still an error (issue 28, item 5).
func TestQuietEverywhere(t *testing.T) {
	src := "../../testdata/torch/training_cuda.pt"
	hf := "../../testdata/hf/mistral_sharded"
	dir := t.TempDir()
	dst := filepath.Join(dir, "o.safetensors")
	if _, err := run(t, "convert", src, dst); err != nil {
		t.Fatal(err)
	}
	commands := map[string][]string{
		"inspect": {"inspect", "--optimizer", src},
		"scan":    {"scan", src},
		"convert": {"convert", "--force", "--verbose", src, filepath.Join(dir, "q.pt")},
		"check":   {"check", dst},
		"devices": {"devices", "--topology", "v5p-32"},
		"plan":    {"plan", "--topology", "v6e-8", hf},
		"forward": {"forward", "--tokens", "1,2", hf},
		"verify":  {"verify", src, dst},
	}
	for _, c := range newRoot().Commands() {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" || c.Name() == "version" {
			continue
		}
		args, ok := commands[c.Name()]
		if !ok {
			t.Errorf("no -q case for %s", c.Name())
			continue
		}
		for _, asJSON := range []bool{false, true} {
			a := append([]string{args[0], "-q"}, args[1:]...)
			if asJSON {
				a = append(a, "--json")
			}
			root := newRoot()
			var stdout, stderr bytes.Buffer
			root.SetOut(&stdout)
			root.SetErr(&stderr)
			err := execute(root, a)
			if err != nil {
				t.Errorf("%q: %v", a, err)
				continue
			}
			if stderr.Len() != 0 || asJSON != (stdout.Len() != 0) {
				t.Errorf("%q printed %q / %q", a, stdout.String(), stderr.String())
			}
			if asJSON && !json.Valid(stdout.Bytes()) {
				t.Errorf("%q: not JSON: %q", a, stdout.String())
			}
		}
	}
	if _, err := run(t, "scan", "-q", "../../testdata/torch/malicious.pt"); exitStatus(err) != exitDangerous {
		t.Errorf("scan -q of malicious.pt: %v, want exit 3", err)
	}
}

// TestSmallContract: a one-value flag names its value (not "one of  or zstd"), version
// takes --json like every command, --topology completes to accelerator types, and --to
// cpu says why CUDA RNG states are dropped without speaking of a TPU (issue 28, item 8).
func TestSmallContract(t *testing.T) {
	src := "../../testdata/torch/training_cuda.pt"
	_, err := run(t, "convert", "--compress", "gzip", "../../testdata/hf/mistral_sharded", filepath.Join(t.TempDir(), "o"))
	if exitStatus(err) != exitUsage || !strings.Contains(err.Error(), `--compress "gzip": zstd is the one value`) {
		t.Errorf("--compress gzip: %v", err)
	}
	out, err := run(t, "version", "--json")
	var v versionReport
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Version != toolVersion() || v.GoVersion == "" || v.Platform == "" {
		t.Errorf("version --json: %q, %v", out, err)
	}
	for _, cmd := range []string{"devices", "plan", "convert"} {
		out, err := run(t, "__complete", cmd, "--topology", "")
		if err != nil || !strings.Contains(out, "v5p-32\n") || !strings.Contains(out, "v6e-8\n") || !strings.Contains(out, "tpu7x-8\n") {
			t.Errorf("completion of %s --topology: %q, %v", cmd, out, err)
		}
	}
	out, err = run(t, "convert", "--json", "--to", "cpu", src, filepath.Join(t.TempDir(), "cpu.pt"))
	if err != nil || !strings.Contains(out, "CUDA RNG state") || strings.Contains(out, "TPU") {
		t.Errorf("--to cpu: %v\n%s", err, out)
	}
}
