package codec

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/oracle"
)

// TestGoldenTablesAreCurrent reruns gen.py with the oracle's torch and checks it
// writes exactly the committed tables, so a change in torch's conversions (a new
// torch build, another CPU kernel path) cannot go unnoticed. It takes about a
// minute: gen.py sweeps all 2^32 float32 inputs through every encoder, so -short
// skips it (scripts/test does not pass -short).
func TestGoldenTablesAreCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("regenerating the tables with torch takes a minute; skipped with -short")
	}
	o := oracle.Require(t)
	host, inChroot := oracle.TempDir(t)
	if _, err := o.Python("testdata/quant/gen.py", inChroot); err != nil {
		t.Fatal(err)
	}
	generated := dataFiles(t, host)
	committed := dataFiles(t, goldenDir)
	if !slices.Equal(generated, committed) {
		t.Fatalf("gen.py writes %v, testdata/quant has %v", generated, committed)
	}
	for _, name := range committed {
		want, err := os.ReadFile(filepath.Join(goldenDir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(host, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: torch now writes different bytes; regenerate with `scripts/oracle python testdata/quant/gen.py` and review the diff", name)
		}
	}
}

// dataFiles lists the golden tables in dir: everything but gen.py and README.md.
func dataFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if n := e.Name(); n != "gen.py" && n != "README.md" {
			names = append(names, n)
		}
	}
	return names
}
