package megatron

import (
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/store"
	"github.com/ckpt-dev/ckpt/statedict"
)

// rankFolder is one mp_rank_* entry of an iteration folder.
type rankFolder struct {
	name   string
	tp, pp int64
}

// rankFolders lists the entries of the iteration folder at named as Megatron names rank
// folders, in rank order, refusing those a merge cannot trust: an entry that is not a
// plain folder (a link could make one rank's files answer for another's), an
// expert-parallel rank (_EEE), a rank number beyond maxParallel.
func rankFolders(at string) ([]rankFolder, error) {
	entries, err := store.ReadDir(at)
	if err != nil {
		return nil, err
	}
	var out []rankFolder
	for _, e := range entries {
		m := rankDir.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		if !e.IsDir() {
			what := "a file"
			switch {
			case e.Type()&fs.ModeSymlink != 0:
				what = "a link"
			case !e.Type().IsRegular():
				what = "a special file"
			}
			return nil, fmt.Errorf("%s: %w: the rank folder %s is %s, not a folder: ckpt merges rank folders it can tell apart", at, statedict.ErrCorrupt, e.Name(), what)
		}
		if m[3] != "" {
			return nil, fmt.Errorf("%s: %w: %s is an expert-parallel rank (mp_rank_TT_PPP_EEE): ckpt merges dense GPT models only", at, statedict.ErrUnsupported, e.Name())
		}
		tp, err1 := strconv.ParseInt(m[1], 10, 64)
		pp, err2 := int64(0), error(nil)
		if m[2] != "" {
			pp, err2 = strconv.ParseInt(m[2], 10, 64)
		}
		if err1 != nil || err2 != nil || tp >= maxParallel || pp >= maxParallel {
			return nil, fmt.Errorf("%s: %w: rank folder %s: a rank beyond %d", at, statedict.ErrCorrupt, e.Name(), maxParallel)
		}
		out = append(out, rankFolder{e.Name(), tp, pp})
	}
	slices.SortFunc(out, func(a, b rankFolder) int {
		if a.tp != b.tp {
			return int(a.tp - b.tp)
		}
		if a.pp != b.pp {
			return int(a.pp - b.pp)
		}
		return strings.Compare(a.name, b.name)
	})
	return out, nil
}

// rankName is the folder Megatron's get_checkpoint_name gives tensor rank tp and pipeline
// rank pp of a run of pps pipeline stages.
func rankName(tp, pp, pps int64) string {
	if pps == 1 {
		return fmt.Sprintf("mp_rank_%02d", tp)
	}
	return fmt.Sprintf("mp_rank_%02d_%03d", tp, pp)
}

// maxMissing bounds the missing rank folders checkRankSet lists one by one.
const maxMissing = 4096

// checkRankSet refuses a set of rank folders that is not exactly the tp × pp ranks of the
// run, naming what is missing and what does not belong (or, when far more are missing than
// present, how many the args ask for).
func checkRankSet(at string, found []rankFolder, tp, pp int64) error {
	if tp*pp > int64(len(found))+maxMissing {
		return fmt.Errorf("%s: %w: the args say tensor parallel %d × pipeline parallel %d (%d rank folders); the folder holds %d", at, statedict.ErrCorrupt, tp, pp, tp*pp, len(found))
	}
	have := map[string]bool{}
	for _, r := range found {
		have[r.name] = true
	}
	var missing, extra []string
	want := map[string]bool{}
	for p := range pp {
		for t := range tp {
			n := rankName(t, p, pp)
			want[n] = true
			if !have[n] {
				missing = append(missing, n)
			}
		}
	}
	for _, r := range found {
		if !want[r.name] {
			extra = append(extra, r.name)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return nil
	}
	var says []string
	if len(missing) > 0 {
		says = append(says, "missing "+names(missing))
	}
	if len(extra) > 0 {
		says = append(says, "not ranks of this run: "+names(extra))
	}
	return fmt.Errorf("%s: %w: the args say tensor parallel %d × pipeline parallel %d (%d rank folders); %s", at, statedict.ErrCorrupt, tp, pp, tp*pp, strings.Join(says, "; "))
}

// names lists at most a few items.
func names(items []string) string {
	const most = 8
	if len(items) > most {
		return strings.Join(items[:most], ", ") + fmt.Sprintf(" and %d more", len(items)-most)
	}
	return strings.Join(items, ", ")
}

// needsMerge reports whether the iteration folder at is read through the merge: it has
// more than one rank folder, or its one holds the distributed optimizer's state, or an
// entry named as a rank folder is not a plain folder (the merge refuses it).
func needsMerge(at string) bool {
	entries, err := store.ReadDir(at)
	if err != nil {
		return false
	}
	n := 0
	for _, e := range entries {
		if !rankDir.MatchString(e.Name()) {
			continue
		}
		n++
		if !e.IsDir() || store.IsFile(store.Join(at, e.Name(), DistribOptimFile)) {
			return true
		}
	}
	return n > 1
}
