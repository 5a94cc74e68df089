package megatron

import (
	"errors"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// TestCheckRanks: the rank folders are the whole grid the save's args give (or, without
// args, every rank below the largest), each under the name Megatron writes; the error
// names what is missing and extra.
func TestCheckRanks(t *testing.T) {
	for _, c := range []struct {
		names []string
		par   Parallel
		want  string // "" for none; else substrings, |-separated
	}{
		{[]string{"mp_rank_00"}, Parallel{TP: 1, PP: 1}, ""},
		{[]string{"mp_rank_00"}, Parallel{}, ""},
		{[]string{"mp_rank_00", "mp_rank_01"}, Parallel{TP: 2, PP: 1}, ""},
		{[]string{"mp_rank_00_000", "mp_rank_00_001", "mp_rank_01_000", "mp_rank_01_001"}, Parallel{TP: 2, PP: 2}, ""},
		{[]string{"mp_rank_00_000_000", "mp_rank_00_000_001"}, Parallel{TP: 1, PP: 1, EP: 2}, "missing mp_rank_00_000|extra mp_rank_00_000_000"},
		{[]string{"mp_rank_00_000", "mp_rank_00_001"}, Parallel{TP: 1, PP: 1, EP: 2}, ""},
		{[]string{"mp_rank_00_000_000", "mp_rank_00_000_001", "mp_rank_00_001_000", "mp_rank_00_001_001"}, Parallel{TP: 1, PP: 2, EP: 2}, ""},
		{[]string{"mp_rank_00", "mp_rank_02"}, Parallel{}, "missing mp_rank_01"},
		{[]string{"mp_rank_00", "mp_rank_02"}, Parallel{TP: 2}, "missing mp_rank_01|extra mp_rank_02"},
		{[]string{"mp_rank_00", "mp_rank_01", "mp_rank_02"}, Parallel{TP: 2}, "extra mp_rank_02|tensor parallel 2"},
		{[]string{"mp_rank_00", "mp_rank_01", "mp_rank_02"}, Parallel{TP: 2, PP: 1}, "extra mp_rank_02"},
		{[]string{"mp_rank_00_000", "mp_rank_01_001"}, Parallel{}, "missing mp_rank_00_001, mp_rank_01_000"},
		{[]string{"mp_rank_00", "mp_rank_00_001"}, Parallel{}, "missing mp_rank_00_000|extra mp_rank_00"},
		{[]string{"mp_rank_000"}, Parallel{}, "extra mp_rank_000"},
		{[]string{"mp_rank_00", "mp_rank_x"}, Parallel{}, "extra mp_rank_x"},
		{[]string{"mp_rank_99999999"}, Parallel{}, "extra mp_rank_99999999"},
		{[]string{"mp_rank_65535"}, Parallel{}, "missing mp_rank_00, mp_rank_01|and 65527 more"},
		{[]string{"mp_rank_00_256_255"}, Parallel{}, "a grid of 65792 rank folders, more than 65536"},
		// Named as get_checkpoint_name names them: no pipeline rank with one stage, one
		// with more; args asking for far more ranks than the folder holds refused by count.
		{[]string{"mp_rank_00", "mp_rank_01"}, Parallel{TP: 2, PP: 2}, "missing mp_rank_00_000, mp_rank_00_001, mp_rank_01_000, mp_rank_01_001; extra mp_rank_00, mp_rank_01"},
		{[]string{"mp_rank_00_000", "mp_rank_01_000"}, Parallel{TP: 2, PP: 1}, "missing mp_rank_00, mp_rank_01; extra mp_rank_00_000, mp_rank_01_000"},
		{[]string{"mp_rank_00"}, Parallel{TP: 8, PP: 1}, "missing mp_rank_01, mp_rank_02, mp_rank_03, mp_rank_04, mp_rank_05, mp_rank_06, mp_rank_07"},
		{[]string{"mp_rank_00"}, Parallel{TP: 16, PP: 1}, "missing mp_rank_01, mp_rank_02, mp_rank_03, mp_rank_04, mp_rank_05, mp_rank_06, mp_rank_07, mp_rank_08 and 7 more"},
		{[]string{"mp_rank_00"}, Parallel{TP: 1 << 16, PP: 1 << 16}, "tensor parallel 65536 × pipeline parallel 65536 as its args record): a grid of 4294967296 rank folders, more than 65536; the folder holds 1"},
	} {
		err := CheckRanks(c.names, c.par)
		if c.want == "" {
			if err != nil {
				t.Errorf("%v %+v: %v", c.names, c.par, err)
			}
			continue
		}
		if !errors.Is(err, ckpterr.ErrCorrupt) {
			t.Errorf("%v %+v: %v, want ErrCorrupt", c.names, c.par, err)
			continue
		}
		for _, s := range strings.Split(c.want, "|") {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%v %+v: %v does not say %q", c.names, c.par, err, s)
			}
		}
	}
	for _, c := range []struct {
		names []string
		want  string
	}{
		{[]string{"mp_rank_00", "mp_rank_01"}, ""},
		{[]string{"tp_rank_00_pp_rank_000", "tp_rank_00_pp_rank_001", "tp_rank_01_pp_rank_000", "tp_rank_01_pp_rank_001"}, ""},
		{[]string{"tp_rank_00_pp_rank_000", "tp_rank_01_pp_rank_001"}, "missing tp_rank_00_pp_rank_001, tp_rank_01_pp_rank_000"},
		{[]string{"mp_rank_00", "mp_rank_02"}, "missing mp_rank_01"},
		{[]string{"mp_rank_00", "weights"}, "extra weights"},
	} {
		err := CheckNeMoRanks(c.names)
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("NeMo %v: %v, want %q", c.names, err, c.want)
		}
	}
}

// FuzzCheckRanks: any names and sizes are checked without panicking or unbounded work, and
// a set accepted is a whole grid: as many names as the product of the sizes it implies.
func FuzzCheckRanks(f *testing.F) {
	f.Add("mp_rank_00_000\nmp_rank_00_001\nmp_rank_01_000\nmp_rank_01_001", int64(2), int64(2), int64(0))
	f.Add("mp_rank_00\nmp_rank_02", int64(0), int64(0), int64(0))
	f.Add("mp_rank_00_000_000\nmp_rank_00_000_001", int64(1), int64(1), int64(2))
	f.Fuzz(func(t *testing.T, names string, tp, pp, ep int64) {
		list := strings.Split(names, "\n")
		if len(list) > 1000 {
			return
		}
		par := Parallel{TP: tp, PP: pp, EP: ep}
		if tp < 0 || tp > maxRanks || pp < 0 || pp > maxRanks || ep < 0 || ep > maxRanks {
			par = Parallel{}
		}
		err := CheckRanks(list, par)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		product := int64(1)
		sizes := map[int]int64{}
		for _, n := range list {
			id, ok := parseRank(n)
			if !ok || rankName(id) != n {
				t.Fatalf("accepted %q", n)
			}
			seen[n] = true
			for i, r := range id {
				sizes[i] = max(sizes[i], r+1)
			}
		}
		for _, s := range sizes {
			product *= s
		}
		if int64(len(seen)) != product {
			t.Fatalf("accepted %d distinct names for a grid of %d: %q", len(seen), product, list)
		}
	})
}
