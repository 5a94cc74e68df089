package runtime

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

func TestTorchPlacements(t *testing.T) {
	for _, c := range []struct {
		mesh  string
		s     Sharding
		shape []int64
		want  []string
	}{
		{"fsdp=8", Sharding{Placements: []Placement{Shard(0)}}, []int64{16}, []string{"Shard(dim=0)"}},
		{"dp=2,tp=4", Sharding{Placements: []Placement{Replicate, Shard(1)}}, []int64{4, 4}, []string{"Replicate()", "Shard(dim=1)"}},
		// FSDP2 over TP on the same dimension: the fsdp axis is strided by the tp size.
		{"fsdp=4,tp=2", Sharding{Placements: []Placement{Shard(0), Shard(0)}, Order: []int{1, 0}}, []int64{16, 4},
			[]string{"_StridedShard(dim=0, sf=2)", "Shard(dim=0)"}},
		{"dp=2,fsdp=2,tp=2", Sharding{Placements: []Placement{Replicate, Shard(0), Shard(0)}, Order: []int{0, 2, 1}}, []int64{12, 8},
			[]string{"Replicate()", "_StridedShard(dim=0, sf=2)", "Shard(dim=0)"}},
		{"a=2,b=2,c=2", Sharding{Placements: []Placement{Shard(0), Shard(0), Shard(1)}, Order: []int{2, 1, 0}}, []int64{24, 6},
			[]string{"_StridedShard(dim=0, sf=2)", "Shard(dim=0)", "Shard(dim=1)"}},
		// Left to right on the same dimension is plain DTensor nesting.
		{"tp=2,fsdp=2", Sharding{Placements: []Placement{Shard(0), Shard(0)}}, []int64{7, 5}, []string{"Shard(dim=0)", "Shard(dim=0)"}},
	} {
		m, err := ParseMesh(c.mesh)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.s.TorchPlacements(m); !slices.Equal(got, c.want) {
			t.Errorf("%s %v: %q, want %q", c.mesh, c.s, got, c.want)
		}
		l, err := c.s.Layout(c.shape, m)
		if err != nil {
			t.Fatal(err)
		}
		x := &statedict.Tensor{DType: statedict.Float32, Shape: c.shape, Strides: statedict.ContiguousStrides(c.shape)}
		if err := l.Check(x, m.Size()); err != nil {
			t.Errorf("%s %v: layout %+v: %v", c.mesh, c.s, l.Pieces, err)
		}
	}
}

func TestHostRanks(t *testing.T) {
	v5p, err := ParseTopology("v5p-32")
	if err != nil {
		t.Fatal(err)
	}
	tgt, err := NewTarget(Spec{Topology: "v5p-32", Mesh: "fsdp=16"})
	if err != nil {
		t.Fatal(err)
	}
	if v5p.Hosts != 4 || v5p.Devices != 16 {
		t.Fatalf("v5p-32: %d hosts, %d devices", v5p.Hosts, v5p.Devices)
	}
	for h := range 4 {
		got, err := tgt.HostRanks(h, 4)
		if err != nil || !slices.Equal(got, []int{4 * h, 4*h + 1, 4*h + 2, 4*h + 3}) {
			t.Errorf("host %d of 4: %v, %v", h, got, err)
		}
	}
	// Hosts other than the topology's split the ranks evenly.
	if got, err := tgt.HostRanks(1, 2); err != nil || !slices.Equal(got, []int{8, 9, 10, 11, 12, 13, 14, 15}) {
		t.Errorf("host 1 of 2: %v, %v", got, err)
	}
	cpu, err := NewTarget(Spec{Device: "cpu", Mesh: "tp=2,fsdp=3"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cpu.HostRanks(2, 3); err != nil || !slices.Equal(got, []int{4, 5}) {
		t.Errorf("cpu host 2 of 3: %v, %v", got, err)
	}
	for _, c := range []struct {
		host, hosts int
		want        string
	}{{0, 4, "cannot split the 6 ranks"}, {3, 3, "counts from 0"}, {0, 0, "counts from 0"}} {
		if _, err := cpu.HostRanks(c.host, c.hosts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("host %d of %d: %v, want %q", c.host, c.hosts, err, c.want)
		}
	}
	if s := cpu.Sharding(); s.Ranks != 6 || len(s.Mesh) != 2 || s.Mesh[1] != (statedict.MeshAxis{Name: "fsdp", Size: 3}) {
		t.Errorf("Sharding skeleton %+v", s)
	}
}

// TestParseTorchPlacements: what TorchPlacements writes reads back as a sharding with the
// same chunks on every rank, for every plan on a few meshes; what describes no layout is
// refused.
func TestParseTorchPlacements(t *testing.T) {
	meshes := []string{"fsdp=8", "dp=2,tp=4", "fsdp=2,tp=4", "dp=2,fsdp=2,tp=2", "ep=2,fsdp=2,tp=2"}
	shapes := [][]int64{{64, 32}, {10, 6}, {3}, {4, 6, 5}}
	for _, ms := range meshes {
		m, err := ParseMesh(ms)
		if err != nil {
			t.Fatal(err)
		}
		n := m.NDim()
		for _, shape := range shapes {
			// Every placement per axis (Replicate or Shard of any dim) and every order.
			var all func(i int, ps []Placement)
			all = func(i int, ps []Placement) {
				if i == n {
					order := make([]int, n)
					for k := range order {
						order[k] = k
					}
					for {
						s := Sharding{Placements: slices.Clone(ps), Order: slices.Clone(order)}
						want, err := s.Chunks(shape, m)
						if err != nil {
							t.Fatal(err)
						}
						tp := s.TorchPlacements(m)
						got, err := ParseTorchPlacements(tp, m, len(shape))
						if err != nil {
							t.Fatalf("%s %v %v: %v", ms, shape, s, err)
						}
						gc, _ := got.Chunks(shape, m)
						if !slices.Equal(got.TorchPlacements(m), tp) || fmt.Sprint(gc) != fmt.Sprint(want) {
							t.Fatalf("%s %v: %v read back as %v: chunks %v, want %v", ms, shape, tp, got, gc, want)
						}
						if !nextPermutation(order) {
							break
						}
					}
					return
				}
				all(i+1, append(ps, Replicate))
				for d := range shape {
					all(i+1, append(ps, Shard(d)))
				}
			}
			all(0, nil)
		}
	}
	m, _ := ParseMesh("fsdp=2,tp=4")
	for _, bad := range [][]string{
		{"_StridedShard(dim=0, sf=3)", "Shard(dim=0)"}, // sf is not tp's size
		{"_StridedShard(dim=0, sf=4)", "Shard(dim=1)"}, // nothing later shards dim 0
		{"Shard(dim=0)"},                // one placement for two axes
		{"Shard(dim=2)", "Replicate()"}, // no such dimension
		{"Partial()", "Replicate()"},
	} {
		if _, err := ParseTorchPlacements(bad, m, 2); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// FuzzParseTorchPlacements: any strings on a 3-axis mesh parse to a sharding that writes
// them back, or fail; never a panic.
func FuzzParseTorchPlacements(f *testing.F) {
	f.Add("_StridedShard(dim=0, sf=4)", "Shard(dim=0)", "Replicate()", 2)
	f.Add("Shard(dim=1)", "_StridedShard(dim=1, split_factor=2)", "Shard(dim=1)", 3)
	f.Add("R", "S(0)", "_StridedShard(dim=-1,sf=0)", 1)
	m, _ := ParseMesh("a=2,b=2,c=2")
	f.Fuzz(func(t *testing.T, p0, p1, p2 string, ndim int) {
		ndim = min(max(ndim, 0), 4)
		ps := []string{p0, p1, p2}
		s, err := ParseTorchPlacements(ps, m, ndim)
		if err != nil {
			return
		}
		if got := s.TorchPlacements(m); !slices.Equal(got, ps) {
			t.Fatalf("%v parsed as %v, which writes %v", ps, s, got)
		}
	})
}
