package dcp

import (
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/klauspost/compress/zstd"
)

// DataFile is the one data file of an output written without a sharding: RankFile(0).
const DataFile = "__0_0.distcp"

// leaf is one flattened item of a DCP save plan.
type leaf struct {
	fqn string
	// path holds the str keys and int list positions that lead to the leaf, as
	// planner_data records them; nil for a leaf under one key of the root, whose path is
	// (fqn,) — most leaves of a flat state dict, which then cost no path of their own (a
	// pointer: 40 bytes a leaf, not 56).
	path *[]statedict.Value
	val  statedict.Value
}

// keys returns the leaf's path.
func (l *leaf) keys() []statedict.Value {
	if l.path == nil {
		if l.fqn == "" { // the root itself is the leaf
			return nil
		}
		return []statedict.Value{l.fqn}
	}
	return *l.path
}

// Flatten flattens a state dict the way torch.distributed.checkpoint's flatten_state_dict
// does (torch ≥ 2.4): mappings are traversed with str(key); a list is traversed by index
// only if it holds a tensor or a container that must be traversed; tuples and other values
// are leaves; an empty mapping contributes nothing.
// The leaves are counted first and allocated once, and duplicate names found by sorting
// them: a checkpoint may hold hundreds of thousands of leaves, whose slice growing by
// doubling and whose set of names would each cost as much as the leaves themselves.
func flatten(root statedict.Value) ([]leaf, error) {
	out := make([]leaf, 0, countLeaves(root))
	var walk func(path []statedict.Value, v statedict.Value) error
	walk = func(path []statedict.Value, v statedict.Value) error {
		switch c := v.(type) {
		case *statedict.Dict:
			for _, e := range c.Entries() {
				k := e.Key // a str key as boxed already: no allocation per leaf
				if _, ok := k.(string); !ok {
					k = statedict.KeyString(e.Key)
				}
				if err := walk(append(path[:len(path):len(path)], k), e.Value); err != nil {
					return err
				}
			}
			return nil
		case *statedict.List:
			if !terminal(c) {
				for i, it := range c.Items {
					if err := walk(append(path[:len(path):len(path)], int64(i)), it); err != nil {
						return err
					}
				}
				return nil
			}
		}
		parts := make([]string, len(path))
		for i, p := range path {
			parts[i] = statedict.KeyString(p)
		}
		fqn := strings.Join(parts, ".")
		if len(path) == 1 {
			if k, ok := path[0].(string); ok && k == fqn && k != "" {
				path = nil
			}
		}
		l := leaf{fqn: fqn, val: v}
		if path != nil {
			l.path = &path
		}
		out = append(out, l)
		return nil
	}
	if err := walk(nil, root); err != nil {
		return nil, err
	}
	byName := make([]int32, len(out))
	for i := range byName {
		byName[i] = int32(i)
	}
	slices.SortFunc(byName, func(a, b int32) int { return strings.Compare(out[a].fqn, out[b].fqn) })
	for i := 1; i < len(byName); i++ {
		if fqn := out[byName[i]].fqn; fqn == out[byName[i-1]].fqn {
			return nil, fmt.Errorf("two entries flatten to the same name %q", fqn)
		}
	}
	return out, nil
}

// countLeaves is the number of leaves flatten finds in v.
func countLeaves(v statedict.Value) int {
	switch c := v.(type) {
	case *statedict.Dict:
		n := 0
		for _, e := range c.Entries() {
			n += countLeaves(e.Value)
		}
		return n
	case *statedict.List:
		if !terminal(c) {
			n := 0
			for _, it := range c.Items {
				n += countLeaves(it)
			}
			return n
		}
	}
	return 1
}

// terminal is DCP's _is_terminal for lists: a list is a leaf unless it holds a tensor or a
// mapping/list that is not itself terminal.
func terminal(l *statedict.List) bool {
	for _, it := range l.Items {
		switch c := it.(type) {
		case *statedict.Tensor:
			return false
		case *statedict.Dict:
			return false
		case *statedict.List:
			if !terminal(c) {
				return false
			}
		}
	}
	return true
}

// Write is the statedict.Writer of torch.distributed.checkpoint directories: a folder
// that torch.distributed.checkpoint.load reads into any process layout. Every tensor piece
// is stored as an embedded torch.save archive, every other leaf as a bytes item (a
// torch.save of the value), and a .metadata pickle names only the classes DCP needs.
//
// Without opts.Sharding it is what one process saves: every tensor one chunk, all in
// __0_0.distcp. With it, it is what the ranks of a job save with DCP's default planner:
// file __R_0.distcp holds rank R's pieces — its DTensor local shards, with the offsets and
// sizes DTensor reports — so each process reads only its own file, and pieces several
// ranks hold (replicated tensors, bytes items) are written once, by the rank torch's
// dedup_save_plans picks. Every rank gets its file, empty or not. With opts.Ranks only
// those ranks' files are written and the .metadata is left to Finish.
//
// The embedded archives are tagged "cpu", as torch's own DCP writer saves CPU copies: DCP
// loads bytes items with a plain torch.load and copies tensor chunks into the caller's
// tensors, wherever those live, so a device tag in the file could only make loading fail.
func Write(out statedict.Output, ck *statedict.Checkpoint, opts statedict.WriteOptions) (*statedict.Written, error) {
	p, err := planFor(ck, opts)
	if err != nil {
		return nil, err
	}
	ranks, err := p.selected(opts.Ranks)
	if err != nil {
		return nil, err
	}
	stored, files, n, kept, err := p.write(out, ranks, opts)
	if err != nil {
		return nil, err
	}
	if opts.Ranks != nil {
		part, err := encodePart(p, stored, ranks)
		if err != nil {
			return nil, err
		}
		return &statedict.Written{Files: files, Bytes: n, Part: part, Kept: kept}, nil
	}
	w, err := p.finish(out, ck, opts, stored)
	if err != nil {
		return nil, err
	}
	w.Kept = kept
	return w, nil
}

// Finish is the statedict.Finisher of DCP directories written in parts (Write with
// opts.Ranks): it checks that the parts hold exactly the items the save plan gives their
// ranks and writes the .metadata.
func Finish(out statedict.Output, ck *statedict.Checkpoint, opts statedict.WriteOptions, parts [][]byte) (*statedict.Written, error) {
	p, err := planFor(ck, opts)
	if err != nil {
		return nil, err
	}
	stored, byKey := make([]stored, len(p.items)), p.byKey()
	wrote := make([]bool, p.ranks)
	for i, b := range parts {
		if err := decodePart(p, b, byKey, stored, wrote); err != nil {
			return nil, fmt.Errorf("part %d: %w", i, err)
		}
	}
	for r, ok := range wrote {
		if !ok {
			return nil, fmt.Errorf("no part holds rank %d's file %s", r, RankFile(r))
		}
	}
	return p.finish(out, ck, opts, stored)
}

// RankFile is the data file of rank r: __R_0.distcp, as torch's FileSystemWriter names
// the one file each rank writes.
func RankFile(r int) string { return "__" + strconv.Itoa(r) + "_0.distcp" }

func planFor(ck *statedict.Checkpoint, opts statedict.WriteOptions) (*savePlan, error) {
	leaves, err := flatten(ck.Root)
	if err != nil {
		return nil, err
	}
	return newSavePlan(leaves, opts.Sharding)
}

// selected checks the ranks to write (nil: all) and returns them in increasing order.
func (p *savePlan) selected(ranks []int) ([]int, error) {
	if ranks == nil {
		all := make([]int, p.ranks)
		for r := range all {
			all[r] = r
		}
		return all, nil
	}
	out := slices.Clone(ranks)
	slices.Sort(out)
	for i, r := range out {
		if r < 0 || r >= p.ranks || i > 0 && out[i-1] == r {
			return nil, fmt.Errorf("ranks %v: each one of the %d ranks at most once", ranks, p.ranks)
		}
	}
	return out, nil
}

// stored is where an item's bytes were written: in its writer's file (RankFile), at
// offset. The items of a plan are stored at a []stored indexed like savePlan.items (not a
// map keyed by name and offsets, nor a file name each: a checkpoint may hold hundreds of
// thousands of items); done is false for an item not stored.
type stored struct {
	offset, length int64
	done           bool
}

// transforms are the stream transforms of every item written with compression c, as
// .metadata's _StorageInfo.transform_descriptors records them.
func transforms(c string) ([]string, error) {
	switch c {
	case "":
		return nil, nil
	case "zstd":
		return []string{ZStandard}, nil
	}
	return nil, fmt.Errorf("%w: %s compression (DCP items are compressed with zstd)", ckpterr.ErrUnsupported, c)
}

// write writes the files of ranks (in increasing order): each rank's bytes items, then its
// tensor pieces, in its plan's order. A tensor whose pieces this call writes one after the
// other in the tensor's row-major order feeds one digest (opts.Sum of the tensor) with all
// of them, so the tensor's checksum costs no second read; other pieces feed a digest of
// their own (opts.Sum of the piece's view). With opts.Compress "zstd" each item is one zstd
// stream (torch's ZStandard extension, zstandard's default level). It also returns the
// Python objects pickled as the source had them (statedict.Written.Kept).
func (p *savePlan) write(out statedict.Output, ranks []int, opts statedict.WriteOptions) ([]stored, []string, int64, []string, error) {
	descs, err := transforms(opts.Compress)
	if err != nil {
		return nil, nil, 0, nil, err
	}
	var zw *zstd.Encoder
	if descs != nil {
		if zw, err = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1)); err != nil {
			return nil, nil, 0, nil, err
		}
		defer zw.Close()
	}
	var kept []string
	inOrder := p.inOrder(ranks)
	sums := map[*statedict.Tensor]hash.Hash{}
	res := make([]stored, len(p.items))
	var files []string
	var total int64
	cpu := func(*statedict.Storage) string { return "cpu" }
	for _, r := range ranks {
		name := RankFile(r)
		w, err := out.Create(name)
		if err != nil {
			return nil, nil, 0, nil, err
		}
		var off int64
		save := func(i int) error {
			it := p.items[i]
			l := p.leaves[it.leaf]
			so := torchzip.SaveOptions{Location: cpu, Data: true}
			if !opts.WeightsOnly {
				// DCP's loader unpickles bytes items with torch.load(weights_only=False).
				keep := torchzip.KeptInto(&kept)
				so.Kept = func(name string, o *statedict.Object) {
					if name == "" {
						name = l.fqn
					} else {
						name = statedict.JoinName(l.fqn, name)
					}
					keep(name, o)
				}
			}
			v := l.val
			if it.tensor != nil {
				view, err := it.tensor.Box(it.box().Offsets, it.box().Sizes)
				if err != nil {
					return err
				}
				st, err := standalone(view)
				if err != nil {
					return err
				}
				v = st
				if opts.Sum != nil && !it.box().Empty() {
					t := it.tensor
					var h hash.Hash
					switch {
					case !inOrder[t]:
						h = opts.Sum(view)
					case sums[t] != nil:
						h = sums[t]
					default:
						h = opts.Sum(t)
						sums[t] = h
					}
					so.Sum = func(*statedict.Storage) hash.Hash { return h }
				}
			}
			var n int64
			var err error
			if zw != nil {
				cw := &statedict.Counter{W: w}
				zw.Reset(cw)
				if _, err = torchzip.Write(zw, v, so); err == nil {
					err = zw.Close()
				}
				n = cw.N
			} else {
				n, err = torchzip.Write(w, v, so)
			}
			if err != nil {
				return err
			}
			res[i] = stored{off, n, true}
			off += n
			return nil
		}
		for _, tensors := range []bool{false, true} {
			for _, i := range p.byRank[r] {
				if it := p.items[i]; (it.tensor != nil) == tensors {
					if err := save(i); err != nil {
						w.Close()
						return nil, nil, 0, nil, fmt.Errorf("%s: %w", p.leaves[it.leaf].fqn, err)
					}
				}
			}
		}
		if err := w.Close(); err != nil {
			return nil, nil, 0, nil, err
		}
		files = append(files, name)
		total += off
	}
	return res, files, total, kept, nil
}

// inOrder reports, per tensor, whether writing ranks writes all its pieces and they follow
// each other in the tensor's row-major order, each a contiguous run of it (a tensor whole,
// or split along its first dimension).
func (p *savePlan) inOrder(ranks []int) map[*statedict.Tensor]bool {
	writes := map[int]bool{}
	for _, r := range ranks {
		writes[r] = true
	}
	next := map[*statedict.Tensor]int64{} // the next element expected; -1 once out of order
	byWriter := slices.Clone(p.items)
	slices.SortStableFunc(byWriter, func(a, b *planItem) int { return int(a.writer) - int(b.writer) })
	for _, it := range byWriter {
		t := it.tensor
		if t == nil || next[t] < 0 {
			continue
		}
		start, n, ok := it.box().Run(t.Shape)
		switch {
		case !writes[int(it.writer)] || !ok:
			next[t] = -1
		case n == 0:
		case start != next[t]:
			next[t] = -1
		default:
			next[t] = start + n
		}
	}
	out := map[*statedict.Tensor]bool{}
	for t, n := range next {
		out[t] = n == t.NumEl()
	}
	return out
}

// finish writes the .metadata of the items stored, copies the checkpoint's extra files
// (config.json, tokenizer files) and reports the whole output.
func (p *savePlan) finish(out statedict.Output, ck *statedict.Checkpoint, opts statedict.WriteOptions, st []stored) (*statedict.Written, error) {
	for i, it := range p.items {
		if !st[i].done {
			return nil, fmt.Errorf("%s: no part stored it (rank %d's)", p.leaves[it.leaf].fqn, it.writer)
		}
	}
	descs, err := transforms(opts.Compress)
	if err != nil {
		return nil, err
	}
	mw, err := out.Create(MetadataFile)
	if err != nil {
		return nil, err
	}
	err = encodeMetadata(mw, p, st, descs)
	if cerr := mw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	extras, err := statedict.CopyFiles(out, ck, opts.Rewrite)
	if err != nil {
		return nil, err
	}
	w := &statedict.Written{}
	for r := range p.ranks {
		w.Files = append(w.Files, RankFile(r))
	}
	for _, s := range st {
		w.Bytes += s.length
	}
	w.Files = append(append(w.Files, MetadataFile), extras...)
	return w, nil
}

// part is what a writer of some ranks records: each item's place in its files.
type part struct {
	Ranks []int        `json:"ranks"`
	Items []storedItem `json:"items"`
}

type storedItem struct {
	FQN     string  `json:"fqn"`
	Offsets []int64 `json:"offsets"` // nil for bytes items
	File    string  `json:"file"`
	Offset  int64   `json:"offset"`
	Length  int64   `json:"length"`
}

func encodePart(p *savePlan, st []stored, ranks []int) ([]byte, error) {
	pt := part{Ranks: ranks, Items: []storedItem{}}
	for i, it := range p.items {
		fqn := p.leaves[it.leaf].fqn
		s := st[i]
		if !s.done {
			continue
		}
		si := storedItem{FQN: fqn, File: RankFile(int(it.writer)), Offset: s.offset, Length: s.length}
		if it.tensor != nil {
			si.Offsets = it.box().Offsets
		}
		pt.Items = append(pt.Items, si)
	}
	return json.Marshal(pt)
}

// decodePart adds the items of a part to st, checking them against the plan (byKey indexes
// its items): each is a planned item of one of the part's ranks, in that rank's file, and
// no rank or item comes twice.
func decodePart(p *savePlan, b []byte, byKey map[storageKey]int, st []stored, wrote []bool) error {
	var pt part
	if err := json.Unmarshal(b, &pt); err != nil {
		return err
	}
	mine := map[int]bool{}
	for _, r := range pt.Ranks {
		if r < 0 || r >= p.ranks {
			return fmt.Errorf("rank %d is not one of the %d ranks", r, p.ranks)
		}
		if wrote[r] {
			return fmt.Errorf("rank %d's file is in two parts", r)
		}
		wrote[r], mine[r] = true, true
	}
	for _, si := range pt.Items {
		i, ok := byKey[keyOf(si.FQN, si.Offsets)]
		var it *planItem
		if ok {
			it = p.items[i]
		}
		switch {
		case !ok:
			return fmt.Errorf("%s at %v: not an item of this save plan", si.FQN, si.Offsets)
		case !mine[int(it.writer)] || si.File != RankFile(int(it.writer)):
			return fmt.Errorf("%s at %v: stored in %s, but rank %d writes it", si.FQN, si.Offsets, si.File, it.writer)
		case si.Offset < 0 || si.Length <= 0:
			return fmt.Errorf("%s at %v: stored range %d+%d", si.FQN, si.Offsets, si.Offset, si.Length)
		}
		if st[i].done {
			return fmt.Errorf("%s at %v: stored twice", si.FQN, si.Offsets)
		}
		st[i] = stored{si.Offset, si.Length, true}
	}
	return nil
}

// byKey indexes the plan's items by their storage key.
func (p *savePlan) byKey() map[storageKey]int {
	m := make(map[storageKey]int, len(p.items))
	for i, it := range p.items {
		m[it.key(p.leaves[it.leaf].fqn)] = i
	}
	return m
}

// standalone returns t as DCP saves it: a contiguous tensor owning exactly its bytes.
// Contiguous views read their range of the source storage (a zero-copy file range when the
// source is mapped); other views, and those whose stored bytes need fixing (byte order,
// conj, neg), are gathered on demand as they are written, in bounded memory.
func standalone(t *statedict.Tensor) (*statedict.Tensor, error) {
	nb := t.NBytes()
	es := int64(t.DType.Size())
	var st *statedict.Storage
	if nb == 0 {
		st = statedict.NewMappedStorage("empty", "cpu", t.DType, []byte{})
		return &statedict.Tensor{DType: t.DType, Shape: t.Shape, Strides: statedict.ContiguousStrides(t.Shape), Storage: st, RequiresGrad: t.RequiresGrad}, nil
	}
	c, err := t.Contiguous()
	if err != nil {
		return nil, err
	}
	if c != t {
		if err := t.CheckView(); err != nil {
			return nil, err
		}
	}
	switch d, mapped := c.Storage.Mapped(); {
	case c != t:
		st = c.Storage // gathered: exactly the view's bytes
	case mapped:
		// A slice of the mapped source: stays zero-copy, and a file range for the output
		// writer when the source storage is file-backed.
		st = statedict.NewMappedStorage(t.Storage.Key, t.Storage.Location, t.DType, d[t.Offset*es:t.Offset*es+nb])
		st.File, st.Offset, st.FileBacked = t.Storage.File, t.Storage.Offset+t.Offset*es, t.Storage.FileBacked
	default:
		st = statedict.NewReaderStorage(t.Storage.Key, t.Storage.Location, t.DType, t.Storage, t.Offset*es, nb)
	}
	out := &statedict.Tensor{DType: t.DType, Shape: t.Shape, Strides: statedict.ContiguousStrides(t.Shape), Storage: st,
		RequiresGrad: t.RequiresGrad, Quantizer: t.Quantizer}
	return out, nil
}

const (
	mdModule = "torch.distributed.checkpoint.metadata"
	fsModule = "torch.distributed.checkpoint.filesystem"
	opNewObj = 0x81
)

// metadataBatch is how many dict entries one MARK … SETITEMS holds, as Python's pickler
// batches them: the unpickler's stack then never holds more than one batch.
const metadataBatch = 1000

// encodeMetadata pickles the Metadata dataclass of plan p with its items stored at st:
// each tensor's chunk list in the order torch's create_default_global_save_plan builds it
// (over the ranks' deduplicated plans in rank order), storage_data as each rank's writer
// reports its writes (bytes items, then tensor pieces), and state_dict_metadata and
// planner_data in the state dict's order — torch lists state_dict_metadata in rank order,
// which loaders ignore but a reader rebuilding the state dict from it (dcp_to_torch_save,
// ckpt) would follow. A chunk's MetadataIndex hint is its position in its tensor's list.
// It streams: the encoder's buffer is flushed as it fills, so memory does not grow with the
// number of items. Every item's _StorageInfo lists the stream transforms descs (compression).
func encodeMetadata(w io.Writer, p *savePlan, st []stored, descs []string) error {
	e := pickle.NewEncoder()
	files := make([]string, p.ranks)
	for r := range files {
		files[r] = RankFile(r)
	}
	var werr error
	// next ends a batch of dict entries every metadataBatch of n entries, and flushes.
	next := func(i, n int) {
		if (i+1)%metadataBatch == 0 && i+1 < n {
			e.Op(pickle.OpSetItems)
			e.Op(pickle.OpMark)
		}
		if e.Len() >= 1<<20 && werr == nil {
			werr = e.Flush(w)
		}
	}
	obj := func(module, class string) {
		e.Global(pickle.Global{Module: module, Name: class})
		e.Op(pickle.OpEmptyTuple)
		e.Op(opNewObj)
	}
	size := func(dims []int64) {
		e.Global(pickle.Global{Module: "torch", Name: "Size"})
		tuple(e, dims)
		e.Op(pickle.OpTuple1)
		e.Op(pickle.OpReduce)
	}
	// Each leaf's items in chunk-list order: leaf l's are chunks[start[l]:start[l+1]], and
	// hint[i] is item i's place among them (flat arrays, not a slice per leaf and a map per
	// item: a checkpoint may hold hundreds of thousands of them).
	start := make([]int, len(p.leaves)+1)
	for _, it := range p.items {
		start[it.leaf+1]++
	}
	for l := range p.leaves {
		start[l+1] += start[l]
	}
	chunks, hint, filled := make([]int32, len(p.items)), make([]int32, len(p.items)), make([]int32, len(p.leaves))
	for r := range p.ranks {
		for _, i := range p.byRank[r] {
			l := p.items[i].leaf
			hint[i] = filled[l]
			chunks[start[l]+int(filled[l])] = int32(i)
			filled[l]++
		}
	}
	obj(mdModule, "Metadata")
	e.Op(pickle.OpEmptyDict)
	e.Op(pickle.OpMark)

	e.String("state_dict_metadata")
	e.Op(pickle.OpEmptyDict)
	e.Op(pickle.OpMark)
	for li, l := range p.leaves {
		e.String(l.fqn)
		t, ok := l.val.(*statedict.Tensor)
		if !ok {
			obj(mdModule, "BytesStorageMetadata")
			next(li, len(p.leaves))
			continue
		}
		obj(mdModule, "TensorStorageMetadata")
		e.Op(pickle.OpEmptyDict)
		e.Op(pickle.OpMark)
		e.String("properties")
		obj(mdModule, "TensorProperties")
		e.Op(pickle.OpMark)
		e.Global(pickle.Global{Module: "torch", Name: t.DType.String()})
		e.Global(pickle.Global{Module: "torch.serialization", Name: "_get_layout"})
		e.String("torch.strided")
		e.Op(pickle.OpTuple1)
		e.Op(pickle.OpReduce)
		e.Bool(t.RequiresGrad)
		e.Global(pickle.Global{Module: mdModule, Name: "_MEM_FORMAT_ENCODING"})
		e.Int(0)
		e.Op(pickle.OpTuple1)
		e.Op(pickle.OpReduce)
		e.Bool(false)
		e.Op(pickle.OpTuple)
		e.Op(pickle.OpBuild)
		e.String("size")
		size(t.Shape)
		e.String("chunks")
		e.Op(pickle.OpEmptyList)
		e.Op(pickle.OpMark)
		for ci, i := range chunks[start[li]:start[li+1]] {
			it := p.items[i]
			if ci > 0 && ci%metadataBatch == 0 {
				e.Op(pickle.OpAppends) // batched as Python's pickler batches lists
				e.Op(pickle.OpMark)
			}
			obj(mdModule, "ChunkStorageMetadata")
			e.Op(pickle.OpEmptyDict)
			e.Op(pickle.OpMark)
			e.String("offsets")
			size(it.box().Offsets)
			e.String("sizes")
			size(it.box().Sizes)
			e.Op(pickle.OpSetItems)
			e.Op(pickle.OpBuild)
		}
		e.Op(pickle.OpAppends)
		e.Op(pickle.OpSetItems)
		e.Op(pickle.OpBuild)
		next(li, len(p.leaves))
	}
	e.Op(pickle.OpSetItems)

	e.String("planner_data")
	e.Op(pickle.OpEmptyDict)
	e.Op(pickle.OpMark)
	for li := range p.leaves {
		l := &p.leaves[li]
		e.String(l.fqn)
		e.Op(pickle.OpMark)
		for _, k := range l.keys() {
			switch k := k.(type) {
			case string:
				e.String(k)
			case int64:
				e.Int(k)
			}
		}
		e.Op(pickle.OpTuple)
		next(li, len(p.leaves))
	}
	e.Op(pickle.OpSetItems)

	e.String("storage_data")
	e.Op(pickle.OpEmptyDict)
	e.Op(pickle.OpMark)
	n := 0
	for r := range p.ranks {
		for _, tensors := range []bool{false, true} {
			for _, i := range p.byRank[r] {
				it := p.items[i]
				if (it.tensor != nil) != tensors {
					continue
				}
				fqn := p.leaves[it.leaf].fqn
				s := st[i]
				obj(mdModule, "MetadataIndex")
				e.Op(pickle.OpEmptyDict)
				e.Op(pickle.OpMark)
				e.String("fqn")
				e.String(fqn)
				if it.tensor != nil {
					e.String("offset")
					size(it.box().Offsets)
					e.String("index")
					e.Int(int64(hint[i]))
				} else {
					e.String("index")
					e.None()
				}
				e.Op(pickle.OpSetItems)
				e.Op(pickle.OpBuild)
				obj(fsModule, "_StorageInfo")
				e.Op(pickle.OpEmptyDict)
				e.Op(pickle.OpMark)
				e.String("relative_path")
				e.String(files[it.writer])
				e.String("offset")
				e.Int(s.offset)
				e.String("length")
				e.Int(s.length)
				if len(descs) > 0 {
					e.String("transform_descriptors")
					e.Op(pickle.OpEmptyList)
					for _, d := range descs {
						e.String(d)
						e.Op(pickle.OpAppend)
					}
				}
				e.Op(pickle.OpSetItems)
				e.Op(pickle.OpBuild)
				next(n, len(p.items))
				n++
			}
		}
	}
	e.Op(pickle.OpSetItems)

	e.String("storage_meta")
	e.None()
	e.String("version")
	e.String("1.0.0")
	e.Op(pickle.OpSetItems)
	e.Op(pickle.OpBuild)
	if werr != nil {
		return werr
	}
	_, err := w.Write(e.Finish())
	return err
}

// tuple emits a tuple of ints.
func tuple(e *pickle.Encoder, v []int64) {
	e.Op(pickle.OpMark)
	for _, x := range v {
		e.Int(x)
	}
	e.Op(pickle.OpTuple)
}
