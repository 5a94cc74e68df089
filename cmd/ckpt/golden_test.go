package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestGolden")

// goldenCases are shell commands run in order by TestGolden, from the repository root, with
// $CKPT the built binary and $OUT a folder shared by the cases (later ones read what earlier
// ones wrote). Every command of the CLI is here, with its human and --json output, its
// errors (the error JSON included) and its exit statuses.
var goldenCases = []struct{ name, sh string }{
	{"version", `$CKPT --version`},
	{"help", `$CKPT --help`},
	{"usage_no_command", `$CKPT frobnicate`},

	{"inspect", `$CKPT inspect testdata/torch/training_cuda.pt`},
	{"inspect_json_hash", `$CKPT inspect --json --hash testdata/torch/training_cuda.pt`},
	{"inspect_optimizer", `$CKPT inspect --optimizer testdata/torch/training_cuda.pt`},
	{"inspect_folder", `$CKPT inspect testdata/hf/mistral_sharded`},
	{"inspect_dangerous", `$CKPT inspect testdata/torch/malicious.pt`},
	{"inspect_missing_json", `$CKPT inspect --json testdata/torch/missing.pt`},
	{"inspect_not_checkpoint", `$CKPT inspect README.md`},

	{"scan", `$CKPT scan testdata/torch/training_cuda.pt`},
	{"scan_json", `$CKPT scan --json testdata/torch/training_cuda.pt`},
	{"scan_dangerous", `$CKPT scan testdata/torch/malicious.pt`},
	{"scan_dangerous_json", `$CKPT scan --json testdata/hostile/pickle_loads.pkl`},
	{"scan_no_pickles", `$CKPT scan testdata/hf/mistral_sharded/config.json`},
	{"scan_safetensors", `$CKPT scan testdata/hf/mistral_sharded`},
	{"scan_dcp", `$CKPT scan testdata/dcp/model`},

	// Outputs get the modes cp gives under the umask; the temporary name never shows.
	{"convert", `umask 022; $CKPT convert --to tpu --progress=never testdata/torch/training_cuda.pt $OUT/t.pt && stat -c '%A %n' $OUT/t.pt $OUT/t.pt.ckpt-manifest.json && ls -A $OUT`},
	{"convert_folder_json", `umask 022; $CKPT convert --json --to tpu --dtype bf16 testdata/hf/mistral_sharded $OUT/hf && cd $OUT/hf && stat -c '%A %n' . * | sort -k2`},
	{"convert_umask_077", `umask 077; $CKPT convert -q --to tpu testdata/torch/training_cuda.pt $OUT/private.pt && stat -c '%A %n' $OUT/private.pt`},
	{"convert_training_to_safetensors", `$CKPT convert --to tpu --progress=never testdata/torch/training_cuda.pt $OUT/t.safetensors`},
	{"convert_strict", `$CKPT convert --strict --to tpu --progress=never testdata/torch/training_cuda.pt $OUT/strict.safetensors; s=$?; ls $OUT/strict.safetensors 2>&1; exit $s`},
	{"convert_exists", `$CKPT convert --to tpu --progress=never testdata/torch/training_cuda.pt $OUT/t.pt`},
	{"convert_missing_dst", `$CKPT convert --to tpu testdata/torch/training_cuda.pt`},
	{"convert_missing_dst_json", `$CKPT convert --json --to tpu testdata/torch/training_cuda.pt`},
	{"convert_bad_dtype", `$CKPT convert --to tpu --dtype bfloat61 testdata/torch/training_cuda.pt $OUT/x.pt`},
	{"convert_bucket_url", `$CKPT convert --to tpu gs://key:secret@bucket/run/step-1000 $OUT/x.pt`},
	{"inspect_hub_missing", `HF_HUB_CACHE=$OUT/hub $CKPT inspect Qwen/Qwen3-0.6B@main`},
	{"convert_per_device", `umask 022; $CKPT convert --json --to tpu --topology v6e-8 --mesh fsdp=8 --format dcp testdata/hf/mistral_sharded $OUT/dcp && ls $OUT/dcp`},

	{"check", `$CKPT check $OUT/t.pt`},
	{"check_json", `$CKPT check --json $OUT/hf`},
	{"check_per_device", `$CKPT check $OUT/dcp`},
	{"check_corrupt", `cp $OUT/t.safetensors $OUT/c.safetensors && cp $OUT/t.safetensors.ckpt-manifest.json $OUT/c.safetensors.ckpt-manifest.json && n=$(stat -c %s $OUT/c.safetensors) && printf 'Z' | dd of=$OUT/c.safetensors bs=1 seek=$((n-1)) conv=notrunc 2>/dev/null && $CKPT check $OUT/c.safetensors`},
	{"check_corrupt_json", `$CKPT check --json $OUT/c.safetensors`},
	{"check_no_manifest", `$CKPT check testdata/torch/training_cuda.pt`},

	{"verify", `$CKPT verify testdata/hf/mistral_sharded $OUT/hf`},
	{"verify_json", `$CKPT verify --json testdata/torch/training_cuda.pt $OUT/t.pt`},
	{"verify_mismatch", `$CKPT verify testdata/torch/training_cuda.pt $OUT/c.safetensors`},

	{"forward", `$CKPT forward testdata/hf/mistral_sharded --tokens 1,5,9 --out $OUT/logits.safetensors | head -1 && $CKPT inspect $OUT/logits.safetensors`},
	{"forward_bad_tokens", `$CKPT forward testdata/hf/mistral_sharded --tokens 1,x`},

	{"devices", `$CKPT devices --topology v6e-8`},
	{"devices_json", `$CKPT devices --json --topology v5p-32`},
	{"devices_unknown", `$CKPT devices --topology v9z-8`},
	{"plan", `$CKPT plan testdata/hf/mistral_sharded --topology v6e-8 --mesh dp=2,tp=4 --dtype bf16`},
	{"plan_json", `$CKPT plan --json testdata/torch/training_cuda.pt --topology v5e-4`},

	{"completion_bash", `$CKPT completion bash > $OUT/ckpt.bash && bash -n $OUT/ckpt.bash && echo bash accepts it`},
}

// normalizers replace what differs between runs and machines: the output folder, the
// version, times, throughputs, the matmul kernels chosen for the CPU, the manifest's date.
var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`ckpt (\(devel\)|v[0-9][^\s"]*)`), "ckpt VERSION"},
	{regexp.MustCompile(`"version": "[^"]*"`), `"version": "VERSION"`},
	{regexp.MustCompile(`\b[0-9]+(\.[0-9]+)? ?(s|ms|µs)\b`), "TIME"},
	{regexp.MustCompile(`"(seconds|elapsed_seconds|duration_seconds)": [0-9.e+-]+`), `"$1": TIME`},
	{regexp.MustCompile(`[0-9.]+ [KMGT]?i?B/s`), "RATE"},
	{regexp.MustCompile(`"(bytes_per_second|throughput)": [0-9.e+-]+`), `"$1": RATE`},
	{regexp.MustCompile(`\((avx512|avx2|portable|avx512bf16)[a-z0-9_+]* kernels\)`), "(KERNELS kernels)"},
	{regexp.MustCompile(`"kernels": "[^"]*"`), `"kernels": "KERNELS"`},
}

// TestGolden drives the built binary through every command on the shipped fixtures, as a
// user at a shell would, and compares exit status, stdout and stderr with the golden files
// in testdata/golden (go test -run TestGolden -update rewrites them). Human output must
// have no line ending in a space.
func TestGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and runs every case")
	}
	bin := ckptBinary(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	seen := map[string]bool{}
	for _, c := range goldenCases {
		if seen[c.name] {
			t.Fatalf("two cases named %s", c.name)
		}
		seen[c.name] = true
		cmd := exec.Command("sh", "-c", c.sh)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CKPT="+bin, "OUT="+out, "COLUMNS=100", "NO_COLOR=1", "LC_ALL=C")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		code := 0
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("%s: %v", c.name, err)
			}
			code = ee.ExitCode()
		}
		norm := func(s string) string {
			s = strings.ReplaceAll(s, out, "$OUT")
			s = strings.ReplaceAll(s, bin, "$CKPT")
			s = strings.ReplaceAll(s, root+"/", "")
			for _, n := range normalizers {
				s = n.re.ReplaceAllString(s, n.with)
			}
			return s
		}
		got := fmt.Sprintf("$ %s\nexit %d\n-- stdout --\n%s-- stderr --\n%s", c.sh, code, norm(stdout.String()), norm(stderr.String()))
		for i, line := range strings.Split(stdout.String()+stderr.String(), "\n") {
			if strings.HasSuffix(line, " ") {
				t.Errorf("%s: line %d ends in a space: %q", c.name, i+1, line)
			}
		}
		path := filepath.Join("testdata", "golden", c.name+".txt")
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (go test -run TestGolden -update writes it)", c.name, err)
		}
		if got != string(want) {
			t.Errorf("%s differs from %s (go test -run TestGolden -update rewrites it):\n%s", c.name, path, lineDiff(string(want), got))
		}
	}
	// No golden file without its case.
	files, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.txt"))
	for _, f := range files {
		if !seen[strings.TrimSuffix(filepath.Base(f), ".txt")] {
			t.Errorf("%s has no case in goldenCases", f)
		}
	}
}

// lineDiff shows the first lines where want and got differ.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 8; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want %q\n  got  %q\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}
