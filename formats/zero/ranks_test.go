package zero

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// entry is a fs.DirEntry of a name and mode, for checkRanks.
type entry struct {
	name string
	mode fs.FileMode
}

func (e entry) Name() string               { return e.name }
func (e entry) IsDir() bool                { return e.mode.IsDir() }
func (e entry) Type() fs.FileMode          { return e.mode.Type() }
func (e entry) Info() (fs.FileInfo, error) { return nil, errors.New("no info") }

func regularEntries(names ...string) []fs.DirEntry {
	var out []fs.DirEntry
	for _, n := range names {
		out = append(out, entry{n, 0})
	}
	return out
}

// TestCheckRanks: the optimizer files are ranks 0 … partition_count-1 once each, of one
// model-parallel rank, files of the folder; the error names the missing and the extra,
// and the accepted names come in rank order.
func TestCheckRanks(t *testing.T) {
	o := func(dp, mp int) string { return fmt.Sprintf("zero_pp_rank_%d_mp_rank_%02d_optim_states.pt", dp, mp) }
	for _, c := range []struct {
		entries []fs.DirEntry
		ws      int64
		want    string // "" for none
		order   string
	}{
		{regularEntries(o(1, 0), o(0, 0)), 2, "", o(0, 0) + " " + o(1, 0)},
		{regularEntries(o(10, 0), o(2, 0), o(0, 0), o(1, 0), o(3, 0), o(4, 0), o(5, 0), o(6, 0), o(7, 0), o(8, 0), o(9, 0)), 11, "", ""},
		{regularEntries("bf16_"+o(0, 0), "bf16_"+o(1, 0)), 2, "", ""},
		{regularEntries(o(0, 0)), 2, "missing rank 1's (zero_pp_rank_1_mp_rank_00_optim_states.pt)", ""},
		{regularEntries(o(0, 0), o(5, 0)), 2, "missing rank 1's|extra " + o(5, 0), ""},
		{regularEntries(o(0, 0), o(1, 0), o(2, 0)), 2, "extra " + o(2, 0), ""},
		{regularEntries(o(0, 0), "bf16_"+o(0, 0)), 2, "missing rank 1's", ""},
		{regularEntries(o(0, 0), o(1, 1)), 2, "extra " + o(1, 1), ""},
		{regularEntries(o(0, 0), "expp_rank_0_mp_rank_00_optim_states.pt"), 1, "extra expp_rank_0", ""},
		{[]fs.DirEntry{entry{o(0, 0), 0}, entry{o(1, 0), fs.ModeSymlink}}, 2, o(1, 0) + " (a link)", ""},
		{[]fs.DirEntry{entry{o(0, 0), 0}, entry{o(1, 0), fs.ModeDir}}, 2, o(1, 0) + " (a folder)", ""},
		{regularEntries(o(0, 0), "zero_pp_rank_99999999999999999999_mp_rank_00_optim_states.pt"), 1, "extra zero_pp_rank_9999", ""},
	} {
		order, err := checkRanks("optim_states.pt", optimName, c.entries, c.ws)
		if c.want == "" {
			if err != nil {
				t.Errorf("%v: %v", c.entries, err)
			}
			if c.order != "" && strings.Join(order, " ") != c.order {
				t.Errorf("order %v, want %s", order, c.order)
			}
			if int64(len(order)) != c.ws {
				t.Errorf("%d names for %d ranks", len(order), c.ws)
			}
			continue
		}
		if !errors.Is(err, ckpterr.ErrCorrupt) {
			t.Errorf("%v: %v, want ErrCorrupt", c.entries, err)
			continue
		}
		for _, s := range strings.Split(c.want, "|") {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%v does not say %q", err, s)
			}
		}
	}
}

// TestPartitionCount: an int or a list of equal counts; a list whose groups differ
// (expert groups partitioned over fewer ranks) is refused rather than mixed up.
func TestPartitionCount(t *testing.T) {
	list := func(ns ...int64) *statedict.List {
		l := &statedict.List{}
		for _, n := range ns {
			l.Items = append(l.Items, n)
		}
		return l
	}
	for _, c := range []struct {
		v    statedict.Value
		want int64
		err  error
	}{
		{int64(4), 4, nil},
		{list(2, 2), 2, nil},
		{list(4, 2), 0, ckpterr.ErrUnsupported},
		{list(), 0, ckpterr.ErrCorrupt},
		{int64(0), 0, ckpterr.ErrCorrupt},
		{int64(-3), 0, ckpterr.ErrCorrupt},
		{int64(1 << 40), 0, ckpterr.ErrCorrupt},
		{"2", 0, ckpterr.ErrCorrupt},
	} {
		n, err := partitionCount(c.v)
		if n != c.want || !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
			t.Errorf("%v: %d %v, want %d %v", c.v, n, err, c.want, c.err)
		}
	}
}

// FuzzCheckRanks: any names against any world size are checked without panicking, and an
// accepted set is ranks 0 … ws-1 in order, once each.
func FuzzCheckRanks(f *testing.F) {
	f.Add("zero_pp_rank_0_mp_rank_00_optim_states.pt\nzero_pp_rank_1_mp_rank_00_optim_states.pt", int64(2))
	f.Add("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt\nzero_pp_rank_0_mp_rank_00_optim_states.pt", int64(2))
	f.Add("zero_pp_rank_0_mp_rank_00_optim_states.pt\nzero_pp_rank_5_mp_rank_00_optim_states.pt", int64(2))
	f.Fuzz(func(t *testing.T, names string, ws int64) {
		if ws < 1 || ws > 4096 {
			return
		}
		var es []fs.DirEntry
		for _, n := range strings.Split(names, "\n") {
			es = append(es, entry{n, 0})
		}
		order, err := checkRanks("optim_states.pt", optimName, es, ws)
		if err != nil {
			return
		}
		if int64(len(order)) != ws {
			t.Fatalf("%d names for %d ranks", len(order), ws)
		}
		for r, n := range order {
			f, ok := parseRankFile(optimName, n)
			if !ok || f.dp != int64(r) {
				t.Fatalf("rank %d is %q", r, n)
			}
		}
	})
}
