package quant_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/oracle"
)

// TestQuantizedFixturesAreCurrent reruns testdata/quantized/gen.py in the oracle
// with --full: the committed fixtures and expected.json must be exactly what the
// reference code writes today, and every group's dequantization is compared with
// the reference tensors element by element (so a mismatch names the element).
func TestQuantizedFixturesAreCurrent(t *testing.T) {
	o := oracle.Require(t)
	host, inChroot := oracle.TempDir(t)
	if _, err := o.Python("testdata/quantized/gen.py", inChroot, "--full"); err != nil {
		t.Fatal(err)
	}
	generated := map[string]bool{}
	err := filepath.WalkDir(host, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".expected.safetensors") {
			return err
		}
		rel, _ := filepath.Rel(host, p)
		generated[rel] = true
		want, err := os.ReadFile(filepath.Join(fixturesDir, rel))
		if err != nil {
			t.Errorf("gen.py writes %s, which testdata/quantized lacks", rel)
			return nil
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: gen.py now writes different bytes (%v); regenerate with `scripts/oracle python testdata/quantized/gen.py testdata/quantized` and review", rel, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(fixturesDir, func(p string, d fs.DirEntry, err error) error {
		if rel, _ := filepath.Rel(fixturesDir, p); err == nil && !d.IsDir() && filepath.Ext(rel) != ".py" && !generated[rel] {
			t.Errorf("testdata/quantized/%s is not written by gen.py", rel)
		}
		return err
	})
	checkFixtures(t, host, true)
}
