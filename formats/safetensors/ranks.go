package safetensors

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// ShardingFile is the sharding manifest of a per-device safetensors folder (WriteRanks).
const ShardingFile = "sharding.json"

// ShardingFormat is the Format field of every sharding manifest.
const ShardingFormat = "ckpt-sharded-safetensors"

// RankKey and WorldSizeKey are the __metadata__ entries of a rank file saying whose it is.
const (
	RankKey      = "rank"
	WorldSizeKey = "world_size"
)

// RankFile is the file of rank r of n in a per-device folder: rank-00003-of-00008.safetensors.
func RankFile(r, n int) string { return fmt.Sprintf("rank-%05d-of-%05d.safetensors", r, n) }

// Sharding is sharding.json, the manifest of a per-device safetensors folder: each rank's
// file holds that rank's local piece of every tensor under the tensor's name, so a process
// loads its own file (safetensors.torch.load_file) and wraps each tensor with
// DTensor.from_local(local, mesh, placements, shape=shape, stride=contiguous strides) — or
// reassembles the whole tensor from the pieces. Schema (version 1):
//
//	{"format": "ckpt-sharded-safetensors", "version": 1,
//	 "world_size": 8,                                    // ranks, one file each
//	 "mesh": [{"name": "fsdp", "size": 8}],              // DeviceMesh axes, outermost first
//	 "files": ["rank-00000-of-00008.safetensors", …],    // files[r] is rank r's
//	 "tensors": [{"name": "model.embed_tokens.weight",
//	              "dtype": "BF16",                       // safetensors dtype
//	              "shape": [32000, 2048],                // global shape, as torch has it
//	              "placements": ["Shard(dim=0)"],        // DTensor placements, per mesh axis
//	              "pieces": [{"offsets": [0, 0], "sizes": [4000, 2048], "ranks": [0]}, …]}]}
//
// Each rank file's __metadata__ says whose it is: "rank" and "world_size".
//
// pieces are the distinct local boxes (global offsets and sizes, as DTensor's
// compute_local_shape_and_global_offset reports them; an empty one sits at the dimension's
// size) with the ranks holding each; they tile the tensor. A replicated tensor has one piece
// held by every rank, and is in every file. Non-tensor values are not kept.
type Sharding struct {
	Format    string               `json:"format"`
	Version   int                  `json:"version"`
	WorldSize int                  `json:"world_size"`
	Mesh      []statedict.MeshAxis `json:"mesh"`
	Files     []string             `json:"files"`
	Tensors   []ShardedTensor      `json:"tensors,omitempty"`
}

// ShardedTensor is one tensor of a sharding manifest.
type ShardedTensor struct {
	Name       string            `json:"name"`
	DType      string            `json:"dtype"`
	Shape      []int64           `json:"shape"`
	Placements []string          `json:"placements"`
	Pieces     []statedict.Piece `json:"pieces"`
}

// WriteRanks is the statedict.Writer of per-device safetensors folders: with
// opts.Sharding, file RankFile(r) holds rank r's piece of every tensor of ck (flattened and
// de-duplicated as Flatten does), and ShardingFile describes the layout (see Sharding).
// With opts.Ranks only those ranks' files are written; FinishRanks writes the manifest.
// A piece several ranks hold is hashed (opts.Sum) where it is first written.
func WriteRanks(out statedict.Output, ck *statedict.Checkpoint, opts statedict.WriteOptions) (*statedict.Written, error) {
	sh := opts.Sharding
	if sh == nil {
		return nil, fmt.Errorf("a per-device safetensors output needs a sharding")
	}
	flat, err := Flatten(ck.Root)
	if err != nil {
		return nil, err
	}
	ranks := opts.Ranks
	if ranks == nil {
		for r := range sh.Ranks {
			ranks = append(ranks, r)
		}
	}
	ranks = slices.Clone(ranks)
	slices.Sort(ranks)
	for i, r := range ranks {
		if r < 0 || r >= sh.Ranks || i > 0 && ranks[i-1] == r {
			return nil, fmt.Errorf("ranks %v: each one of the %d ranks at most once", opts.Ranks, sh.Ranks)
		}
	}
	pieces := make([]*statedict.TensorSharding, len(flat.Tensors))
	for i, nt := range flat.Tensors {
		pieces[i] = sh.Of(nt.Tensor)
		if err := pieces[i].Check(nt.Tensor, sh.Ranks); err != nil {
			return nil, fmt.Errorf("%s: sharding: %w", nt.Name, err)
		}
	}
	first := firstWriters(flat.Tensors, pieces, ranks)
	sums := map[*statedict.Tensor]hash.Hash{}
	w := &statedict.Written{Names: flat.Names(), Tied: flat.Tied, NotWritten: flat.NotWritten}
	for _, r := range ranks {
		local := make([]statedict.NamedTensor, len(flat.Tensors))
		hashes := map[*statedict.Tensor]hash.Hash{}
		for i, nt := range flat.Tensors {
			j := slices.IndexFunc(pieces[i].Pieces, func(p statedict.Piece) bool { return slices.Contains(p.Ranks, r) })
			pc := pieces[i].Pieces[j]
			view, err := nt.Tensor.Box(pc.Offsets, pc.Sizes)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", nt.Name, err)
			}
			local[i] = statedict.NamedTensor{Name: nt.Name, Tensor: view}
			f := first[i]
			if opts.Sum == nil || f.rank[j] != r || pc.Empty() {
				continue
			}
			t := nt.Tensor
			switch {
			case !f.inOrder:
				hashes[view] = opts.Sum(view)
			case sums[t] == nil:
				sums[t] = opts.Sum(t)
				hashes[view] = sums[t]
			default:
				hashes[view] = sums[t]
			}
		}
		name := RankFile(r, sh.Ranks)
		f, err := out.Create(name)
		if err != nil {
			return nil, err
		}
		md := flat.Metadata(local, opts.Metadata)
		md[RankKey], md[WorldSizeKey] = strconv.Itoa(r), strconv.Itoa(sh.Ranks)
		n, err := WriteFile(f, local, md, func(key any) hash.Hash { return hashes[key.(*statedict.Tensor)] })
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		w.Files = append(w.Files, name)
		w.Bytes += n
	}
	if opts.Ranks != nil {
		w.Part, err = json.Marshal(struct {
			Ranks []int `json:"ranks"`
		}{ranks})
		return w, err
	}
	if err := finishRanks(out, ck, opts, flat, pieces, w); err != nil {
		return nil, err
	}
	return w, nil
}

// writers says, for each piece of a tensor, which of the ranks being written writes it first
// (-1: none), and whether those first writes go through the tensor in its row-major order.
type writers struct {
	rank    []int
	inOrder bool
}

func firstWriters(tensors []statedict.NamedTensor, pieces []*statedict.TensorSharding, ranks []int) []writers {
	out := make([]writers, len(tensors))
	for i, nt := range tensors {
		ps := pieces[i].Pieces
		w := writers{rank: make([]int, len(ps)), inOrder: true}
		order := make([]int, 0, len(ps))
		for j, p := range ps {
			w.rank[j] = -1
			for _, r := range ranks {
				if slices.Contains(p.Ranks, r) {
					w.rank[j] = r
					break
				}
			}
			if w.rank[j] < 0 {
				w.inOrder = false
			}
			order = append(order, j)
		}
		slices.SortStableFunc(order, func(a, b int) int { return w.rank[a] - w.rank[b] })
		var next int64
		for _, j := range order {
			start, n, ok := ps[j].Run(nt.Tensor.Shape)
			if !ok || n > 0 && start != next {
				w.inOrder = false
				break
			}
			next += n
		}
		out[i] = w
	}
	return out
}

// FinishRanks is the statedict.Finisher of per-device safetensors folders: the files are
// self-contained, so it checks that the parts cover every rank once and writes the
// sharding manifest.
func FinishRanks(out statedict.Output, ck *statedict.Checkpoint, opts statedict.WriteOptions, parts [][]byte) (*statedict.Written, error) {
	sh := opts.Sharding
	if sh == nil {
		return nil, fmt.Errorf("a per-device safetensors output needs a sharding")
	}
	flat, err := Flatten(ck.Root)
	if err != nil {
		return nil, err
	}
	wrote := make([]bool, sh.Ranks)
	for i, b := range parts {
		var pt struct {
			Ranks []int `json:"ranks"`
		}
		if err := json.Unmarshal(b, &pt); err != nil {
			return nil, fmt.Errorf("part %d: %w", i, err)
		}
		for _, r := range pt.Ranks {
			if r < 0 || r >= sh.Ranks || wrote[r] {
				return nil, fmt.Errorf("part %d: rank %d is not one of the %d ranks, or in two parts", i, r, sh.Ranks)
			}
			wrote[r] = true
		}
	}
	if i := slices.Index(wrote, false); i >= 0 {
		return nil, fmt.Errorf("no part holds rank %d's file %s", i, RankFile(i, sh.Ranks))
	}
	pieces := make([]*statedict.TensorSharding, len(flat.Tensors))
	for i, nt := range flat.Tensors {
		pieces[i] = sh.Of(nt.Tensor)
	}
	w := &statedict.Written{Names: flat.Names(), Tied: flat.Tied, NotWritten: flat.NotWritten}
	for r := range sh.Ranks {
		w.Files = append(w.Files, RankFile(r, sh.Ranks))
	}
	if err := finishRanks(out, ck, opts, flat, pieces, w); err != nil {
		return nil, err
	}
	return w, nil
}

// finishRanks completes a per-device folder, adding its files to w: the sharding manifest,
// then ck's extra files (config.json, generation_config.json, tokenizer files, …: a
// process loading its rank's file builds the model from them), as the DCP layout does.
func finishRanks(out statedict.Output, ck *statedict.Checkpoint, opts statedict.WriteOptions, flat *Flat, pieces []*statedict.TensorSharding, w *statedict.Written) error {
	man, err := writeSharding(out, flat, pieces, opts.Sharding)
	if err != nil {
		return err
	}
	extras, err := statedict.CopyFiles(out, ck, opts.Rewrite)
	if err != nil {
		return err
	}
	w.Files = append(append(w.Files, man), extras...)
	return nil
}

// writeSharding writes the sharding manifest.
func writeSharding(out statedict.Output, flat *Flat, pieces []*statedict.TensorSharding, sh *statedict.Sharding) (string, error) {
	m := Sharding{Format: ShardingFormat, Version: 1, WorldSize: sh.Ranks, Mesh: sh.Mesh, Tensors: []ShardedTensor{}}
	if m.Mesh == nil {
		m.Mesh = []statedict.MeshAxis{}
	}
	for r := range sh.Ranks {
		m.Files = append(m.Files, RankFile(r, sh.Ranks))
	}
	for i, nt := range flat.Tensors {
		info, err := TensorInfoFor(nt.Name, nt.Tensor)
		if err != nil {
			return "", err
		}
		pl := pieces[i].Placements
		if pl == nil {
			pl = make([]string, len(sh.Mesh))
			for a := range pl {
				pl[a] = "Replicate()"
			}
		}
		m.Tensors = append(m.Tensors, ShardedTensor{Name: nt.Name, DType: info.DType, Shape: nt.Tensor.Shape, Placements: pl, Pieces: pieces[i].Pieces})
	}
	b, err := marshalSharding(&m)
	if err != nil {
		return "", err
	}
	f, err := out.Create(ShardingFile)
	if err != nil {
		return "", err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return ShardingFile, err
}

// marshalSharding writes a manifest as indented JSON with one tensor per line, so that
// it stays readable (and diffable) for models of thousands of tensors.
func marshalSharding(m *Sharding) ([]byte, error) {
	head := *m
	head.Tensors = nil
	b, err := json.MarshalIndent(head, "", " ")
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Write(b[:len(b)-2]) // up to the closing brace, without "\n}"
	out.WriteString(",\n \"tensors\": [")
	for i, t := range m.Tensors {
		tb, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteString(",")
		}
		out.WriteString("\n  ")
		out.Write(tb)
	}
	out.WriteString("\n ]\n}")
	return out.Bytes(), nil
}

// MaxShardingFile bounds a sharding manifest: a few hundred bytes per tensor and rank.
const MaxShardingFile = 256 << 20

// maxRanks bounds a world: more processes than any TPU pod has devices.
const maxRanks = 1 << 16

// ReadSharding reads and checks the sharding manifest of the per-device folder dir: its
// format and version, a world of one file per rank, each a file of the folder, and a mesh
// of that many ranks. The tensors' pieces are the reader's to check against the files. A
// folder without one gives an error matching fs.ErrNotExist.
func ReadSharding(ctx context.Context, dir string) (*Sharding, error) {
	mpath := storage.Join(dir, ShardingFile)
	b, err := storage.ReadFile(ctx, mpath, MaxShardingFile+1)
	if err != nil {
		return nil, err
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w: %s", mpath, ckpterr.ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if len(b) > MaxShardingFile {
		return nil, fail("larger than %d bytes", MaxShardingFile)
	}
	var m Sharding
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fail("%v", err)
	}
	if m.Format != ShardingFormat || m.Version != 1 {
		return nil, fmt.Errorf("%s: %w: format %q version %d (ckpt reads %s version 1)", mpath, ckpterr.ErrUnsupported, m.Format, m.Version, ShardingFormat)
	}
	if m.WorldSize < 1 || m.WorldSize > maxRanks || len(m.Files) != m.WorldSize {
		return nil, fail("%d files for a world of %d ranks", len(m.Files), m.WorldSize)
	}
	for r, name := range m.Files {
		if !filepath.IsLocal(name) || filepath.Base(name) != name {
			return nil, fail("rank %d's file %q is not a file of the folder", r, name)
		}
	}
	size := 1
	for _, a := range m.Mesh {
		if a.Size < 1 || a.Size > maxRanks {
			return nil, fail("mesh axis %q of size %d", a.Name, a.Size)
		}
		if size *= a.Size; size > maxRanks {
			return nil, fail("a mesh of more than %d ranks", maxRanks)
		}
	}
	if size != m.WorldSize {
		return nil, fail("the mesh has %d ranks, the world %d", size, m.WorldSize)
	}
	return &m, nil
}
