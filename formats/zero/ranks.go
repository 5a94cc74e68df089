package zero

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/internal/regular"
)

// A ZeRO tag folder holds one optimizer-states file per data-parallel rank, named by
// DeepSpeed's engine (_get_zero_ckpt_name) [bf16_]zero_pp_rank_D_mp_rank_MM_optim_states.pt,
// and at stage 3 one model-states file per rank, zero_pp_rank_D_mp_rank_MM_model_states.pt
// (stages 1 and 2 save the model once, mp_rank_MM_model_states.pt). zero_to_fp32 refuses a
// folder whose number of optimizer files is not the partition_count they record ("Expected
// N of '*_optim_states.pt' … but found M files"); checkRanks goes as far as naming them:
// the data-parallel ranks must be exactly 0 … partition_count-1, once each, of one
// model-parallel rank, each a file of the folder (a link to another rank's file, or to
// another run's, is not).

var (
	optimName = regexp.MustCompile(`^(bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$`)
	modelName = regexp.MustCompile(`^zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt$`)
)

// maxWorld bounds a data-parallel world: more ranks than any cluster has devices.
const maxWorld = 1 << 20

// rankFile is one rank's file as its name gives it.
type rankFile struct {
	name   string
	dp, mp int64
}

// parseRankFile reads a rank file's name against re (its first numeric group the
// data-parallel rank, the next the model-parallel one).
func parseRankFile(re *regexp.Regexp, name string) (rankFile, bool) {
	m := re.FindStringSubmatch(name)
	if m == nil {
		return rankFile{}, false
	}
	var nums []int64
	for _, s := range m[1:] {
		if s == "" || !isDigits(s) {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n >= maxWorld {
			return rankFile{}, false
		}
		nums = append(nums, n)
	}
	if len(nums) != 2 {
		return rankFile{}, false
	}
	return rankFile{name: name, dp: nums[0], mp: nums[1]}, true
}

func isDigits(s string) bool { return strings.Trim(s, "0123456789") == "" }

// checkRanks checks the files named as re's rank files (names: every entry of the folder
// matching suffix, with its mode) against a data-parallel world of ws ranks. It returns the
// names in rank order, or an error naming the files missing, extra or not files.
func checkRanks(what string, re *regexp.Regexp, entries []fs.DirEntry, ws int64) ([]string, error) {
	if err := filesOnly(entries); err != nil {
		return nil, err
	}
	var extra []string
	byRank := map[int64]string{}
	mp := int64(-1)
	for _, e := range entries {
		f, ok := parseRankFile(re, e.Name())
		switch {
		case !ok, f.dp >= ws:
			extra = append(extra, e.Name())
			continue
		case mp < 0:
			mp = f.mp
		case f.mp != mp:
			extra = append(extra, e.Name()) // another model-parallel rank's: zero_to_fp32 reads one
			continue
		}
		if _, dup := byRank[f.dp]; dup {
			extra = append(extra, e.Name())
			continue
		}
		byRank[f.dp] = e.Name()
	}
	var missing []string
	out := make([]string, 0, ws)
	for r := range ws {
		n, ok := byRank[r]
		if !ok {
			if mp < 0 {
				mp = 0
			}
			missing = append(missing, fmt.Sprintf("rank %d's (zero_pp_rank_%d_mp_rank_%02d_%s)", r, r, mp, what))
			continue
		}
		out = append(out, n)
	}
	if len(missing) == 0 && len(extra) == 0 {
		return out, nil
	}
	var say []string
	if len(missing) > 0 {
		say = append(say, "missing "+list(missing))
	}
	if len(extra) > 0 {
		say = append(say, "extra "+list(extra))
	}
	return nil, fmt.Errorf("%w: partition_count is %d, so the folder holds one *_%s file for each of ranks 0 to %d: %s (a rank's file is missing, or left over from another run)",
		ckpterr.ErrCorrupt, ws, what, ws-1, strings.Join(say, "; "))
}

// filesOnly refuses rank files that are not files of the folder (links, FIFOs, folders),
// naming them.
func filesOnly(entries []fs.DirEntry) error {
	var notFiles []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			notFiles = append(notFiles, fmt.Sprintf("%s (%s)", e.Name(), regular.Kind(e.Type())))
		}
	}
	if len(notFiles) > 0 {
		return fmt.Errorf("%w: %s in the place of rank files: %s; ckpt reads rank files that are files of the folder", ckpterr.ErrCorrupt, plural(len(notFiles), "entry", "entries"), list(notFiles))
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// list names up to eight entries in natural order, and how many more there are.
func list(names []string) string {
	slices.SortFunc(names, func(a, b string) int {
		if naturalLess(a, b) {
			return -1
		}
		if naturalLess(b, a) {
			return 1
		}
		return 0
	})
	if len(names) > 8 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:8], ", "), len(names)-8)
	}
	return strings.Join(names, ", ")
}
