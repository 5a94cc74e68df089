package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// replica is a copy of a piece of a tensor in one rank's file, paired with the box of the
// expected tensor it must equal.
type replica struct {
	name    string
	rank    int
	offsets []int64
	e, d    *statedict.Tensor
}

// replicas lists the copies of pieces that formats.Open does not read for the per-device
// output at dir — every rank's copy but the first — paired with the boxes of the expected
// tensors (by destination name) they must equal. It opens the rank files it needs;
// release closes them. A folder without a sharding manifest has none.
func replicas(ctx context.Context, dir string, expected func(name string) *statedict.Tensor) (out []replica, release func(), err error) {
	release = func() {}
	if st, err := storage.Stat(ctx, dir); err != nil || !st.IsDir() {
		return nil, release, nil
	}
	m, err := safetensors.ReadSharding(ctx, dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, release, nil
		}
		return nil, release, err
	}
	// Every rank's file holds that rank's piece of every tensor, so a piece several ranks
	// hold (replicated over a mesh axis) is stored once per rank. formats.Open reassembles
	// each tensor from the first copy of each piece; the others are what the other devices
	// load, and are checked here against the same expected values.
	opened := map[int]map[string]*statedict.Tensor{}
	var cks []io.Closer
	release = func() {
		for _, c := range cks {
			c.Close()
		}
	}
	file := func(r int) (map[string]*statedict.Tensor, error) {
		if ts, ok := opened[r]; ok {
			return ts, nil
		}
		if r < 0 || r >= len(m.Files) || !filepath.IsLocal(m.Files[r]) {
			return nil, fmt.Errorf("%s: %w: rank %d's file", storage.Join(dir, safetensors.ShardingFile), ckpterr.ErrCorrupt, r)
		}
		ck, err := formats.Open(ctx, storage.Join(dir, m.Files[r]))
		if err != nil {
			return nil, err
		}
		cks = append(cks, ck)
		nts, err := ck.Tensors()
		if err != nil {
			return nil, err
		}
		ts := map[string]*statedict.Tensor{}
		for _, nt := range nts {
			ts[nt.Name] = nt.Tensor
		}
		opened[r] = ts
		return ts, nil
	}
	for _, t := range m.Tensors {
		e := expected(t.Name)
		if e == nil {
			continue // not paired: reported already
		}
		for _, p := range t.Pieces {
			if len(p.Ranks) < 2 || len(p.Offsets) != len(e.Shape) || len(p.Sizes) != len(e.Shape) {
				continue
			}
			box, err := boxOf(e, p.Offsets, p.Sizes)
			if err != nil {
				return nil, release, fmt.Errorf("%s: piece at %v: %w", t.Name, p.Offsets, err)
			}
			if box.NumEl() == 0 {
				continue
			}
			for _, r := range p.Ranks[1:] {
				ts, err := file(r)
				if err != nil {
					return nil, release, err
				}
				d := ts[t.Name]
				if d == nil {
					return nil, release, fmt.Errorf("%s: %w: %s does not hold rank %d's piece of %s", dir, ckpterr.ErrCorrupt, m.Files[r], r, t.Name)
				}
				out = append(out, replica{name: t.Name, rank: r, offsets: p.Offsets, e: box, d: d})
			}
		}
	}
	return out, release, nil
}

// holder names the stored piece of a per-device output's tensor holding the element at
// index, the copy reassembling the tensor reads — "rank 3's piece at [0 8]" — or "" when
// the tensor is not stored as pieces of a per-device output (statedict.Checkpoint.Shards).
func holder(shards []statedict.Shard, index []int64) string {
	for _, s := range shards {
		if s.Empty() || len(s.Offsets) != len(index) || len(s.Ranks) == 0 {
			continue
		}
		in := true
		for d, i := range index {
			in = in && i >= s.Offsets[d] && i < s.Offsets[d]+s.Sizes[d]
		}
		if !in {
			continue
		}
		return fmt.Sprintf("rank %d's piece at %v", s.Ranks[0], s.Offsets)
	}
	return ""
}

// boxOf is the view of t's elements [offsets, offsets+sizes).
func boxOf(t *statedict.Tensor, offsets, sizes []int64) (*statedict.Tensor, error) {
	b := *t
	b.Shape = sizes
	for i := range offsets {
		if offsets[i] < 0 || sizes[i] < 0 || offsets[i]+sizes[i] > t.Shape[i] {
			return nil, fmt.Errorf("box %v+%v outside shape %v", offsets, sizes, t.Shape)
		}
		if sizes[i] > 0 {
			b.Offset += offsets[i] * t.Strides[i]
		}
	}
	if t.DType.ValuesPerByte() > 1 && !b.IsContiguous() {
		return nil, fmt.Errorf("a piece of a packed %s tensor", t.DType)
	}
	return &b, b.Validate()
}
