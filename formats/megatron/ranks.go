package megatron

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/internal/regular"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// A legacy save's rank folders are named by Megatron's get_checkpoint_name: mp_rank_TT
// for tensor-parallel rank TT, then _PPP for the pipeline rank when the pipeline is
// parallel and _EEE for the expert rank when experts are — every (tensor, pipeline,
// expert) rank of the save once, each folder holding that rank's model_optim_rng.pt (and,
// with the distributed optimizer, its distrib_optim.pt). A folder missing from the grid,
// one beyond it, one named otherwise or one that is a link makes the save incomplete or
// not the save it claims to be: it is refused, naming what is missing and what is extra,
// as Megatron's own loader fails on a rank's missing file.
//
// This file is the one place a legacy save's ranks are found and checked, whether one rank
// is read as its file's tree or several are merged: rankFolders lists them, checkRankSet
// checks them against the first rank's args (CheckRanks), rankFiles checks each file read
// from them.

// Parallel is a save's model-parallel sizes, as its args record them (tensor_model_-,
// pipeline_model_- and expert_model_parallel_size; 0 when not recorded).
type Parallel struct {
	TP, PP, EP int64
}

// maxRanks bounds each model-parallel size: more than any cluster has devices.
const maxRanks = 1 << 16

// rankID is a rank folder's ranks as its name gives them: one to three numbers.
type rankID []int64

// parseRank reads a Megatron rank folder's name.
func parseRank(name string) (rankID, bool) { return parseRankWith(rankDir, name) }

// parseRankWith reads a rank folder's name by re, whose groups are the ranks; an empty
// group (an alternative not taken, a pipeline rank a name leaves out) is skipped.
func parseRankWith(re *regexp.Regexp, name string) (rankID, bool) {
	m := re.FindStringSubmatch(name)
	if m == nil {
		return nil, false
	}
	var id rankID
	for _, s := range m[1:] {
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n >= maxRanks {
			return nil, false
		}
		id = append(id, n)
	}
	return id, true
}

// rankName is the folder Megatron names for id: the tensor rank in two digits at least, the
// others in three.
func rankName(id rankID) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mp_rank_%02d", id[0])
	for _, n := range id[1:] {
		fmt.Fprintf(&b, "_%03d", n)
	}
	return b.String()
}

// ParallelOf reads the model-parallel sizes from a rank file's args (an argparse.Namespace);
// zero for those it does not record.
func ParallelOf(root statedict.Value) Parallel {
	d, ok := root.(*statedict.Dict)
	if !ok {
		return Parallel{}
	}
	args, _ := d.Get("args")
	o, ok := args.(*statedict.Object)
	if !ok {
		return Parallel{}
	}
	data, _, ok, err := o.Data()
	attrs, isDict := data.(*statedict.Dict)
	if err != nil || !ok || !isDict {
		return Parallel{}
	}
	size := func(key string) int64 {
		v, _ := attrs.Get(key)
		n, ok := v.(int64)
		if !ok || n < 1 || n > maxRanks {
			return 0
		}
		return n
	}
	return Parallel{TP: size("tensor_model_parallel_size"), PP: size("pipeline_model_parallel_size"), EP: size("expert_model_parallel_size")}
}

// CheckRanks checks that the rank folders names (the mp_rank_* entries of an iteration
// folder, all of them folders) are the whole grid of one save: with par known, exactly the
// ranks its sizes give (a pipeline field when PP > 1, an expert field when EP > 1);
// otherwise every rank below the largest of each field. A name that is not one Megatron
// writes is extra. The error names the missing and extra folders.
func CheckRanks(names []string, par Parallel) error {
	return checkGrid(names, megatronRanks, par)
}

// CheckNeMoRanks checks the rank folders of a NeMo 1 archive as CheckRanks does, named as
// NeMo's inject_model_parallel_rank names them: mp_rank_TT without pipeline parallelism,
// else tp_rank_TT_pp_rank_PPP (the grid is every rank below the largest of each).
func CheckNeMoRanks(names []string) error {
	return checkGrid(names, nemoRanks, Parallel{})
}

// rankScheme is how a layout names its rank folders.
type rankScheme struct {
	parse func(string) (rankID, bool)
	name  func(rankID) string
}

var (
	megatronRanks = rankScheme{parseRank, rankName}
	nemoRanks     = rankScheme{parseNeMoRank, nemoRankName}
	nemoRankDir   = regexp.MustCompile(`^(?:mp_rank_(\d{2,})|tp_rank_(\d{2,})_pp_rank_(\d{3,}))$`)
)

// parseNeMoRank reads a NeMo 1 rank folder's name: (tensor) or (tensor, pipeline).
func parseNeMoRank(name string) (rankID, bool) { return parseRankWith(nemoRankDir, name) }

func nemoRankName(id rankID) string {
	if len(id) == 1 {
		return fmt.Sprintf("mp_rank_%02d", id[0])
	}
	return fmt.Sprintf("tp_rank_%02d_pp_rank_%03d", id[0], id[1])
}

// checkGrid is CheckRanks for the names of scheme s.
func checkGrid(names []string, s rankScheme, par Parallel) error {
	present := map[string]bool{}
	var extra []string
	fields := 0
	var sizes []int64
	for _, n := range names {
		id, ok := s.parse(n)
		if !ok {
			extra = append(extra, n)
			continue
		}
		if s.name(id) != n {
			extra = append(extra, n) // not a name Megatron writes (mp_rank_000, mp_rank_00_01)
			continue
		}
		if len(id) > fields {
			fields = len(id)
			sizes = append(sizes, make([]int64, len(id)-len(sizes))...)
		}
		for i, r := range id {
			sizes[i] = max(sizes[i], r+1)
		}
		present[n] = true
	}
	if len(present) == 0 && len(extra) == 0 {
		return nil
	}
	desc := "every rank below the largest named"
	if par.TP > 0 {
		// The sizes the save records decide the grid and the names.
		sizes = []int64{par.TP}
		desc = fmt.Sprintf("tensor parallel %d", par.TP)
		if par.PP > 1 {
			sizes = append(sizes, par.PP)
			desc += fmt.Sprintf(" × pipeline parallel %d", par.PP)
		}
		if par.EP > 1 {
			sizes = append(sizes, par.EP)
			desc += fmt.Sprintf(" × expert parallel %d", par.EP)
		}
		desc += " as its args record"
	}
	// The grid's size, saturating: args may ask for far more ranks than any save has, and
	// are refused by count, never by listing every folder missing.
	var total int64 = 1
	for _, s := range sizes {
		if s > 0 && total > math.MaxInt64/s {
			total = math.MaxInt64
		} else {
			total *= s
		}
	}
	if total > maxRanks {
		return fmt.Errorf("%w: the rank folders are not the whole save (%s): a grid of %d rank folders, more than %d; the folder holds %d", ckpterr.ErrCorrupt, desc, total, maxRanks, len(names))
	}
	var missing []string
	want := map[string]bool{}
	id := make(rankID, len(sizes))
	var walk func(i int)
	walk = func(i int) {
		if i == len(sizes) {
			n := s.name(id)
			want[n] = true
			if !present[n] {
				missing = append(missing, n)
			}
			return
		}
		for r := range sizes[i] {
			id[i] = r
			walk(i + 1)
		}
	}
	if len(sizes) > 0 {
		walk(0)
	}
	for n := range present {
		if !want[n] {
			extra = append(extra, n)
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return nil
	}
	var say []string
	if len(missing) > 0 {
		say = append(say, "missing "+listRanks(missing))
	}
	if len(extra) > 0 {
		say = append(say, "extra "+listRanks(extra))
	}
	return fmt.Errorf("%w: the rank folders are not the whole save (%s): %s", ckpterr.ErrCorrupt, desc, strings.Join(say, "; "))
}

// compareRanks orders rank folders by (tensor, pipeline, expert) rank, numerically; names
// that are not a rank folder's by name, after them.
func compareRanks(a, b string) int {
	ia, oka := parseRank(a)
	ib, okb := parseRank(b)
	switch {
	case oka && okb:
		if c := slices.Compare(ia, ib); c != 0 {
			return c
		}
	case oka != okb:
		if oka {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// listRanks names up to eight rank folders in rank order, and how many more there are.
func listRanks(names []string) string {
	slices.SortFunc(names, compareRanks)
	if len(names) > 8 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:8], ", "), len(names)-8)
	}
	return strings.Join(names, ", ")
}

// rankFolder is one mp_rank_* entry of an iteration folder: its name and, when the name is
// one Megatron writes, its ranks.
type rankFolder struct {
	name   string
	id     rankID // (tensor, pipeline[, expert]); nil for a name Megatron does not write
	tp, pp int64
}

// rankFolders lists the rank folders of the iteration folder at (the entries ranks lists),
// in rank order, refusing an entry in a rank folder's place that is not a folder: a link
// could make one rank's files answer for another's, or another save's for this one's.
func rankFolders(ctx context.Context, at string) ([]rankFolder, error) {
	var out []rankFolder
	for _, e := range ranks(ctx, at) {
		if !e.IsDir() {
			return nil, fmt.Errorf("%s: %w: %s is %s, not a rank folder", at, ckpterr.ErrCorrupt, e.Name(), regular.Kind(e.Type()))
		}
		f := rankFolder{name: e.Name()}
		if id, ok := parseRank(f.name); ok {
			f.id, f.tp = id, id[0]
			if len(id) > 1 {
				f.pp = id[1]
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// checkRankSet checks that the rank folders found in the iteration folder at are the whole
// grid of the save whose first rank file's tree is root (CheckRanks, with the sizes its
// args record).
func checkRankSet(at string, found []rankFolder, root statedict.Value) error {
	names := make([]string, len(found))
	for i, f := range found {
		names[i] = f.name
	}
	if err := CheckRanks(names, ParallelOf(root)); err != nil {
		return fmt.Errorf("%s: %w", at, err)
	}
	return nil
}

// rankFiles checks the files a legacy save's ranks are read from: each a regular file
// (through a link as torch.load follows one: a hub cache's snapshot links into blobs/),
// inside the checkpoint folder, and no two the same file (a link or a hard link would make
// one rank's file answer for another's).
type rankFiles struct {
	dir, iter string
	folder    *hf.Folder
	seen      []fs.FileInfo
	names     []string // seen's, as rank/file
}

// check returns the path of the file name in rank folder r, or an error naming it.
func (s *rankFiles) check(ctx context.Context, r, name string) (string, error) {
	rel := path.Join(s.iter, r, name)
	p := storage.Join(s.dir, rel)
	st, err := storage.Stat(ctx, p)
	if err != nil || !st.Mode().IsRegular() {
		what := "no " + name
		if err == nil {
			what = fmt.Sprintf("a %s that is %s", name, regular.Kind(st.Mode()))
		}
		return "", fmt.Errorf("%s: %w: the rank folder %s has %s", storage.Join(s.dir, s.iter), ckpterr.ErrCorrupt, r, what)
	}
	if !s.folder.Confined(rel) {
		return "", fmt.Errorf("%s: %w: %s is %w", storage.Join(s.dir, s.iter), ckpterr.ErrCorrupt, rel, hf.ErrOutside)
	}
	for i, o := range s.seen {
		if os.SameFile(o, st) {
			return "", fmt.Errorf("%s: %w: %s and %s are the same file", storage.Join(s.dir, s.iter), ckpterr.ErrCorrupt, s.names[i], path.Join(r, name))
		}
	}
	s.seen = append(s.seen, st)
	s.names = append(s.names, path.Join(r, name))
	return p, nil
}
