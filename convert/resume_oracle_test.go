package convert_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/oracle"
)

// meshResume is what a resume script of testdata/runtime prints from its "check": each of
// the 4 ranks' count of tensors checked bit-identical and of pieces found in its own file,
// and, after three optimizer steps from the converted state, the largest difference from
// the reference, how far the parameters moved and the swapped-moments control.
type meshResume struct {
	OK     bool     `json:"ok"`
	Errors []string `json:"errors"`
	Ranks  []struct {
		Loaded    int `json:"loaded"`
		OwnPieces int `json:"own_pieces"`
	} `json:"ranks"`
	MaxDiff float64 `json:"max_diff"`
	Moved   float64 `json:"moved"`
	Control float64 `json:"control"`
	Params  int     `json:"params"`
}

// checkMeshResume runs script's check (args after a fresh work folder host/work, seen from
// the chroot as chrootWork) and asserts that it passed on 4 ranks for params parameters:
// each rank checked every weight and both moments (3*params tensors) and found them in its
// own file.
func checkMeshResume(t *testing.T, o *oracle.Oracle, host, chrootWork, script string, params int, args ...string) meshResume {
	t.Helper()
	if err := os.Mkdir(filepath.Join(host, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := o.Python(append(append([]string{script, "check"}, args...), chrootWork)...)
	if err != nil {
		t.Fatal(err)
	}
	var res meshResume
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, e := range res.Errors {
		t.Error(e)
	}
	if len(res.Ranks) != 4 || !res.OK || res.Params != params {
		t.Fatalf("%s", out)
	}
	for r, rr := range res.Ranks {
		if rr.Loaded != 3*params || rr.OwnPieces < 3*params {
			t.Errorf("rank %d checked %d tensors, %d pieces of its file; want %d", r, rr.Loaded, rr.OwnPieces, 3*params)
		}
	}
	return res
}
