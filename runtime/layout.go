package runtime

import (
	"fmt"
	"slices"
	"strconv"

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
