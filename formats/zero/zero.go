// Package zero reads DeepSpeed ZeRO checkpoint folders (stages 1, 2 and 3, any number of
// data-parallel ranks) as the full model they hold, consolidated exactly as DeepSpeed's own
// deepspeed/utils/zero_to_fp32.py does — fp32 master weights, unpartitioned, padding
// removed, shared parameters restored — without DeepSpeed, without running any pickle, and
// without materialising partitions: every parameter is a lazy gather of the ranges of the
// ranks' flat partitions that hold it.
//
// A folder is the checkpoint root (a `latest` file naming the tag folder, global_stepN/) or
// the tag folder itself, holding *_model_states.pt (mp_rank_00_model_states.pt for stages 1
// and 2, zero_pp_rank_R_mp_rank_00_model_states.pt per rank for stage 3) and one
// *_optim_states.pt per rank whose optimizer_state_dict holds the rank's fp32 partitions
// (single_partition_of_fp32_groups, or fp32_flat_groups for stage 3).
package zero

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Format is the statedict.Checkpoint.Format of consolidated ZeRO checkpoints.
const Format = "deepspeed-zero"

// maxLatest bounds the `latest` file: a tag name ("global_step1000").
const maxLatest = 4096

// Detect returns the tag folder of a ZeRO checkpoint at dir: the folder `latest` names, or
// dir itself when it holds the ranks' *_optim_states.pt files. A `latest` that is not a
// small regular file (a FIFO, a device, a folder) names nothing.
func Detect(ctx context.Context, dir string) (string, bool) {
	if b, err := storage.ReadFile(ctx, storage.Join(dir, "latest"), maxLatest); err == nil {
		tag := strings.TrimSpace(string(b))
		if tag != "" && filepath.Base(tag) == tag && tag != ".." && tag != "." && len(files(ctx, storage.Join(dir, tag), optimFile)) > 0 {
			return storage.Join(dir, tag), true
		}
	}
	if len(files(ctx, dir, optimFile)) > 0 && len(files(ctx, dir, modelFile)) > 0 {
		return dir, true
	}
	return "", false
}

// FolderOf returns the tag folder the model-states file path belongs to: its own folder,
// when that folder holds the ranks' *_optim_states.pt files and path is one of its
// *_model_states.pt files; false for any other file.
func FolderOf(ctx context.Context, path string) (string, bool) {
	dir, name := storage.Dir(path), storage.Base(path)
	if !modelFile.MatchString(name) || len(files(ctx, dir, optimFile)) == 0 {
		return "", false
	}
	for _, f := range files(ctx, dir, modelFile) {
		if f == name {
			return dir, true
		}
	}
	return "", false
}

var (
	optimFile = regexp.MustCompile(`_optim_states\.pt$`)
	modelFile = regexp.MustCompile(`_model_states\.pt$`)
	digits    = regexp.MustCompile(`\d+`)
)

// entries lists the entries of dir matching re, whatever they are.
func entries(ctx context.Context, dir string, re *regexp.Regexp) []fs.DirEntry {
	all, err := storage.ReadDir(ctx, dir)
	if err != nil {
		return nil
	}
	var out []fs.DirEntry
	for _, e := range all {
		if re.MatchString(e.Name()) {
			out = append(out, e)
		}
	}
	return out
}

// reorder returns items (one for each of names) in the order of the names in order.
func reorder[T any](names, order []string, items []T) []T {
	if len(items) == 0 {
		return items
	}
	at := make(map[string]int, len(names))
	for i, n := range names {
		at[n] = i
	}
	out := make([]T, len(order))
	for i, n := range order {
		out[i] = items[at[n]]
	}
	return out
}

// files lists the regular files of dir matching re, in natural order (rank 10 after rank 2),
// as zero_to_fp32's get_checkpoint_files sorts them.
func files(ctx context.Context, dir string, re *regexp.Regexp) []string {
	entries, err := storage.ReadDir(ctx, dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.Type().IsRegular() && re.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	sort.Slice(out, func(i, j int) bool { return naturalLess(out[i], out[j]) })
	return out
}

func naturalLess(a, b string) bool {
	ka, kb := naturalKey(a), naturalKey(b)
	for i := 0; i < len(ka) && i < len(kb); i++ {
		if ka[i] != kb[i] {
			na, ea := strconv.Atoi(ka[i])
			nb, eb := strconv.Atoi(kb[i])
			if ea == nil && eb == nil {
				return na < nb
			}
			return ka[i] < kb[i]
		}
	}
	return len(ka) < len(kb)
}

func naturalKey(s string) []string {
	var out []string
	at := 0
	for _, m := range digits.FindAllStringIndex(s, -1) {
		out = append(out, s[at:m[0]], s[m[0]:m[1]])
		at = m[1]
	}
	return append(out, s[at:])
}

// modelStates is what zero_to_fp32's parse_model_states keeps of one model-states file.
type modelStates struct {
	file                string
	module              *statedict.Dict
	buffers             map[string]bool
	paramShapes         []*statedict.Dict // per group: name → torch.Size
	shared              *statedict.Dict   // name → the name it shares
	frozenShapes        *statedict.Dict
	frozenFragments     *statedict.Dict
	hasParamShapes      bool
	placeholdersPresent bool
}

// Options say what Open consolidates besides the weights.
type Options struct {
	// Optimizer also consolidates the optimizer state for resume: the root becomes
	// {"model": the consolidated weights, "optimizer": the optimizer state by parameter
	// name}, as torch.distributed.checkpoint's get_optimizer_state_dict gives it — "state"
	// maps each trainable parameter's name to its moments (exp_avg, exp_avg_sq, any other
	// per-element state), unpartitioned and unpadded exactly as the fp32 weights, and its
	// group's step; "param_groups" are rank 0's groups with "params" listing the names.
	// This is what DeepSpeed's ds_to_universal.py extracts from the same partitions.
	Optimizer bool
}

// Open reads the ZeRO checkpoint whose tag folder is dir (see Detect); openFile opens one
// torch.save file. The checkpoint's root is the consolidated state dict in zero_to_fp32's
// order: buffers (as float32), frozen parameters, trainable parameters, shared parameters
// (the same tensor as the one they share).
func Open(ctx context.Context, dir string, openFile func(context.Context, string) (*statedict.Checkpoint, error)) (*statedict.Checkpoint, error) {
	return OpenWith(ctx, dir, openFile, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, dir string, openFile func(context.Context, string) (*statedict.Checkpoint, error), opts Options) (_ *statedict.Checkpoint, err error) {
	out := &statedict.Checkpoint{Format: Format, Path: dir}
	defer func() {
		if err != nil {
			out.Close()
		}
	}()
	open := func(name string) (*statedict.Dict, error) {
		ck, err := openFile(ctx, storage.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out.Closers = append(out.Closers, ck.Closers...)
		d, ok := ck.Root.(*statedict.Dict)
		if !ok {
			return nil, fmt.Errorf("%s: %w: holds a %T, not a dict", storage.Join(dir, name), ckpterr.ErrCorrupt, ck.Root)
		}
		return d, nil
	}
	// A link or anything but a file in a rank file's place is refused by name (files lists
	// regular files only, and would otherwise pass over it).
	for _, re := range []*regexp.Regexp{modelFile, optimFile} {
		if err := filesOnly(entries(ctx, dir, re)); err != nil {
			return nil, fmt.Errorf("%s: %w", dir, err)
		}
	}
	var models []*modelStates
	for _, name := range files(ctx, dir, modelFile) {
		d, err := open(name)
		if err != nil {
			return nil, err
		}
		m, err := parseModelStates(storage.Join(dir, name), d)
		if err != nil {
			return nil, err
		}
		models = append(models, m)
	}
	if len(models) == 0 {
		return nil, fmt.Errorf("%s: %w: no *_model_states.pt file", dir, ckpterr.ErrCorrupt)
	}
	optims := files(ctx, dir, optimFile)
	stage, ws := int64(0), int64(0)
	var groups [][]*statedict.Tensor // per rank: the fp32 flat partitions, per group
	var bases []*statedict.Dict      // per rank: the optimizer state over those partitions
	for i, name := range optims {
		d, err := open(name)
		if err != nil {
			return nil, err
		}
		p := storage.Join(dir, name)
		osd, ok := field(d, "optimizer_state_dict").(*statedict.Dict)
		if !ok {
			return nil, fmt.Errorf("%s: %w: no optimizer_state_dict", p, ckpterr.ErrCorrupt)
		}
		st, ok := intValue(field(osd, "zero_stage"))
		if !ok {
			return nil, fmt.Errorf("%s: %w: not a ZeRO checkpoint (no zero_stage)", p, ckpterr.ErrCorrupt)
		}
		n, err := partitionCount(field(osd, "partition_count"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if i == 0 {
			stage, ws = st, n
		} else if st != stage || n != ws {
			return nil, fmt.Errorf("%s: %w: ZeRO stage %d over %d ranks, rank 0's file says stage %d over %d", p, ckpterr.ErrCorrupt, st, n, stage, ws)
		}
		key := "single_partition_of_fp32_groups"
		switch {
		case stage == 3:
			key = "fp32_flat_groups"
		case stage < 1 || stage > 3:
			return nil, fmt.Errorf("%s: %w: ZeRO stage %d", p, ckpterr.ErrUnsupported, stage)
		}
		flat, err := tensorList(field(osd, key))
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", p, key, err)
		}
		groups = append(groups, flat)
		if opts.Optimizer {
			b, err := baseState(osd, stage)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			bases = append(bases, b)
		}
	}
	if len(optims) == 0 {
		return nil, fmt.Errorf("%s: %w: no *_optim_states.pt file", dir, ckpterr.ErrCorrupt)
	}
	// The ranks' files must be exactly ranks 0 … ws-1, once each; they are consolidated in
	// rank order.
	order, err := checkRanks("optim_states.pt", optimName, entries(ctx, dir, optimFile), ws)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	groups, bases = reorder(optims, order, groups), reorder(optims, order, bases)
	optims = order
	if stage == 3 {
		morder, err := checkRanks("model_states.pt", modelName, entries(ctx, dir, modelFile), ws)
		if err != nil {
			return nil, fmt.Errorf("%s: ZeRO-3 keeps every rank's model states: %w", dir, err)
		}
		names := make([]string, len(models))
		for i, m := range models {
			names[i] = storage.Base(m.file)
		}
		models = reorder(names, morder, models)
	}
	c := &consolidator{dir: dir, ws: ws, stage: stage, models: models, groups: groups, out: statedict.NewDict("collections.OrderedDict")}
	if err := c.run(); err != nil {
		return nil, err
	}
	out.Root = c.out
	if opts.Optimizer {
		osd, err := c.optimizer(optims, bases)
		if err != nil {
			return nil, err
		}
		root := statedict.NewDict("")
		root.Set("model", c.out)
		root.Set("optimizer", osd)
		out.Root = root
	}
	return out, nil
}

// parseModelStates reads what zero_to_fp32 needs of one model-states file.
func parseModelStates(path string, d *statedict.Dict) (*modelStates, error) {
	m := &modelStates{file: path, buffers: map[string]bool{}}
	var ok bool
	if m.module, ok = field(d, "module").(*statedict.Dict); !ok {
		return nil, fmt.Errorf("%s: %w: not a DeepSpeed model-states file (no module state dict)", path, ckpterr.ErrCorrupt)
	}
	names, ok := field(d, "buffer_names").(*statedict.List)
	if !ok {
		return nil, fmt.Errorf("%s: %w: not a model state checkpoint (no buffer_names)", path, ckpterr.ErrCorrupt)
	}
	for _, it := range names.Items {
		if s, ok := it.(string); ok {
			m.buffers[s] = true
		}
	}
	shapes, ok := field(d, "param_shapes").(*statedict.List)
	if !ok {
		return nil, fmt.Errorf("%s: %w: no param_shapes (saved without a ZeRO optimizer)", path, ckpterr.ErrCorrupt)
	}
	for i, g := range shapes.Items {
		gd, ok := g.(*statedict.Dict)
		if !ok {
			return nil, fmt.Errorf("%s: %w: param_shapes[%d] is %T", path, ckpterr.ErrCorrupt, i, g)
		}
		m.paramShapes = append(m.paramShapes, gd)
	}
	if m.shared, ok = field(d, "shared_params").(*statedict.Dict); !ok {
		m.shared = statedict.NewDict("")
	}
	m.frozenShapes, _ = field(d, "frozen_param_shapes").(*statedict.Dict)
	m.frozenFragments, _ = field(d, "frozen_param_fragments").(*statedict.Dict)
	return m, nil
}

// CheckModelStates refuses a ZeRO-3 model-states file read on its own (path, whose tree is
// root): its module holds [0]-shaped placeholders in place of the parameters, which are
// partitioned over the *_optim_states.pt files of its folder (FolderOf finds them when
// they are there). Any other file passes.
func CheckModelStates(path string, root statedict.Value) error {
	d, ok := root.(*statedict.Dict)
	if !ok {
		return nil
	}
	module, ok1 := field(d, "module").(*statedict.Dict)
	shapes, ok2 := field(d, "param_shapes").(*statedict.List)
	if !ok1 || !ok2 {
		return nil
	}
	for _, g := range shapes.Items {
		gd, ok := g.(*statedict.Dict)
		if !ok {
			continue
		}
		for _, e := range gd.Entries() {
			t, isT := field(module, statedict.KeyString(e.Key)).(*statedict.Tensor)
			shape, isShape := sizeOf(e.Value)
			if isT && isShape && t.NumEl() == 0 && numel(shape) > 0 {
				folder := storage.Dir(path)
				return fmt.Errorf("%s: %w: a DeepSpeed ZeRO-3 model-states file: its parameters are placeholders (%s is %v, its shape %v); the weights are partitioned over the ranks' *_optim_states.pt files, which %s does not hold — read the folder that has them",
					path, ckpterr.ErrUnsupported, statedict.KeyString(e.Key), t.Shape, shape, folder)
			}
		}
	}
	return nil
}

// field is d[key], nil when absent.
func field(d *statedict.Dict, key string) statedict.Value {
	v, _ := d.Get(key)
	return v
}

// intValue reads an int, or an IntEnum member (ZeroStageEnum.gradients pickles as the class
// called on its value).
func intValue(v statedict.Value) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case *statedict.Object:
		if x.Call == statedict.CallReduce && len(x.Args) == 1 {
			n, ok := x.Args[0].(int64)
			return n, ok
		}
	}
	return 0, false
}

// partitionCount is the data-parallel world size: an int, or a list of per-group counts,
// which must agree. (Expert groups partitioned over an expert data-parallel group of their
// own have a smaller count: their partitions on different ranks hold different experts, so
// concatenating every rank's, as zero_to_fp32 does with the largest count, would mix them.)
func partitionCount(v statedict.Value) (int64, error) {
	if n, ok := intValue(v); ok {
		if n < 1 || n > maxWorld {
			return 0, fmt.Errorf("%w: partition_count is %d", ckpterr.ErrCorrupt, n)
		}
		return n, nil
	}
	l, ok := v.(*statedict.List)
	if !ok || len(l.Items) == 0 {
		return 0, fmt.Errorf("%w: partition_count is %T, not a count", ckpterr.ErrCorrupt, v)
	}
	counts := make([]int64, len(l.Items))
	for i, it := range l.Items {
		n, ok := intValue(it)
		if !ok || n < 1 || n > maxWorld {
			return 0, fmt.Errorf("%w: partition_count[%d] is %v, not a count", ckpterr.ErrCorrupt, i, it)
		}
		counts[i] = n
	}
	for i, n := range counts {
		if n != counts[0] {
			return 0, fmt.Errorf("%w: partition_count %v: parameter group %d is partitioned over %d ranks, group 0 over %d (expert groups of their own are not consolidated)", ckpterr.ErrUnsupported, counts, i, n, counts[0])
		}
	}
	return counts[0], nil
}

// tensorList reads a list of 1-D tensors (a rank's flat groups).
func tensorList(v statedict.Value) ([]*statedict.Tensor, error) {
	l, ok := v.(*statedict.List)
	if !ok {
		if t, isT := v.(*statedict.Tensor); isT {
			return []*statedict.Tensor{t}, nil
		}
		return nil, fmt.Errorf("%w: a %T, not a list of flat tensors", ckpterr.ErrCorrupt, v)
	}
	out := make([]*statedict.Tensor, len(l.Items))
	for i, it := range l.Items {
		t, ok := it.(*statedict.Tensor)
		if !ok || len(t.Shape) != 1 {
			return nil, fmt.Errorf("%w: group %d is %T, not a flat tensor", ckpterr.ErrCorrupt, i, it)
		}
		out[i] = t
	}
	return out, nil
}

// sizeOf reads a torch.Size (or a tuple or list of ints).
func sizeOf(v statedict.Value) ([]int64, bool) {
	if o, ok := v.(*statedict.Object); ok && o.Class == "torch.Size" && len(o.Args) == 1 {
		v = o.Args[0]
	}
	var items []statedict.Value
	switch x := v.(type) {
	case statedict.Tuple:
		items = x
	case *statedict.List:
		items = x.Items
	default:
		return nil, false
	}
	out := make([]int64, len(items))
	for i, it := range items {
		n, ok := it.(int64)
		if !ok || n < 0 {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}

func numel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// errLayout is a partition layout that does not add up.
var errLayout = errors.New("the partitions do not hold the parameters param_shapes lists")

// consolidator rebuilds the state dict from the partitions.
type consolidator struct {
	dir       string
	ws, stage int64
	models    []*modelStates
	groups    [][]*statedict.Tensor
	out       *statedict.Dict
}

func (c *consolidator) run() error {
	m0 := c.models[0]
	// Buffers, restored to fp32 as zero_to_fp32 does (Tensor.float(), integers included).
	for _, e := range m0.module.Entries() {
		name := statedict.KeyString(e.Key)
		if !m0.buffers[name] {
			continue
		}
		t, ok := e.Value.(*statedict.Tensor)
		if !ok {
			return fmt.Errorf("%s: buffer %s is %T", m0.file, name, e.Value)
		}
		f, err := float32Of(t)
		if err != nil {
			return fmt.Errorf("%s: buffer %s: %w", m0.file, name, err)
		}
		c.out.Set(name, f)
	}
	if err := c.frozen(); err != nil {
		return err
	}
	put := func(name string, t *statedict.Tensor) { c.out.Set(name, t) }
	var err error
	if c.stage <= 2 {
		err = c.zero2(c.groups, statedict.Float32, put)
	} else {
		err = c.zero3(c.groups, statedict.Float32, put)
	}
	if err != nil {
		return err
	}
	for _, e := range m0.shared.Entries() {
		if to, ok := c.out.Get(statedict.KeyString(e.Value)); ok {
			c.out.Set(e.Key, to)
		}
	}
	return nil
}

// frozen adds the parameters saved outside the optimizer: whole in every model-states file
// (stages 1, 2) or partitioned like the others over the ranks' files (stage 3).
func (c *consolidator) frozen() error {
	m0 := c.models[0]
	if m0.frozenShapes == nil {
		return nil
	}
	for _, e := range m0.frozenShapes.Entries() {
		name := statedict.KeyString(e.Key)
		shape, ok := sizeOf(e.Value)
		if !ok {
			return fmt.Errorf("%s: frozen_param_shapes[%s] is %T", m0.file, name, e.Value)
		}
		if c.stage <= 2 {
			t, ok := fragment(m0, name)
			if !ok {
				return fmt.Errorf("%s: %w: no frozen fragment for %s", m0.file, ckpterr.ErrCorrupt, name)
			}
			c.out.Set(name, t)
			continue
		}
		var spans []span
		var dt statedict.DType
		for _, m := range c.models {
			t, ok := fragment(m, name)
			if !ok {
				return fmt.Errorf("%s: %w: no frozen fragment for %s", m.file, ckpterr.ErrCorrupt, name)
			}
			dt = t.DType
			spans = append(spans, span{t, 0, t.NumEl()})
		}
		g, err := gathered(name, dt, shape, spans)
		if err != nil {
			return err
		}
		c.out.Set(name, g)
	}
	return nil
}

func fragment(m *modelStates, name string) (*statedict.Tensor, bool) {
	if m.frozenFragments == nil {
		return nil, false
	}
	t, ok := field(m.frozenFragments, name).(*statedict.Tensor)
	return t, ok
}

// zero2 consolidates stages 1 and 2 from groups (per rank, per group, a flat partition of
// dtype dt), giving each parameter to put: each group's ranks' partitions, concatenated,
// hold the group's parameters back to back; the last rank's padding (to 2 × world size)
// was dropped when saving the fp32 partitions (the optimizer's moments keep it).
func (c *consolidator) zero2(groups [][]*statedict.Tensor, dt statedict.DType, put func(string, *statedict.Tensor)) error {
	shapes := c.models[0].paramShapes
	for i, group := range shapes {
		var parts []span
		var avail int64
		for r := range groups {
			if i >= len(groups[r]) {
				return fmt.Errorf("%s: %w: rank %d has %d groups, param_shapes %d", c.dir, errLayout, r, len(groups[r]), len(shapes))
			}
			t := groups[r][i]
			parts = append(parts, span{t, 0, t.NumEl()})
			avail += t.NumEl()
		}
		var offset int64
		for _, e := range group.Entries() {
			name := statedict.KeyString(e.Key)
			shape, ok := sizeOf(e.Value)
			if !ok {
				return fmt.Errorf("%s: param_shapes[%d][%s] is %T", c.models[0].file, i, name, e.Value)
			}
			n := numel(shape)
			if offset+n > avail {
				return fmt.Errorf("%s: %w: group %d holds %d elements, %s needs [%d, %d)", c.dir, errLayout, i, avail, name, offset, offset+n)
			}
			g, err := gathered(name, dt, shape, cut(parts, offset, n))
			if err != nil {
				return err
			}
			put(name, g)
			offset += n
		}
		align := 2 * c.ws
		if roundUp(offset, align) != roundUp(avail, align) {
			return fmt.Errorf("%s: %w: group %d: consumed %d elements of %d", c.dir, errLayout, i, offset, avail)
		}
	}
	return nil
}

// zero3 consolidates stage 3 from groups (per rank, per group, a flat partition of dtype
// dt), giving each parameter to put: every parameter is split in ceil(numel / world size)
// elements per rank, at the same offset of each rank's flat groups (concatenated), the
// last piece zero-padded.
func (c *consolidator) zero3(groups [][]*statedict.Tensor, dt statedict.DType, put func(string, *statedict.Tensor)) error {
	flat := make([][]span, len(groups)) // per rank: its groups back to back
	var avail int64
	for r, gs := range groups {
		var n int64
		for _, t := range gs {
			flat[r] = append(flat[r], span{t, 0, t.NumEl()})
			n += t.NumEl()
		}
		if r == 0 {
			avail = n
		} else if n != avail {
			return fmt.Errorf("%s: %w: rank %d holds %d elements, rank 0 %d", c.dir, errLayout, r, n, avail)
		}
	}
	var offset int64
	for _, group := range c.models[0].paramShapes {
		for _, e := range group.Entries() {
			name := statedict.KeyString(e.Key)
			shape, ok := sizeOf(e.Value)
			if !ok {
				return fmt.Errorf("%s: param_shapes[%s] is %T", c.models[0].file, name, e.Value)
			}
			n := numel(shape)
			part := (n + c.ws - 1) / c.ws
			if offset+part > avail {
				return fmt.Errorf("%s: %w: the ranks hold %d elements each, %s needs [%d, %d)", c.dir, errLayout, avail, name, offset, offset+part)
			}
			var spans []span
			for r := range flat {
				spans = append(spans, cut(flat[r], offset, part)...)
			}
			g, err := gathered(name, dt, shape, cut(spans, 0, n))
			if err != nil {
				return err
			}
			put(name, g)
			offset += part
		}
	}
	if offset != avail {
		return fmt.Errorf("%s: %w: consumed %d elements of the %d each rank holds", c.dir, errLayout, offset, avail)
	}
	return nil
}

func roundUp(x, a int64) int64 { return (x + a - 1) / a * a }

// float32Of returns t as float32, converted as Tensor.float() does.
func float32Of(t *statedict.Tensor) (*statedict.Tensor, error) {
	if t.DType == statedict.Float32 {
		return t, nil
	}
	if !t.IsWholeStorage() {
		return nil, fmt.Errorf("%w: a %s view of a larger storage", ckpterr.ErrUnsupported, t.DType)
	}
	st, err := codec.CastStorage(t.Storage, t.DType, statedict.Float32)
	if err != nil {
		return nil, err
	}
	out := *t
	out.DType, out.Storage, out.Offset, out.Strides = statedict.Float32, st, 0, statedict.ContiguousStrides(t.Shape)
	out.Parameter, out.RequiresGrad, out.Attrs = false, false, nil
	return &out, nil
}
