package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run executes the CLI in-process with args and returns stdout and the error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	err := execute(root, args)
	return out.String(), err
}

// TestInspectJSONMatchesTorch checks the CLI's --json contract against torch's own listing
// of a fixture: format, names, dtypes, shapes, locations, sizes and hashes.
func TestInspectJSONMatchesTorch(t *testing.T) {
	for _, name := range []string{"shufflenet_cuda", "training_cuda", "legacy_cuda"} {
		t.Run(name, func(t *testing.T) {
			out, err := run(t, "inspect", "--json", "--hash", "../../testdata/torch/"+name+".pt")
			if err != nil {
				t.Fatal(err)
			}
			type tensor struct {
				Name     string  `json:"name"`
				DType    string  `json:"dtype"`
				Shape    []int64 `json:"shape"`
				Location string  `json:"location"`
				NBytes   int64   `json:"nbytes"`
				SHA256   string  `json:"sha256"`
			}
			var got, want struct {
				Format  string   `json:"format"`
				Tensors []tensor `json:"tensors"`
			}
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile("../../testdata/torch/" + name + ".json")
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			if got.Format != want.Format || len(got.Tensors) != len(want.Tensors) {
				t.Fatalf("format %s with %d tensors, torch: %s with %d", got.Format, len(got.Tensors), want.Format, len(want.Tensors))
			}
			for i := range want.Tensors {
				g, w := got.Tensors[i], want.Tensors[i]
				if g.Name != w.Name || g.DType != w.DType || g.Location != w.Location || g.NBytes != w.NBytes || g.SHA256 != w.SHA256 || len(g.Shape) != len(w.Shape) {
					t.Errorf("got %+v, torch %+v", g, w)
				}
			}
		})
	}
}

// TestScanExitStatus: a dangerous global gives exit status 3 and names it; a clean
// checkpoint scans without error.
func TestScanExitStatus(t *testing.T) {
	out, err := run(t, "scan", "../../testdata/torch/malicious.pt")
	if exitStatus(err) != exitDangerous || !strings.Contains(err.Error(), "posix.system") {
		t.Fatalf("scan of malicious.pt: %v\n%s", err, out)
	}
	if _, err := run(t, "scan", "../../testdata/torch/shufflenet_cuda.pt"); err != nil {
		t.Fatalf("clean checkpoint: %v", err)
	}
	// A folder whose files are symbolic links (a Hugging Face hub cache snapshot) is
	// scanned through them.
	dir := t.TempDir()
	abs, _ := filepath.Abs("../../testdata/torch/malicious.pt")
	if err := os.Symlink(abs, filepath.Join(dir, "pytorch_model.bin")); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "scan", dir); exitStatus(err) != exitDangerous {
		t.Fatalf("scan of a folder linking to malicious.pt: %v", err)
	}
	out, err = run(t, "scan", "../../testdata/dcp/model")
	if err != nil {
		t.Fatalf("clean DCP folder: %v", err)
	}
	// One line per file, its item pickles summed up (issue 28, item 3).
	if want := "../../testdata/dcp/model/__0_0.distcp: 40 pickles, 84 globals\n"; !strings.Contains(out, want) || strings.Count(out, "\n") > 20 {
		t.Errorf("DCP scan, want %q among at most 20 lines:\n%s", want, out)
	}
}

// TestCheckCLI: check passes an intact output and exits 5 naming the tensor whose bytes
// changed, with the same finding in --json.
func TestCheckCLI(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "out.pt")
	if _, err := run(t, "convert", "--to", "tpu", "../../testdata/torch/training_cuda.pt", dst); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "check", dst); err != nil || !strings.Contains(out, "25 of 25 tensors intact") {
		t.Fatalf("intact output: %v\n%s", err, out)
	}
	m := dst + ".ckpt-manifest.json"
	b, _ := os.ReadFile(m)
	var man map[string]any
	json.Unmarshal(b, &man)
	first := man["tensors"].([]any)[0].(map[string]any)
	first["xxhash64"] = "0000000000000000"
	b, _ = json.Marshal(man)
	os.WriteFile(m, b, 0o644)
	out, err := run(t, "check", "--json", dst)
	if exitStatus(err) != exitCorrupt || !strings.Contains(err.Error(), first["name"].(string)) {
		t.Fatalf("damaged manifest: %v", err)
	}
	var rep struct {
		Problems []struct{ Tensor, Kind string }
	}
	if json.Unmarshal([]byte(out), &rep) != nil || len(rep.Problems) != 1 || rep.Problems[0].Kind != "xxhash64" {
		t.Fatalf("--json report: %s", out)
	}
}

// TestConvertCLI runs the main job end to end and checks the refusal to overwrite.
func TestConvertCLI(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "out.pt")
	out, err := run(t, "convert", "--to", "tpu", "--json", "../../testdata/torch/training_cuda.pt", dst)
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Tensors  int    `json:"tensors"`
		Manifest string `json:"manifest"`
		Remap    struct {
			Locations map[string]string `json:"locations"`
		} `json:"remap"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Tensors != 25 || sum.Remap.Locations["cuda:0"] != "tpu" { // 26 less the CUDA RNG state, dropped
		t.Errorf("summary %+v", sum)
	}
	if _, err := os.Stat(sum.Manifest); err != nil {
		t.Errorf("manifest: %v", err)
	}
	if _, err := run(t, "convert", "../../testdata/torch/training_cuda.pt", dst); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("second convert without --force: %v", err)
	}
	if _, err := run(t, "convert", "--force", "../../testdata/torch/training_cuda.pt", dst); err != nil {
		t.Errorf("with --force: %v", err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"5GB": 5e9, "500MB": 5e8, "2GiB": 2 << 30, "1048576": 1 << 20, "1.5KB": 1500} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1GB", "GB", "five"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q) accepted", bad)
		}
	}
}

// TestInspectIgnored: inspect names the files of a folder it did not read because they hold
// weights of another layout.
func TestInspectIgnored(t *testing.T) {
	dir := t.TempDir()
	st, err := os.ReadFile("../../testdata/safetensors/every_dtype.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "model.safetensors"), st, 0o644)
	os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644)
	pt, _ := os.ReadFile("../../testdata/torch/views.pt")
	os.WriteFile(filepath.Join(dir, "pytorch_model.bin"), pt, 0o644)
	out, err := run(t, "inspect", "--json", dir)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct{ Ignored []string }
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Ignored) != 1 || rep.Ignored[0] != "pytorch_model.bin" {
		t.Fatalf("ignored %v (%v)", rep.Ignored, err)
	}
}

// TestInspectPickledModules: inspect lists the state_dict of a pickled nn.Module as torch's
// module.state_dict() gives it (names in order, dtypes, shapes, bytes), marking its tensors.
func TestInspectPickledModules(t *testing.T) {
	b, err := os.ReadFile("../../testdata/modules/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var expected map[string]json.RawMessage
	json.Unmarshal(b, &expected)
	for _, file := range []string{"module.pt", "wrapped.pt"} {
		var modules map[string][]struct {
			Name, DType, SHA256 string
			Shape               []int64
		}
		if err := json.Unmarshal(expected[file], &modules); err != nil {
			t.Fatal(err)
		}
		out, err := run(t, "inspect", "--json", "--hash", "../../testdata/modules/"+file)
		if err != nil {
			t.Fatal(err)
		}
		var rep struct {
			Tensors []struct {
				Name, DType, SHA256, Module string
				Shape                       []int64
			}
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		for path, want := range modules {
			i := 0
			for _, g := range rep.Tensors {
				if g.Module == "" {
					continue
				}
				if i >= len(want) {
					t.Fatalf("%s: more module tensors than torch's state_dict", file)
				}
				w := want[i]
				if full := strings.TrimPrefix(path+"."+w.Name, "."); g.Name != full || g.DType != w.DType || g.SHA256 != w.SHA256 || len(g.Shape) != len(w.Shape) {
					t.Errorf("%s: got %s %s %v, torch %s %s %v", file, g.Name, g.DType, g.Shape, full, w.DType, w.Shape)
				}
				i++
			}
			if i != len(want) {
				t.Errorf("%s: %d module tensors, torch's state_dict has %d", file, i, len(want))
			}
		}
	}
}
