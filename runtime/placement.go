package runtime

import (
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
)

// Placement is how a tensor lies along one mesh axis, as DTensor's placements say it:
// Replicate() — every rank along the axis holds the same data — or Shard(dim) — the
// tensor's dimension dim is split across the axis with torch.chunk, rank i holding chunk i
// (empty when torch.chunk makes fewer chunks than ranks).
type Placement struct {
	// Shard is false for Replicate.
	Shard bool
	// Dim is the sharded tensor dimension; negative counts from the end, as in Shard(-1).
	Dim int
}

// Replicate is the Replicate() placement.
var Replicate = Placement{}

// Shard returns the Shard(dim) placement.
func Shard(dim int) Placement { return Placement{Shard: true, Dim: dim} }

// String writes the placement as torch's repr does: "Shard(dim=0)", "Replicate()".
func (p Placement) String() string {
	if p.Shard {
		return "Shard(dim=" + strconv.Itoa(p.Dim) + ")"
	}
	return "Replicate()"
}

// ParsePlacement reads a placement as torch prints it — "Shard(dim=0)", "Shard(0)", "S(0)",
// "Replicate()", "R" — case-insensitively.
func ParsePlacement(s string) (Placement, error) {
	t := strings.ToLower(strings.ReplaceAll(s, " ", ""))
	switch t {
	case "replicate()", "replicate", "r":
		return Replicate, nil
	}
	for _, pre := range []string{"shard(dim=", "shard(", "s("} {
		if arg, ok := strings.CutPrefix(t, pre); ok {
			if arg, ok = strings.CutSuffix(arg, ")"); ok {
				if d, err := strconv.Atoi(arg); err == nil && d > -64 && d < 64 {
					return Shard(d), nil
				}
			}
			break
		}
	}
	return Placement{}, fmt.Errorf("placement %q: want Shard(DIM) or Replicate()", s)
}

// MarshalText writes String.
func (p Placement) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads what ParsePlacement reads.
func (p *Placement) UnmarshalText(b []byte) error {
	q, err := ParsePlacement(string(b))
	*p = q
	return err
}

// Sharding is a tensor's layout on a mesh: one placement per mesh axis (DTensor's
// placements), and the order in which the axes' shards split the tensor.
//
// DTensor splits left to right: with (Shard(0), Shard(0)) on mesh (a, b), axis a cuts the
// tensor and axis b cuts each piece. FSDP2 applied on top of tensor (or expert) parallelism
// does it the other way round — it chunks each rank's TP shard — which DTensor writes as
// _StridedShard(0, split_factor=tp) on the fsdp axis. Order says that directly: the mesh
// axes in the order their shards apply (nil: left to right). For splits that divide evenly
// the offsets equal DTensor's _StridedShard ones (testdata/runtime); for uneven ones torch
// 2.14's _StridedShard metadata disagrees with the chunks FSDP2 holds, and Sharding follows
// the chunks.
type Sharding struct {
	Placements []Placement `json:"placements"`
	Order      []int       `json:"order,omitempty"`
}

// String writes "(Shard(dim=0), Replicate())", with the order when it is not left to right.
func (s Sharding) String() string {
	p := make([]string, len(s.Placements))
	for i, x := range s.Placements {
		p[i] = x.String()
	}
	out := "(" + strings.Join(p, ", ") + ")"
	if s.Order != nil {
		out += fmt.Sprintf(" order %v", s.Order)
	}
	return out
}

// Replicated reports whether every rank holds the whole tensor.
func (s Sharding) Replicated() bool {
	return !slices.ContainsFunc(s.Placements, func(p Placement) bool { return p.Shard })
}

// Check validates s for a tensor of rank ndim on mesh m: one placement per axis, shard
// dimensions within the tensor, Order a permutation of the axes.
func (s Sharding) Check(ndim int, m *Mesh) error {
	if len(s.Placements) != m.NDim() {
		return fmt.Errorf("%d placements for a %d-axis mesh", len(s.Placements), m.NDim())
	}
	for i, p := range s.Placements {
		if p.Shard && (p.Dim >= ndim || p.Dim < -ndim) {
			return fmt.Errorf("%s on mesh axis %s: the tensor has %d dimensions", p, m.Axes[i].Name, ndim)
		}
	}
	if s.Order != nil {
		if len(s.Order) != m.NDim() {
			return fmt.Errorf("order %v does not list the %d mesh axes", s.Order, m.NDim())
		}
		seen := make([]bool, m.NDim())
		for _, a := range s.Order {
			if a < 0 || a >= m.NDim() || seen[a] {
				return fmt.Errorf("order %v is not a permutation of the mesh axes", s.Order)
			}
			seen[a] = true
		}
	}
	return nil
}

// Chunk is the box of a tensor one rank holds: per dimension the offset of its first element
// in the global tensor and its extent. Offsets and sizes are what
// torch.distributed.tensor._utils.compute_local_shape_and_global_offset returns and DCP saves
// as ChunkStorageMetadata: an empty shard (size 0 on a dimension) reports that dimension's
// global size as its offset.
type Chunk struct {
	Offsets []int64 `json:"offsets"`
	Sizes   []int64 `json:"sizes"`
}

// NumEl is the number of elements in the chunk.
func (c Chunk) NumEl() int64 {
	n := int64(1)
	for _, s := range c.Sizes {
		n *= s
	}
	return n
}

// Empty reports whether the chunk holds nothing.
func (c Chunk) Empty() bool { return slices.Contains(c.Sizes, 0) }

func (c Chunk) key() string { return fmt.Sprint(c.Offsets, c.Sizes) }

// ShardSizeOffset is how torch.chunk — and DTensor's Shard — splits a dimension of n
// elements into k pieces: piece i has size and offset as returned. Pieces are
// ceil(n/k) long; the last non-empty one is shorter when k does not divide n, and the
// trailing ones are empty (torch.chunk returns fewer than k chunks; DTensor pads the list
// with empty shards at offset n): 5 over 4 is 2, 2, 1, 0.
func ShardSizeOffset(n int64, k, i int) (size, offset int64) {
	if n%int64(k) == 0 {
		c := n / int64(k)
		return c, c * int64(i)
	}
	c := (n + int64(k) - 1) / int64(k)
	start := c * int64(i)
	end := min(n, start+c)
	return max(0, end-start), min(n, start)
}

// Chunk is the chunk of a tensor of shape shape that rank holds under s on mesh m.
func (s Sharding) Chunk(shape []int64, m *Mesh, rank int) (Chunk, error) {
	if err := s.Check(len(shape), m); err != nil {
		return Chunk{}, err
	}
	if rank < 0 || rank >= m.Size() {
		return Chunk{}, fmt.Errorf("rank %d is not in the %d-rank mesh %s", rank, m.Size(), m)
	}
	return s.chunk(shape, m, m.Coord(rank)), nil
}

// localSizes writes the sizes of the chunk at coordinate coord of a validated sharding
// into sizes (len(shape) long) without computing offsets or allocating.
func (s Sharding) localSizes(shape []int64, m *Mesh, coord []int, sizes []int64) {
	copy(sizes, shape)
	for i := range s.Placements {
		axis := i
		if s.Order != nil {
			axis = s.Order[i]
		}
		if p := s.Placements[axis]; p.Shard {
			d := p.Dim
			if d < 0 {
				d += len(shape)
			}
			sizes[d], _ = ShardSizeOffset(sizes[d], m.Axes[axis].Size, coord[axis])
		}
	}
}

// chunk computes the chunk at coordinate coord of a validated sharding.
func (s Sharding) chunk(shape []int64, m *Mesh, coord []int) Chunk {
	c := Chunk{Offsets: make([]int64, len(shape)), Sizes: slices.Clone(shape)}
	empty := make([]bool, len(shape))
	for i := range s.Placements {
		axis := i
		if s.Order != nil {
			axis = s.Order[i]
		}
		p := s.Placements[axis]
		if !p.Shard {
			continue
		}
		d := p.Dim
		if d < 0 {
			d += len(shape)
		}
		size, off := ShardSizeOffset(c.Sizes[d], m.Axes[axis].Size, coord[axis])
		c.Sizes[d] = size
		c.Offsets[d] += off
		if size == 0 {
			empty[d] = true
		}
	}
	for d, e := range empty {
		if e {
			c.Offsets[d] = shape[d]
		}
	}
	return c
}

// Replica is a distinct chunk of a tensor with the ranks that hold it (in rank order).
// DCP writes each distinct chunk once, from one of its holders.
type Replica struct {
	Chunk
	Ranks []int `json:"ranks"`
}

// Chunks lists the distinct chunks of a tensor of shape shape under s on mesh m, in the
// order of their first holder, with every rank holding each. Empty chunks are included:
// DTensor reports them and DCP records them.
func (s Sharding) Chunks(shape []int64, m *Mesh) ([]Replica, error) {
	if err := s.Check(len(shape), m); err != nil {
		return nil, err
	}
	var out []Replica
	at := map[string]int{}
	for r := range m.Size() {
		c := s.chunk(shape, m, m.Coord(r))
		k := c.key()
		if i, ok := at[k]; ok {
			out[i].Ranks = append(out[i].Ranks, r)
			continue
		}
		at[k] = len(out)
		out = append(out, Replica{c, []int{r}})
	}
	return out, nil
}

// ByteRange is a run of bytes in a source storage.
type ByteRange struct {
	Offset, Length int64
}

// ByteRanges yields the runs of source bytes holding chunk c of a tensor viewing a storage
// with shape, strides and storage offset (in elements, as statedict.Tensor has them) and
// elements of elemSize bytes, in the chunk's row-major order, adjacent runs merged: what a
// writer reads from the source to produce the chunk, and nothing else. A contiguous tensor
// sharded on its first dimension yields one run.
func (c Chunk) ByteRanges(shape, strides []int64, offset, elemSize int64) iter.Seq[ByteRange] {
	return func(yield func(ByteRange) bool) {
		if c.Empty() {
			return
		}
		n := len(shape)
		if n == 0 {
			yield(ByteRange{offset * elemSize, elemSize})
			return
		}
		// Dimensions k.. form one run of elements when the chunk covers dims k+1.. whole and
		// they are laid out contiguously; dims before k are iterated.
		k, run := n, int64(1)
		if strides[n-1] == 1 {
			k, run = n-1, c.Sizes[n-1]
			for k > 0 && c.Sizes[k] == shape[k] && strides[k-1] == strides[k]*shape[k] {
				k--
				run *= c.Sizes[k]
			}
		}
		idx := slices.Clone(c.Offsets[:k])
		var cur ByteRange
		for {
			off := offset
			for d := 0; d < k; d++ {
				off += idx[d] * strides[d]
			}
			for d := k; d < n; d++ {
				off += c.Offsets[d] * strides[d]
			}
			r := ByteRange{off * elemSize, run * elemSize}
			if cur.Length > 0 && cur.Offset+cur.Length == r.Offset {
				cur.Length += r.Length
			} else {
				if cur.Length > 0 && !yield(cur) {
					return
				}
				cur = r
			}
			d := k - 1
			for ; d >= 0; d-- {
				if idx[d]++; idx[d] < c.Offsets[d]+c.Sizes[d] {
					break
				}
				idx[d] = c.Offsets[d]
			}
			if d < 0 {
				break
			}
		}
		yield(cur)
	}
}
