package formats_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats"
)

// family names which of the shared errors an error is.
func family(err error) string {
	var names []string
	for _, f := range []struct {
		name string
		err  error
	}{{"corrupt", ckpterr.ErrCorrupt}, {"unsupported", ckpterr.ErrUnsupported}, {"dangerous", ckpterr.ErrDangerous}} {
		if errors.Is(err, f.err) {
			names = append(names, f.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// TestErrorFamily: whatever the format, a broken file is ErrCorrupt, valid input ckpt does
// not read is ErrUnsupported, a global that would run code is ErrDangerous, and an I/O
// error is none of them (issue 10, item 7) — each error still positional.
func TestErrorFamily(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{} // path → family
	// Every safetensors file the reference refuses.
	var crafted map[string]struct {
		SafeOpen string `json:"safe_open"`
	}
	b, _ := os.ReadFile("../testdata/safetensors/crafted.json")
	if err := json.Unmarshal(b, &crafted); err != nil {
		t.Fatal(err)
	}
	for name, c := range crafted {
		// ckpt carries unknown dtypes along as foreign bytes where the reference refuses.
		if c.SafeOpen != "ok" && name != "unknown_dtype" {
			cases["../testdata/safetensors/crafted/"+name+".safetensors"] = "corrupt"
		}
	}
	// torch.save files cut short, in both formats.
	for _, name := range []string{"training_cuda.pt", "legacy_cuda.pt"} {
		b, _ := os.ReadFile("../testdata/torch/" + name)
		for _, n := range []int{len(b) / 2, len(b) - 30} {
			p := filepath.Join(dir, name+"."+strings.Repeat("x", n%7)+".cut")
			os.WriteFile(p, b[:n], 0o644)
			cases[p] = "corrupt"
		}
	}
	// DCP folders whose .metadata was changed one way each.
	for name, fam := range map[string]string{"missing_chunk": "corrupt", "overlap": "corrupt", "out_of_bounds": "corrupt",
		"escape": "corrupt", "past_eof": "corrupt", "dtype_mismatch": "corrupt", "transform": "unsupported",
		"evil_global": "dangerous", "missing_file": "none"} {
		d := copyDir(t, "../testdata/dcp/sharded")
		md, _ := os.ReadFile("../testdata/dcp/mutated/" + name + ".metadata")
		os.WriteFile(filepath.Join(d, ".metadata"), md, 0o644)
		cases[d] = fam
	}
	// A Hugging Face folder missing a shard its index names.
	hf := copyDir(t, "../testdata/hf/mistral_sharded")
	os.Remove(filepath.Join(hf, "model-00002-of-00004.safetensors"))
	cases[hf] = "corrupt"
	cases[filepath.Join(dir, "missing.pt")] = "none"

	for path, want := range cases {
		ck, err := formats.Open(context.Background(), path)
		if err == nil {
			ck.Close()
			t.Errorf("%s: opened", path)
			continue
		}
		if got := family(err); got != want {
			t.Errorf("%s: %v: family %s, want %s", path, err, got, want)
		}
		if !strings.Contains(err.Error(), filepath.Base(path)) && !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v does not name the file", path, err)
		}
	}
}
