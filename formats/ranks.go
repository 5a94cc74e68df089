package formats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// openRanks reads a per-device safetensors folder (safetensors.Sharding): every tensor is
// reassembled lazily from its pieces, each read from the first rank file holding it, so
// reading the folder never holds a whole tensor in memory; the pieces read are the
// checkpoint's Shards. Each rank file must hold exactly its rank's piece of every tensor the
// manifest lists, as the manifest says.
func openRanks(ctx context.Context, dir string) (_ *statedict.Checkpoint, err error) {
	m, err := safetensors.ReadSharding(ctx, dir)
	if err != nil {
		return nil, err
	}
	mpath := storage.Join(dir, safetensors.ShardingFile)
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w: %s", mpath, ckpterr.ErrCorrupt, fmt.Sprintf(format, args...))
	}
	ck := &statedict.Checkpoint{Format: string(SafetensorsRanks), Path: dir}
	defer func() {
		if err != nil {
			ck.Close()
		}
	}()
	// The rank files, opened when a piece is first read from them.
	files := make([]*statedict.Dict, m.WorldSize)
	rankFile := func(r int) (*statedict.Dict, error) {
		if files[r] != nil {
			return files[r], nil
		}
		path := storage.Join(dir, m.Files[r])
		if err := checkRank(ctx, path, r, m.WorldSize); err != nil {
			return nil, err
		}
		c, err := safetensors.Open(ctx, path)
		if err != nil {
			return nil, err
		}
		ck.Closers = append(ck.Closers, c.Closers...)
		files[r] = c.Root.(*statedict.Dict)
		return files[r], nil
	}
	mesh := &runtime.Mesh{}
	for _, a := range m.Mesh {
		mesh.Axes = append(mesh.Axes, runtime.Axis{Name: a.Name, Size: a.Size})
	}
	root := statedict.NewDict("")
	ck.Shards = map[*statedict.Tensor][]statedict.Shard{}
	for _, st := range m.Tensors {
		dtype, ok := statedict.DTypeForSafetensors(st.DType)
		if !ok {
			return nil, fail("tensor %q: dtype %q", st.Name, st.DType)
		}
		x := &statedict.Tensor{DType: dtype, Shape: st.Shape}
		ts := &statedict.TensorSharding{Pieces: st.Pieces}
		if err := ts.Check(x, m.WorldSize); err != nil {
			return nil, fail("tensor %q: %v", st.Name, err)
		}
		if err := placed(st, mesh); err != nil {
			return nil, fail("tensor %q: %v", st.Name, err)
		}
		var shards []statedict.Shard
		for _, p := range st.Pieces {
			if p.Empty() {
				continue
			}
			r := p.Ranks[0]
			d, err := rankFile(r)
			if err != nil {
				return nil, err
			}
			v, ok := d.Get(st.Name)
			t, isT := v.(*statedict.Tensor)
			if !ok || !isT || t.DType != dtype || !slices.Equal(t.Shape, p.Sizes) {
				return nil, fail("tensor %q: %s does not hold rank %d's %v piece of it", st.Name, m.Files[r], r, p.Sizes)
			}
			shards = append(shards, statedict.Shard{Piece: p, Local: t})
		}
		t, err := assemble(dir, st.Name, dtype, st.Shape, shards)
		if err != nil {
			return nil, fail("tensor %q: %v", st.Name, err)
		}
		if _, dup := root.Get(st.Name); dup {
			return nil, fail("tensor %q listed twice", st.Name)
		}
		root.Set(st.Name, t)
		ck.Shards[t] = shards
	}
	ck.Root = root
	return ck, nil
}

// assemble is the tensor of shape shape that the stored pieces shards tile, read lazily
// from them: the one piece itself when it is the whole tensor, an empty tensor when no
// piece holds an element, else the pieces' chunked reader (dcp.Chunked).
func assemble(dir, name string, dtype statedict.DType, shape []int64, shards []statedict.Shard) (*statedict.Tensor, error) {
	var chunks []dcp.Chunk
	for _, s := range shards {
		if !s.Empty() {
			chunks = append(chunks, dcp.Chunk{Offsets: s.Offsets, Tensor: s.Local})
		}
	}
	switch {
	case len(chunks) == 1 && slices.Equal(chunks[0].Tensor.Shape, shape):
		return chunks[0].Tensor, nil
	case len(chunks) == 0: // no elements
		return &statedict.Tensor{DType: dtype, Shape: shape, Strides: statedict.ContiguousStrides(shape),
			Storage: statedict.NewMappedStorage(name, "cpu", dtype, []byte{})}, nil
	}
	asm, err := dcp.NewChunked(dtype, shape, chunks)
	if err != nil {
		return nil, err
	}
	t := asm.Tensor(name)
	t.Storage.File = dir
	return t, nil
}

// checkRank checks that the rank file at path says it is rank r's of a world of n.
func checkRank(ctx context.Context, path string, r, n int) error {
	f, err := storage.Open(ctx, path)
	if err != nil {
		return err
	}
	defer f.Close()
	h, err := safetensors.ReadHeader(f, f.Size())
	if err != nil {
		return err
	}
	if got, want := h.Metadata[safetensors.RankKey]+"/"+h.Metadata[safetensors.WorldSizeKey], fmt.Sprintf("%d/%d", r, n); got != want {
		return fmt.Errorf("%s: %w: the file of rank %d of %d says it is rank %q", path, ckpterr.ErrCorrupt, r, n, got)
	}
	return nil
}

// isRanksFolder reports whether dir is a per-device safetensors folder.
func isRanksFolder(ctx context.Context, dir string) bool {
	_, err := storage.Stat(ctx, storage.Join(dir, safetensors.ShardingFile))
	return !errors.Is(err, os.ErrNotExist)
}

// placed checks that a tensor's pieces are the ones its placements give on the mesh: what
// each rank loads with DTensor.from_local(local, mesh, placements) lies where the pieces say.
// A manifest whose pieces tile the tensor but whose placements or mesh disagree would
// reassemble correctly here and place shards wrongly on the devices.
func placed(st safetensors.ShardedTensor, mesh *runtime.Mesh) error {
	s, err := runtime.ParseTorchPlacements(st.Placements, mesh, len(st.Shape))
	if err != nil {
		return err
	}
	for _, p := range st.Pieces {
		for _, r := range p.Ranks {
			c, err := s.Chunk(st.Shape, mesh, r)
			if err != nil {
				return err
			}
			if !slices.Equal(c.Offsets, p.Offsets) || !slices.Equal(c.Sizes, p.Sizes) {
				return fmt.Errorf("rank %d holds the piece at %v of size %v, but its placements %v on the mesh %s put it at %v, size %v",
					r, p.Offsets, p.Sizes, st.Placements, mesh, c.Offsets, c.Sizes)
			}
		}
	}
	return nil
}
