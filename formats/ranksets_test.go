package formats

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/internal/fifotest"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// copyFixture copies the fixture folder src (testdata/ecosystem replicas of DeepSpeed's and
// Megatron-LM's layouts, see its README) into a new folder and returns it.
func copyFixture(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestRankSets: a Megatron save with a rank folder missing, one beyond its args' grid, one
// that is a link, or a rank file that is another rank's or leads outside, and a ZeRO folder
// whose rank files are not ranks 0 … partition_count-1 once each (one missing, one from
// another run in its place, a link, a third rank's) are refused naming what is missing or
// extra — each was read as a complete checkpoint before (issue 29, class 8).
func TestRankSets(t *testing.T) {
	eco := "../testdata/ecosystem/"
	cases := []struct {
		name    string
		fixture string // copied, then changed by edit in its folder at
		at      string
		edit    func(t *testing.T, dir string)
		says    []string
	}{
		{"megatron: a rank folder missing", "megatron/gpt_tp2pp2", "iter_0000003", func(t *testing.T, d string) {
			must(t, os.RemoveAll(filepath.Join(d, "mp_rank_01_001")))
		}, []string{"missing mp_rank_01_001", "tensor parallel 2 × pipeline parallel 2"}},
		{"megatron: two rank folders missing", "megatron/gpt_tp2pp2", "iter_0000003", func(t *testing.T, d string) {
			must(t, os.RemoveAll(filepath.Join(d, "mp_rank_00_001")))
			must(t, os.RemoveAll(filepath.Join(d, "mp_rank_01_001")))
		}, []string{"missing mp_rank_00_001, mp_rank_01_001"}},
		{"megatron: a rank folder beyond the grid", "megatron/gpt_tp2pp2", "iter_0000003", func(t *testing.T, d string) {
			must(t, os.Rename(filepath.Join(d, "mp_rank_01_001"), filepath.Join(d, "mp_rank_02_001")))
		}, []string{"missing mp_rank_01_001", "extra mp_rank_02_001"}},
		{"megatron: an extra rank folder", "megatron/gpt_tp2pp2", "iter_0000003", func(t *testing.T, d string) {
			copyInto(t, filepath.Join(d, "mp_rank_00_000"), filepath.Join(d, "mp_rank_00_002"))
		}, []string{"extra mp_rank_00_002"}},
		{"megatron: a rank folder named otherwise", "megatron/gpt_tp2pp2", "iter_0000003", func(t *testing.T, d string) {
			must(t, os.Rename(filepath.Join(d, "mp_rank_01_001"), filepath.Join(d, "mp_rank_01_01")))
		}, []string{"missing mp_rank_01_001", "extra mp_rank_01_01"}},
		{"megatron: a single-rank save with a second rank", "megatron/legacy", "iter_0000100", func(t *testing.T, d string) {
			copyInto(t, filepath.Join(d, "mp_rank_00"), filepath.Join(d, "mp_rank_01"))
		}, []string{"extra mp_rank_01", "tensor parallel 1"}},
		{"megatron: a rank folder that is a link", "megatron/gpt_tp2pp2", "iter_0000003", func(t *testing.T, d string) {
			must(t, os.RemoveAll(filepath.Join(d, "mp_rank_01_001")))
			must(t, os.Symlink("mp_rank_01_000", filepath.Join(d, "mp_rank_01_001")))
		}, []string{"mp_rank_01_001 is a link, not a rank folder"}},
		{"megatron: a rank file that is another's", "megatron/gpt_tp2pp2", "iter_0000003", func(t *testing.T, d string) {
			p := filepath.Join(d, "mp_rank_01_001", "model_optim_rng.pt")
			must(t, os.Remove(p))
			must(t, os.Symlink("../mp_rank_01_000/model_optim_rng.pt", p))
		}, []string{"mp_rank_01_000/model_optim_rng.pt and mp_rank_01_001/model_optim_rng.pt are the same file"}},
		{"megatron: a rank file leading outside", "megatron/gpt_tp2pp2", "iter_0000003", func(t *testing.T, d string) {
			p := filepath.Join(d, "mp_rank_01_001", "model_optim_rng.pt")
			out := filepath.Join(t.TempDir(), "elsewhere.pt")
			must(t, os.Rename(p, out))
			must(t, os.Symlink(out, p))
		}, []string{"iter_0000003/mp_rank_01_001/model_optim_rng.pt is a link leading outside"}},
		{"megatron: a distributed optimizer file that is another's", "megatron/gpt_tp2pp2", "iter_0000003", func(t *testing.T, d string) {
			p := filepath.Join(d, "mp_rank_01_000", "distrib_optim.pt")
			must(t, os.Remove(p))
			must(t, os.Link(filepath.Join(d, "mp_rank_00_000", "distrib_optim.pt"), p))
		}, []string{"mp_rank_00_000/distrib_optim.pt and mp_rank_01_000/distrib_optim.pt are the same file"}},
		{"megatron: a rank folder without its file", "megatron/gpt_tp2pp2", "iter_0000003", func(t *testing.T, d string) {
			must(t, os.Remove(filepath.Join(d, "mp_rank_00_001", "model_optim_rng.pt")))
		}, []string{"mp_rank_00_001 has no model_optim_rng.pt"}},
		{"zero: a rank's file missing", "zero/zero3", "global_step3", func(t *testing.T, d string) {
			must(t, os.Remove(filepath.Join(d, "zero_pp_rank_1_mp_rank_00_optim_states.pt")))
		}, []string{"partition_count is 3", "missing rank 1's (zero_pp_rank_1_mp_rank_00_optim_states.pt)"}},
		{"zero: another run's rank in a rank's place", "zero/zero2", "global_step3", func(t *testing.T, d string) {
			must(t, os.Rename(filepath.Join(d, "zero_pp_rank_1_mp_rank_00_optim_states.pt"), filepath.Join(d, "zero_pp_rank_5_mp_rank_00_optim_states.pt")))
		}, []string{"partition_count is 2", "missing rank 1's", "extra zero_pp_rank_5_mp_rank_00_optim_states.pt"}},
		{"zero: a third rank's file", "zero/zero2", "global_step3", func(t *testing.T, d string) {
			copyFile(t, filepath.Join(d, "zero_pp_rank_1_mp_rank_00_optim_states.pt"), filepath.Join(d, "zero_pp_rank_2_mp_rank_00_optim_states.pt"))
		}, []string{"extra zero_pp_rank_2_mp_rank_00_optim_states.pt"}},
		{"zero: a rank's file twice", "zero/zero2", "global_step3", func(t *testing.T, d string) {
			must(t, os.Rename(filepath.Join(d, "zero_pp_rank_1_mp_rank_00_optim_states.pt"), filepath.Join(d, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")))
		}, []string{"missing rank 1's"}},
		{"zero: a rank's file that is a link", "zero/zero2", "global_step3", func(t *testing.T, d string) {
			p := filepath.Join(d, "zero_pp_rank_1_mp_rank_00_optim_states.pt")
			must(t, os.Remove(p))
			must(t, os.Symlink("zero_pp_rank_0_mp_rank_00_optim_states.pt", p))
		}, []string{"zero_pp_rank_1_mp_rank_00_optim_states.pt (a link)"}},
		{"zero: another model-parallel rank's file", "zero/zero2", "global_step3", func(t *testing.T, d string) {
			must(t, os.Rename(filepath.Join(d, "zero_pp_rank_1_mp_rank_00_optim_states.pt"), filepath.Join(d, "zero_pp_rank_1_mp_rank_01_optim_states.pt")))
		}, []string{"missing rank 1's", "extra zero_pp_rank_1_mp_rank_01_optim_states.pt"}},
		{"zero-3: a rank's model states missing", "zero/zero3", "global_step3", func(t *testing.T, d string) {
			must(t, os.Rename(filepath.Join(d, "zero_pp_rank_2_mp_rank_00_model_states.pt"), filepath.Join(d, "zero_pp_rank_7_mp_rank_00_model_states.pt")))
		}, []string{"model states", "missing rank 2's (zero_pp_rank_2_mp_rank_00_model_states.pt)", "extra zero_pp_rank_7_mp_rank_00_model_states.pt"}},
		{"zero: a rank's file is a FIFO", "zero/zero2", "global_step3", func(t *testing.T, d string) {
			p := filepath.Join(d, "zero_pp_rank_1_mp_rank_00_optim_states.pt")
			must(t, os.Remove(p))
			fifotest.Make(t, p)
		}, []string{"zero_pp_rank_1_mp_rank_00_optim_states.pt (a FIFO)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyFixture(t, eco+c.fixture)
			if ck, err := Open(context.Background(), dir); err != nil {
				t.Fatalf("the fixture itself: %v", err)
			} else {
				ck.Close()
			}
			c.edit(t, filepath.Join(dir, c.at))
			ck, err := Open(context.Background(), dir)
			if err == nil {
				ck.Close()
				t.Fatalf("read as a complete checkpoint")
			}
			if !errors.Is(err, ckpterr.ErrCorrupt) && !errors.Is(err, ckpterr.ErrUnsupported) {
				t.Errorf("%v: not ErrCorrupt", err)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%v\ndoes not say %q", err, s)
				}
			}
		})
	}
}

func copyInto(t *testing.T, src, dst string) {
	t.Helper()
	must(t, os.MkdirAll(dst, 0o755))
	es, err := os.ReadDir(src)
	must(t, err)
	for _, e := range es {
		copyFile(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	must(t, err)
	must(t, os.WriteFile(dst, b, 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
