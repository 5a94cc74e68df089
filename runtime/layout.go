package runtime

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/statedict"
)

// TorchPlacements writes s's placements as DTensor's repr has them, one per mesh axis. An
// axis whose shard applies after later mesh axes' shards of the same dimension (FSDP2 over
// tensor parallelism, Order) is written as FSDP2 records it,
// "_StridedShard(dim=D, sf=F)", F the product of those later axes' sizes.
func (s Sharding) TorchPlacements(m *Mesh) []string {
	out := make([]string, len(s.Placements))
	pos := make([]int, len(s.Placements)) // when each axis's shard applies
	for i := range pos {
		pos[i] = i
	}
	for i, a := range s.Order {
		pos[a] = i
	}
	for a, p := range s.Placements {
		out[a] = p.String()
		if !p.Shard {
			continue
		}
		sf := 1
		for b := a + 1; b < len(s.Placements); b++ {
			if q := s.Placements[b]; q.Shard && q.Dim == p.Dim && pos[b] < pos[a] {
				sf *= m.Axes[b].Size
			}
		}
		if sf > 1 {
			out[a] = "_StridedShard(dim=" + strconv.Itoa(p.Dim) + ", sf=" + strconv.Itoa(sf) + ")"
		}
	}
	return out
}

// Layout describes a tensor of shape shape under s on mesh m for a writer: its placements
// and its distinct pieces with their holders.
func (s Sharding) Layout(shape []int64, m *Mesh) (*statedict.TensorSharding, error) {
	reps, err := s.Chunks(shape, m)
	if err != nil {
		return nil, err
	}
	ts := &statedict.TensorSharding{Placements: s.TorchPlacements(m), Pieces: make([]statedict.Piece, len(reps))}
	for i, r := range reps {
		ts.Pieces[i] = statedict.Piece{Offsets: r.Offsets, Sizes: r.Sizes, Ranks: r.Ranks}
	}
	return ts, nil
}

// Sharding is the skeleton of the statedict.Sharding a conversion for t writes — its ranks
// and mesh, no tensors yet (the caller adds each tensor's Layout) — or nil without a mesh.
func (t *Target) Sharding() *statedict.Sharding {
	if t == nil || t.Mesh == nil {
		return nil
	}
	s := &statedict.Sharding{Ranks: t.Mesh.Size(), Tensors: map[*statedict.Tensor]*statedict.TensorSharding{}}
	for _, a := range t.Mesh.Axes {
		s.Mesh = append(s.Mesh, statedict.MeshAxis{Name: a.Name, Size: a.Size})
	}
	return s
}

// HostRanks lists the ranks whose shards host host of hosts writes in a multi-host
// conversion: the devices the topology's host drives when the topology has that many hosts
// (ranks are numbered host-major, as torchrun numbers them), else an even split of the
// ranks into hosts consecutive blocks.
func (t *Target) HostRanks(host, hosts int) ([]int, error) {
	n := t.Ranks()
	if hosts < 1 || host < 0 || host >= hosts {
		return nil, fmt.Errorf("host %d of %d: the index counts from 0 to the number of hosts - 1", host, hosts)
	}
	if t.Topology != nil && t.Topology.Hosts == hosts && t.Mesh != nil {
		first, k := t.Topology.HostDevices(host)
		return rankRange(first, k), nil
	}
	if n%hosts != 0 {
		what := "the target"
		if t.Topology != nil {
			what = fmt.Sprintf("%s (%d hosts)", t.Topology.AcceleratorType(), t.Topology.Hosts)
		}
		return nil, fmt.Errorf("%d hosts cannot split the %d ranks of %s evenly", hosts, n, what)
	}
	k := n / hosts
	return rankRange(host*k, k), nil
}

func rankRange(first, n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = first + i
	}
	return slices.Clip(r)
}

// ParseTorchPlacements reads placements as TorchPlacements writes them — one per axis of m,
// "Shard(dim=D)", "Replicate()" or "_StridedShard(dim=D, sf=F)" — into the Sharding that
// writes exactly them, for a tensor of ndim dimensions: the order of the axes' shards is
// the first one (in lexicographic order of permutations) whose strided split factors are
// the ones given.
func ParseTorchPlacements(placements []string, m *Mesh, ndim int) (Sharding, error) {
	if len(placements) != m.NDim() {
		return Sharding{}, fmt.Errorf("%d placements for a %d-axis mesh", len(placements), m.NDim())
	}
	s := Sharding{Placements: make([]Placement, len(placements))}
	strided := false
	for i, p := range placements {
		if d, sf, ok := parseStrided(p); ok {
			s.Placements[i] = Shard(d)
			strided = strided || sf > 1
			continue
		}
		q, err := ParsePlacement(p)
		if err != nil {
			return Sharding{}, err
		}
		s.Placements[i] = q
	}
	if err := s.Check(ndim, m); err != nil {
		return Sharding{}, err
	}
	if slices.Equal(s.TorchPlacements(m), placements) {
		return s, nil
	}
	if strided {
		order := make([]int, m.NDim())
		for i := range order {
			order[i] = i
		}
		for {
			s.Order = order
			if slices.Equal(s.TorchPlacements(m), placements) {
				return s, nil
			}
			if !nextPermutation(order) {
				break
			}
		}
	}
	return Sharding{}, fmt.Errorf("placements %v describe no layout of the mesh %s", placements, m)
}

// parseStrided reads "_StridedShard(dim=D, sf=F)" (also "split_factor=F").
func parseStrided(s string) (dim, sf int, ok bool) {
	t := strings.ReplaceAll(s, " ", "")
	args, found := strings.CutPrefix(t, "_StridedShard(")
	if args, ok = strings.CutSuffix(args, ")"); !found || !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(args, ",")
	if !ok {
		return 0, 0, false
	}
	a = strings.TrimPrefix(a, "dim=")
	b = strings.TrimPrefix(strings.TrimPrefix(b, "sf="), "split_factor=")
	d, err1 := strconv.Atoi(a)
	f, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || d <= -64 || d >= 64 || f < 1 {
		return 0, 0, false
	}
	return d, f, true
}

// nextPermutation advances p to the next permutation in lexicographic order, reporting
// false after the last.
func nextPermutation(p []int) bool {
	i := len(p) - 2
	for i >= 0 && p[i] >= p[i+1] {
		i--
	}
	if i < 0 {
		return false
	}
	j := len(p) - 1
	for p[j] <= p[i] {
		j--
	}
	p[i], p[j] = p[j], p[i]
	slices.Reverse(p[i+1:])
	return true
}
