package scan_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/scan"
)

// TestScanMegatronNemo: ckpt scan finds the pickles of Megatron and NeMo layouts where
// their loaders find them — every rank file and common.pt of a save folder, the DCP items,
// the weights members inside a .nemo archive (read in place, at their offsets in the tar)
// — and vouches for them; a .nemo member that would run code is found inside the tar.
func TestScanMegatronNemo(t *testing.T) {
	const dir = "../testdata/ecosystem/megatron/"
	for _, c := range []struct {
		src   string
		files []string // files scanned as a layout of their own
	}{
		{"llama_tp2pp2", []string{"iter_0000003/mp_rank_00_000/model_optim_rng.pt", "iter_0000003/mp_rank_01_001/distrib_optim.pt"}},
		{"torch_dist", []string{"iter_0000200/common.pt", "iter_0000200/.metadata"}},
		{"nemo2", []string{"weights/common.pt", "weights/.metadata"}},
		{"nemo1/tp2.nemo", []string{""}},
	} {
		res, err := scan.Scan(context.Background(), dir+c.src)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Problems) > 0 || len(res.Refused()) > 0 {
			t.Errorf("%s: problems %v, refused %v", c.src, res.Problems, res.Refused())
		}
		var scanned []string
		for _, f := range res.Files {
			if f.Layout != "not a checkpoint" {
				rel, _ := filepath.Rel(dir+c.src, f.Path)
				scanned = append(scanned, strings.TrimPrefix(filepath.ToSlash(rel), "."))
			}
		}
		for _, f := range c.files {
			if !slices.Contains(scanned, f) {
				t.Errorf("%s: %s not scanned (scanned %v)", c.src, f, scanned)
			}
		}
		if c.src == "nemo1/tp2.nemo" {
			var where []string
			for _, p := range res.Pickles {
				where = append(where, p.Where)
			}
			if len(where) != 2 || !strings.Contains(where[1], `tar member "mp_rank_01/model_weights.ckpt"`) {
				t.Errorf("pickles found at %v", where)
			}
		}
	}
	// A weights member that imports os.system is found in the archive.
	data, err := os.ReadFile(dir + "nemo1/model.nemo")
	if err != nil {
		t.Fatal(err)
	}
	evil := strings.Replace(string(data), "collections\nOrderedDict", "posix      \nsystem     ", 1)
	if evil == string(data) {
		t.Fatal("fixture has no collections.OrderedDict global")
	}
	p := filepath.Join(t.TempDir(), "evil.nemo")
	os.WriteFile(p, []byte(evil), 0o644)
	res, err := scan.Scan(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Refused(); len(r) == 0 {
		t.Errorf("os.system in a member not refused: %+v", res)
	}
}
