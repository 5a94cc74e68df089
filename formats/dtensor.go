package formats

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// DTensorRanks is the statedict.Checkpoint.Format of a folder of per-rank torch.save files
// holding DTensors (FSDP2's torch.save(model.state_dict()) on every rank), read whole.
const DTensorRanks = "dtensor-ranks"

// maxCompared bounds the bytes of a plain (non-DTensor) tensor that every rank saved and
// whose copies are compared when the folder is opened (a step count, a scalar); larger
// ones are read from the lowest rank's file.
const maxCompared = 64 << 10

// rankFile is one rank's torch.save file of a DTensor folder.
type rankFile struct {
	path  string
	root  statedict.Value
	rank  int
	world int // the job's ranks, as the file's DTensors say it
}

// torchFiles lists the torch.save files (zip or legacy) directly in dir, by name.
func torchFiles(ctx context.Context, dir string) []string {
	entries, err := storage.ReadDir(ctx, dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := storage.Join(dir, e.Name())
		if k, err := Detect(ctx, p); err == nil && (k == TorchZip || k == TorchLegacy) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// firstDTensor returns the first DTensor shard in v, in tree order.
func firstDTensor(v statedict.Value) *statedict.DTensor {
	d, _ := dtensors(v, true)
	return d
}

// dtensors returns the first DTensor shard in v, in tree order, and the number of ranks of
// the job as v's DTensors say it: the largest of their meshes, or of the jobs their meshes
// record (statedict.DTensor.World). With first it stops at the first DTensor.
func dtensors(v statedict.Value, first bool) (*statedict.DTensor, int) {
	var d *statedict.DTensor
	world := 0
	errFound := errors.New("found")
	_ = statedict.Walk(v, "", func(_ string, x statedict.Value) error {
		if t, ok := x.(*statedict.DTensor); ok {
			if d == nil {
				d = t
			}
			world = max(world, t.World, t.MeshSize())
			if first {
				return errFound
			}
		}
		return nil
	})
	return d, world
}

// isDTensorFolder reports whether dir holds torch.save files one of which holds a DTensor
// shard, or fails to open (its reader, openDTensorRanks, then says why).
func isDTensorFolder(ctx context.Context, dir string) bool {
	for _, p := range torchFiles(ctx, dir) {
		ck, err := openPart(ctx, p)
		if err != nil {
			return true
		}
		found := firstDTensor(ck.Root) != nil
		ck.Close()
		if found {
			return true
		}
	}
	return false
}

// openDTensorRanks reads a folder of per-rank torch.save files holding DTensors as the
// whole checkpoint; see openDTensorFiles.
func openDTensorRanks(ctx context.Context, dir string) (*statedict.Checkpoint, error) {
	return openDTensorFiles(ctx, dir, torchFiles(ctx, dir))
}

// openDTensorFiles reads the per-rank torch.save files of dir as one checkpoint. The ranks
// come from the pickles (each DTensor's mesh knows the rank that saved it), not from the
// file names; every rank of the mesh must be there exactly once. The files' trees must
// have the same structure: every DTensor is reassembled lazily from the ranks' local
// shards, exactly as DTensor.full_tensor() gives it (the pieces are the Checkpoint's
// Shards); every other value — plain tensors (an optimizer's step), numbers, strings — must
// be equal on every rank and is kept once.
func openDTensorFiles(ctx context.Context, dir string, paths []string) (_ *statedict.Checkpoint, err error) {
	ck := &statedict.Checkpoint{Format: DTensorRanks, Path: dir}
	defer func() {
		if err != nil {
			ck.Close()
		}
	}()
	var files []*rankFile
	var first *rankFile
	for _, p := range paths {
		part, err := openPart(ctx, p)
		if err != nil {
			return nil, err
		}
		ck.Closers = append(ck.Closers, part.Closers...)
		d, world := dtensors(part.Root, false)
		if d == nil {
			if first != nil {
				return nil, fmt.Errorf("%s: %w: it holds no DTensor, while %s beside it holds rank %d's shards: a folder of per-rank DTensor saves holds the ranks' files only", p, ckpterr.ErrCorrupt, first.path, first.rank)
			}
			continue
		}
		f := &rankFile{path: p, root: part.Root, rank: d.Rank, world: world}
		if first == nil {
			first = f
		}
		files = append(files, f)
	}
	if first == nil {
		return nil, fmt.Errorf("%s: %w: no torch.save file in it holds a DTensor", dir, ckpterr.ErrUnsupported)
	}
	// Earlier files without DTensors.
	for _, p := range paths {
		if !slices.ContainsFunc(files, func(f *rankFile) bool { return f.path == p }) {
			return nil, fmt.Errorf("%s: %w: it holds no DTensor, while %s beside it holds rank %d's shards: a folder of per-rank DTensor saves holds the ranks' files only", p, ckpterr.ErrCorrupt, first.path, first.rank)
		}
	}
	world := 0
	for _, f := range files {
		world = max(world, f.world)
	}
	byRank := map[int]*rankFile{}
	for _, f := range files {
		if g, dup := byRank[f.rank]; dup {
			return nil, fmt.Errorf("%s: %w: %s and %s both hold rank %d's shards", dir, ckpterr.ErrCorrupt, g.path, f.path, f.rank)
		}
		if f.rank >= world {
			return nil, fmt.Errorf("%s: %w: it holds rank %d's shards, but the DTensors' meshes span %d ranks", f.path, ckpterr.ErrCorrupt, f.rank, world)
		}
		byRank[f.rank] = f
	}
	if len(byRank) != world {
		var missing []string
		for r := range world {
			if byRank[r] == nil {
				missing = append(missing, fmt.Sprint(r))
			}
		}
		return nil, fmt.Errorf("%s: %w: the DTensors' meshes span %d ranks; the files of rank %s are missing (found %d)", dir, ckpterr.ErrCorrupt, world, strings.Join(missing, ", "), len(files))
	}
	slices.SortFunc(files, func(a, b *rankFile) int { return a.rank - b.rank })
	m := &merger{dir: dir, files: files, ck: ck, done: map[any]*statedict.Tensor{}}
	ck.Shards = map[*statedict.Tensor][]statedict.Shard{}
	vals := make([]statedict.Value, len(files))
	for i, f := range files {
		vals[i] = f.root
	}
	if ck.Root, err = m.merge("", vals); err != nil {
		return nil, err
	}
	return ck, nil
}

func meshString(mesh []statedict.MeshAxis) string {
	parts := make([]string, len(mesh))
	for i, a := range mesh {
		parts[i] = fmt.Sprint(a.Size)
		if a.Name != "" {
			parts[i] = a.Name + "=" + parts[i]
		}
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// merger joins the ranks' trees into one.
type merger struct {
	dir   string
	files []*rankFile // by rank
	ck    *statedict.Checkpoint
	done  map[any]*statedict.Tensor // rank 0's tensor or DTensor → the merged tensor (shared ones stay shared)
	depth int
}

// fail is a corrupt-folder error about the value at name.
func (m *merger) fail(name string, format string, args ...any) error {
	return fmt.Errorf("%s: %w: %s: %s", m.dir, ckpterr.ErrCorrupt, displayName(name), fmt.Sprintf(format, args...))
}

func displayName(name string) string {
	if name == "" {
		return "the root"
	}
	return name
}

// at says where rank i's tensor t lies: its file and byte offset.
func (m *merger) at(i int, t *statedict.Tensor) string {
	off := int64(0)
	if t.Storage != nil {
		off = t.Storage.Offset + t.Offset*int64(t.DType.Size())
	}
	return fmt.Sprintf("%s (byte %d)", m.files[i].path, off)
}

func (m *merger) merge(name string, vals []statedict.Value) (statedict.Value, error) {
	if m.depth++; m.depth > 10000 {
		return nil, fmt.Errorf("%s: %w: values nested deeper than 10000 levels", m.dir, ckpterr.ErrUnsupported)
	}
	defer func() { m.depth-- }()
	switch v := vals[0].(type) {
	case *statedict.Tensor, *statedict.DTensor:
		return m.tensor(name, vals)
	case *statedict.Dict:
		out := statedict.NewDictSize(v.Class, v.Len())
		out.Attrs = v.Attrs
		ds := make([]*statedict.Dict, len(vals))
		for i, x := range vals {
			d, ok := x.(*statedict.Dict)
			if !ok || d.Len() != v.Len() || d.Class != v.Class {
				return nil, m.fail(name, "rank %d's %s holds %s, rank %d's %s %s", m.files[0].rank, m.files[0].path, kindOf(v), m.files[i].rank, m.files[i].path, kindOf(x))
			}
			ds[i] = d
		}
		for j, e := range v.Entries() {
			k := statedict.KeyString(e.Key)
			items := make([]statedict.Value, len(vals))
			for i, d := range ds {
				f := d.Entries()[j]
				if !reflect.DeepEqual(f.Key, e.Key) {
					return nil, m.fail(name, "entry %d is %q in %s, %q in %s", j, k, m.files[0].path, statedict.KeyString(f.Key), m.files[i].path)
				}
				items[i] = f.Value
			}
			mv, err := m.merge(statedict.JoinName(name, k), items)
			if err != nil {
				return nil, err
			}
			out.Append(e.Key, mv)
		}
		return out, nil
	case *statedict.List:
		items, err := m.sequence(name, vals, func(x statedict.Value) ([]statedict.Value, bool) {
			l, ok := x.(*statedict.List)
			if !ok {
				return nil, false
			}
			return l.Items, true
		})
		if err != nil {
			return nil, err
		}
		return &statedict.List{Items: items}, nil
	case statedict.Tuple:
		items, err := m.sequence(name, vals, func(x statedict.Value) ([]statedict.Value, bool) {
			t, ok := x.(statedict.Tuple)
			return t, ok
		})
		if err != nil {
			return nil, err
		}
		return statedict.Tuple(items), nil
	}
	for i, x := range vals[1:] {
		if !reflect.DeepEqual(statedict.JSON(vals[0]), statedict.JSON(x)) {
			return nil, m.fail(name, "rank %d's %s holds %v, rank %d's %s %v: the ranks disagree on a value that is not a DTensor", m.files[0].rank, m.files[0].path, statedict.JSON(vals[0]), m.files[i+1].rank, m.files[i+1].path, statedict.JSON(x))
		}
	}
	return vals[0], nil
}

// sequence merges lists (or tuples) item by item.
func (m *merger) sequence(name string, vals []statedict.Value, items func(statedict.Value) ([]statedict.Value, bool)) ([]statedict.Value, error) {
	first, _ := items(vals[0])
	seqs := make([][]statedict.Value, len(vals))
	for i, x := range vals {
		s, ok := items(x)
		if !ok || len(s) != len(first) {
			return nil, m.fail(name, "rank %d's %s holds %s of %d items, rank %d's %s %s", m.files[0].rank, m.files[0].path, kindOf(vals[0]), len(first), m.files[i].rank, m.files[i].path, kindOf(x))
		}
		seqs[i] = s
	}
	out := make([]statedict.Value, len(first))
	for j := range first {
		col := make([]statedict.Value, len(vals))
		for i := range seqs {
			col[i] = seqs[i][j]
		}
		v, err := m.merge(statedict.JoinName(name, fmt.Sprint(j)), col)
		if err != nil {
			return nil, err
		}
		out[j] = v
	}
	return out, nil
}

func kindOf(v statedict.Value) string {
	switch x := v.(type) {
	case *statedict.DTensor:
		return "a DTensor"
	case *statedict.Tensor:
		return "a tensor"
	case *statedict.Dict:
		return fmt.Sprintf("a dict of %d entries", x.Len())
	case *statedict.List:
		return fmt.Sprintf("a list of %d items", len(x.Items))
	case statedict.Tuple:
		return fmt.Sprintf("a tuple of %d items", len(x))
	}
	return fmt.Sprintf("%T", v)
}

// sameKind returns the ranks' values of name as T, all of them: rank 0's is one (what);
// another rank holding something else is refused, naming both files.
func sameKind[T statedict.Value](m *merger, name string, vals []statedict.Value, what string) ([]T, error) {
	out := make([]T, len(vals))
	for i, x := range vals {
		v, ok := x.(T)
		if !ok {
			return nil, m.fail(name, "rank %d's %s holds %s, rank %d's %s %s", m.files[0].rank, m.files[0].path, what, m.files[i].rank, m.files[i].path, kindOf(x))
		}
		out[i] = v
	}
	return out, nil
}

// tensor merges the ranks' copies of one tensor: a DTensor's shards into the whole, a plain
// tensor's equal copies into one.
func (m *merger) tensor(name string, vals []statedict.Value) (statedict.Value, error) {
	if done, ok := m.done[vals[0]]; ok {
		return done, nil
	}
	var out *statedict.Tensor
	var err error
	if _, isD := vals[0].(*statedict.DTensor); isD {
		var ds []*statedict.DTensor
		if ds, err = sameKind[*statedict.DTensor](m, name, vals, "a DTensor"); err == nil {
			out, err = m.dtensor(name, ds)
		}
	} else {
		var ts []*statedict.Tensor
		if ts, err = sameKind[*statedict.Tensor](m, name, vals, "a tensor"); err == nil {
			out, err = m.replicated(name, ts)
		}
	}
	if err != nil {
		return nil, err
	}
	m.done[vals[0]] = out
	return out, nil
}

// replicated checks that every rank saved the same plain tensor and returns rank 0's.
func (m *merger) replicated(name string, ts []*statedict.Tensor) (*statedict.Tensor, error) {
	t0 := ts[0]
	var b0 []byte
	if t0.NBytes() <= maxCompared {
		var err error
		if b0, err = t0.Bytes(); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", m.at(0, t0), name, err)
		}
	}
	for i, t := range ts[1:] {
		if t.DType != t0.DType || !slices.Equal(t.Shape, t0.Shape) {
			return nil, m.fail(name, "%s holds a %s tensor of shape %v, %s one of %s, %v", m.at(0, t0), t0.DType, t0.Shape, m.at(i+1, t), t.DType, t.Shape)
		}
		if b0 != nil {
			b, err := t.Bytes()
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", m.at(i+1, t), name, err)
			}
			if string(b) != string(b0) {
				return nil, m.fail(name, "the ranks saved different values of this plain (not DTensor) tensor: %s and %s differ", m.at(0, t0), m.at(i+1, t))
			}
		}
	}
	return t0, nil
}

// dtensor reassembles a DTensor from the ranks' local shards: the shard of the rank at
// coordinate c of the mesh is the box the placements give c (torch.chunk along each Shard
// dimension, _StridedShard as FSDP2 over tensor parallelism splits); replicas of a box
// (Replicate placements) are read from the lowest rank holding one.
func (m *merger) dtensor(name string, ts []*statedict.DTensor) (*statedict.Tensor, error) {
	d0 := ts[0]
	for _, p := range d0.Placements {
		if strings.HasPrefix(p, "Partial") {
			return nil, fmt.Errorf("%s: %s: %w: a DTensor with placements %v: a Partial placement holds per-rank addends of a pending reduction, not the tensor's data", m.at(0, d0.Local), name, ckpterr.ErrUnsupported, d0.Placements)
		}
	}
	mesh := &runtime.Mesh{}
	for _, a := range d0.Mesh {
		mesh.Axes = append(mesh.Axes, runtime.Axis{Name: a.Name, Size: a.Size})
	}
	s, err := runtime.ParseTorchPlacements(d0.Placements, mesh, len(d0.Shape))
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w: %v", m.at(0, d0.Local), name, ckpterr.ErrUnsupported, err)
	}
	byCoord := map[int]int{} // mesh position → index in ts
	var shards []statedict.Shard
	pieceAt := map[string]int{}
	for i, d := range ts {
		t := d.Local
		if t.DType != d0.Local.DType || !slices.Equal(d.Shape, d0.Shape) || !slices.Equal(d.Placements, d0.Placements) || !slices.Equal(d.Mesh, d0.Mesh) {
			return nil, m.fail(name, "%s holds a %s DTensor of shape %v, placements %v on the mesh %s; %s a %s one of shape %v, placements %v on the mesh %s",
				m.at(0, d0.Local), d0.Local.DType, d0.Shape, d0.Placements, meshString(d0.Mesh), m.at(i, t), t.DType, d.Shape, d.Placements, meshString(d.Mesh))
		}
		if d.Rank != m.files[i].rank {
			return nil, m.fail(name, "%s holds the shard of rank %d, while the file's other DTensors are rank %d's", m.at(i, t), d.Rank, m.files[i].rank)
		}
		pos := mesh.Rank(d.Coord)
		if j, dup := byCoord[pos]; dup && mesh.Size() == len(ts) {
			return nil, m.fail(name, "%s and %s both hold the shard at mesh coordinate %v of the %d-rank mesh %s", m.at(j, ts[j].Local), m.at(i, t), d.Coord, mesh.Size(), meshString(d0.Mesh))
		} else if !dup {
			byCoord[pos] = i
		}
		c, err := s.Chunk(d0.Shape, mesh, pos)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w: %v", m.at(i, t), name, ckpterr.ErrUnsupported, err)
		}
		if !slices.Equal(t.Shape, c.Sizes) {
			return nil, m.fail(name, "%s holds a local shard of shape %v, but the placements %v of the %v tensor give mesh coordinate %v the shard %v at %v",
				m.at(i, t), t.Shape, d0.Placements, d0.Shape, d.Coord, c.Sizes, c.Offsets)
		}
		if c.Empty() {
			continue // nothing stored; the tiling check below counts its rank
		}
		key := fmt.Sprint(c.Offsets, c.Sizes)
		if j, ok := pieceAt[key]; ok {
			shards[j].Ranks = append(shards[j].Ranks, d.Rank)
			continue
		}
		pieceAt[key] = len(shards)
		shards = append(shards, statedict.Shard{Piece: statedict.Piece{Offsets: c.Offsets, Sizes: c.Sizes, Ranks: []int{d.Rank}}, Local: t})
	}
	if len(byCoord) != mesh.Size() {
		var lack []string
		for pos := range mesh.Size() {
			if _, ok := byCoord[pos]; !ok {
				lack = append(lack, fmt.Sprint(mesh.Coord(pos)))
			}
		}
		return nil, m.fail(name, "no rank holds the shard at mesh coordinate %s of the mesh %s", strings.Join(lack, ", "), meshString(d0.Mesh))
	}
	pieces := make([]statedict.Piece, len(shards))
	held := 0
	for i, sh := range shards {
		pieces[i] = sh.Piece
		held += len(sh.Ranks)
	}
	if n := len(ts) - held; n > 0 { // the ranks holding empty shards
		pieces = append(pieces, statedict.Piece{Offsets: slices.Clone(d0.Shape), Sizes: make([]int64, len(d0.Shape)), Ranks: emptyRanks(ts, shards)})
	}
	whole := &statedict.Tensor{DType: d0.Local.DType, Shape: d0.Shape}
	if err := (&statedict.TensorSharding{Pieces: pieces}).Check(whole, len(ts)); err != nil {
		return nil, m.fail(name, "the shards of the placements %v on the mesh %s do not tile the %v tensor: %v", d0.Placements, meshString(d0.Mesh), d0.Shape, err)
	}
	out, err := assemble(m.dir, name, d0.Local.DType, d0.Shape, shards)
	if err != nil {
		return nil, m.fail(name, "%v", err)
	}
	out.RequiresGrad = d0.Local.RequiresGrad
	m.ck.Shards[out] = shards
	return out, nil
}

// emptyRanks lists the ranks of ts that hold no piece of shards.
func emptyRanks(ts []*statedict.DTensor, shards []statedict.Shard) []int {
	var out []int
	for _, t := range ts {
		if !slices.ContainsFunc(shards, func(s statedict.Shard) bool { return slices.Contains(s.Ranks, t.Rank) }) {
			out = append(out, t.Rank)
		}
	}
	return out
}

// openDTensorFolderOf reads the folder of the rank file path (a torch.save file holding
// DTensor shards) as the whole checkpoint, or says which ranks' files it lacks.
func openDTensorFolderOf(ctx context.Context, path string) (*statedict.Checkpoint, error) {
	dir := storage.Dir(path)
	ck, err := openDTensorFiles(ctx, dir, torchFiles(ctx, dir))
	if err != nil {
		return nil, fmt.Errorf("%s holds one rank's DTensor shards and reads as its folder's checkpoint: %w", path, err)
	}
	return ck, nil
}
