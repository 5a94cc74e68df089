package forward

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// mappedTensor is a contiguous float32 tensor over its own in-memory bytes, as a rank's
// file maps its piece.
func mappedTensor(vals []float32, shape []int64) *statedict.Tensor {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return &statedict.Tensor{DType: statedict.Float32, Shape: shape, Strides: statedict.ContiguousStrides(shape),
		Storage: statedict.NewMappedStorage("w", "cpu", statedict.Float32, b)}
}

// box copies the elements of the row-major tensor vals of shape shape in the box at off of
// extent size.
func box(vals []float32, shape, off, size []int64) []float32 {
	var out []float32
	strides := statedict.ContiguousStrides(shape)
	var rec func(d int, base int64)
	rec = func(d int, base int64) {
		if d == len(shape) {
			out = append(out, vals[base])
			return
		}
		for i := off[d]; i < off[d]+size[d]; i++ {
			rec(d+1, base+i*strides[d])
		}
	}
	rec(0, 0)
	return out
}

// sharded lays vals of shape shape over mesh as s places it, each distinct piece a mapped
// tensor of its own, as statedict.Checkpoint.Shards lists them.
func sharded(t *testing.T, vals []float32, shape []int64, mesh string, s runtime.Sharding) []statedict.Shard {
	t.Helper()
	m, err := runtime.ParseMesh(mesh)
	if err != nil {
		t.Fatal(err)
	}
	reps, err := s.Chunks(shape, m)
	if err != nil {
		t.Fatal(err)
	}
	var out []statedict.Shard
	for _, r := range reps {
		p := statedict.Piece{Offsets: r.Offsets, Sizes: r.Sizes, Ranks: r.Ranks}
		var local *statedict.Tensor
		if !p.Empty() {
			local = mappedTensor(box(vals, shape, r.Offsets, r.Sizes), r.Sizes)
		}
		out = append(out, statedict.Shard{Piece: p, Local: local})
	}
	return out
}

// TestShardedLinear checks the device-by-device products against the whole weight's: every
// layout of tensor parallelism (column-parallel rows, row-parallel columns with their
// float32 all-reduce, both at once, uneven and empty pieces, replicas over a dp axis) in
// both precisions, the embedding gather, a stacked expert weight split by expert and by
// column, and the slices of a fused gate_up. The parts, not the whole tensor, must be what
// is computed from: a changed element of one rank's piece changes the output.
func TestShardedLinear(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const T, n, k = 3, 37, 83
	x := make([]float32, T*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	shape := []int64{n, k}
	whole := mappedTensor(w, shape)
	cases := []struct {
		mesh string
		s    runtime.Sharding
	}{
		{"tp=8", runtime.Sharding{Placements: []runtime.Placement{runtime.Shard(0)}}},
		{"tp=8", runtime.Sharding{Placements: []runtime.Placement{runtime.Shard(1)}}},
		{"dp=2,tp=4", runtime.Sharding{Placements: []runtime.Placement{runtime.Replicate, runtime.Shard(1)}}},
		{"fsdp=2,tp=4", runtime.Sharding{Placements: []runtime.Placement{runtime.Shard(0), runtime.Shard(1)}}},
		{"fsdp=2,tp=2", runtime.Sharding{Placements: []runtime.Placement{runtime.Shard(0), runtime.Shard(0)}, Order: []int{1, 0}}},
		{"tp=64", runtime.Sharding{Placements: []runtime.Placement{runtime.Shard(0)}}}, // 27 empty pieces
	}
	for _, c := range cases {
		for _, prec := range []Precision{Float32, TPU} {
			t.Run(fmt.Sprintf("%s %s %s", c.mesh, c.s, prec), func(t *testing.T) {
				shards := sharded(t, w, shape, c.mesh, c.s)
				ws := &weights{tensors: map[string]*statedict.Tensor{"w": whole}, exact: map[string]bool{},
					shards: map[*statedict.Tensor][]statedict.Shard{whole: shards},
					use:    &shardUse{ranks: map[int]bool{}, tensors: map[*statedict.Tensor]bool{}}}
				tpu := prec == TPU
				m, err := ws.mat("w", n, k, false, tpu)
				if err != nil {
					t.Fatal(err)
				}
				if len(m.parts) == 0 {
					t.Fatal("no parts")
				}
				got := make([]float32, T*n)
				if err := linear(got, x, T, m, nil, tpu); err != nil {
					t.Fatal(err)
				}
				plain := *m
				plain.parts = nil
				want := make([]float32, T*n)
				if err := linear(want, x, T, &plain, nil, tpu); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
						t.Fatalf("output %d: %g from the parts, %g from the whole weight", i, got[i], want[i])
					}
				}
				for row := range n {
					g, err := m.rowF32(row)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Equal(g, w[row*k:(row+1)*k]) {
						t.Fatalf("row %d gathered from the parts differs", row)
					}
				}
				// The first rank's piece is what is computed from.
				p := m.parts[0]
				b, _ := shards[0].Local.Storage.Mapped()
				v := math.Float32frombits(binary.LittleEndian.Uint32(b))
				binary.LittleEndian.PutUint32(b, math.Float32bits(v+1))
				if err := linear(got, x, T, m, nil, tpu); err != nil {
					t.Fatal(err)
				}
				if got[p.r0] == want[p.r0] {
					t.Fatalf("a changed element of rank %d's piece does not change the output", p.ranks[0])
				}
				if u := ws.use; u.pieces == 0 || len(u.ranks) != mustMesh(t, c.mesh).Size() && c.mesh != "tp=64" {
					t.Errorf("use: %d pieces from %d ranks", u.pieces, len(u.ranks))
				}
			})
		}
	}
}

// TestShardedPiecesMustTile: a per-device checkpoint whose pieces do not cover a weight
// exactly once — a rank's piece missing, held twice by different ranks, or placed past the
// weight's edge — is refused, naming the weight, rather than computed with zeros or doubled
// partial sums.
func TestShardedPiecesMustTile(t *testing.T) {
	const n, k = 16, 12
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(i)
	}
	shape := []int64{n, k}
	whole := mappedTensor(w, shape)
	for _, c := range []struct {
		name  string
		edit  func([]statedict.Shard) []statedict.Shard
		error string
	}{
		{"complete", func(s []statedict.Shard) []statedict.Shard { return s }, ""},
		{"missing", func(s []statedict.Shard) []statedict.Shard { return slices.Delete(s, 1, 2) }, "a piece is missing"},
		{"twice", func(s []statedict.Shard) []statedict.Shard {
			d := s[2]
			d.Ranks = []int{99}
			return append(s, d)
		}, "overlap"},
		{"outside", func(s []statedict.Shard) []statedict.Shard {
			s[3].Offsets = []int64{n - 1, 0}
			return s
		}, "outside"},
	} {
		t.Run(c.name, func(t *testing.T) {
			shards := c.edit(sharded(t, w, shape, "tp=4", runtime.Sharding{Placements: []runtime.Placement{runtime.Shard(0)}}))
			ws := &weights{tensors: map[string]*statedict.Tensor{"w": whole}, exact: map[string]bool{},
				shards: map[*statedict.Tensor][]statedict.Shard{whole: shards},
				use:    &shardUse{ranks: map[int]bool{}, tensors: map[*statedict.Tensor]bool{}}}
			_, err := ws.mat("w", n, k, false, false)
			switch {
			case c.error == "" && err != nil:
				t.Fatal(err)
			case c.error != "" && (err == nil || !strings.Contains(err.Error(), c.error) || !strings.HasPrefix(err.Error(), "w: ")):
				t.Fatalf("got %v, want an error about w saying %q", err, c.error)
			}
		})
	}
}

func mustMesh(t *testing.T, s string) *runtime.Mesh {
	m, err := runtime.ParseMesh(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestShardedExpert checks a stacked expert weight [E, a, b] laid over ranks by expert
// (ep) and by its last dimension, read as expert e's matrix plainly and transposed (gpt-oss's
// x·W layout), and the row slices of a fused gate_up.
func TestShardedExpert(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const E, a, b, T = 4, 10, 12, 2
	shape := []int64{E, a, b}
	w := make([]float32, E*a*b)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	whole := mappedTensor(w, shape)
	for _, c := range []struct {
		mesh string
		s    runtime.Sharding
	}{
		{"ep=2,tp=2", runtime.Sharding{Placements: []runtime.Placement{runtime.Shard(0), runtime.Shard(2)}}},
		{"tp=8", runtime.Sharding{Placements: []runtime.Placement{runtime.Shard(1)}}},
	} {
		for _, transposed := range []bool{false, true} {
			ws := &weights{tensors: map[string]*statedict.Tensor{"w": whole}, exact: map[string]bool{},
				shards: map[*statedict.Tensor][]statedict.Shard{whole: sharded(t, w, shape, c.mesh, c.s)},
				use:    &shardUse{ranks: map[int]bool{}, tensors: map[*statedict.Tensor]bool{}}}
			rows, cols := a, b
			if transposed {
				rows, cols = b, a
			}
			x := make([]float32, T*cols)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			for e := range E {
				m, err := ws.expert("w", e, E, rows, cols, transposed)
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range [][2]int{{0, rows}, {1, rows/2 + 1}, {rows / 2, rows}} {
					sm := m.slice(s[0], s[1])
					plain := *sm
					plain.parts = nil
					got, want := make([]float32, T*sm.rows), make([]float32, T*sm.rows)
					if err := linear(got, x, T, sm, nil, false); err != nil {
						t.Fatal(err)
					}
					if err := linear(want, x, T, &plain, nil, false); err != nil {
						t.Fatal(err)
					}
					for i := range want {
						if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
							t.Fatalf("%s transposed=%v expert %d rows %v: output %d is %g from the parts, %g whole", c.mesh, transposed, e, s, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}
