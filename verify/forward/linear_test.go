package forward

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// mappedMatrix builds a matrix over in-memory bytes of dtype, as a checkpoint mapping holds
// them, with the given row stride (elements) to also get the strided path.
func mappedMatrix(t *testing.T, vals []float32, dtype statedict.DType, rows, cols int, transposed, round bool) *matrix {
	t.Helper()
	es := dtype.Size()
	b := make([]byte, len(vals)*es)
	for i, v := range vals {
		switch dtype {
		case statedict.BFloat16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(v)>>16))
		case statedict.Float32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
	}
	st := statedict.NewMappedStorage("w", "cpu", dtype, b)
	shape := []int64{int64(rows), int64(cols)}
	if transposed {
		shape = []int64{int64(cols), int64(rows)}
	}
	tt := &statedict.Tensor{DType: dtype, Shape: shape, Strides: statedict.ContiguousStrides(shape), Storage: st}
	v := view{name: "w", t: tt, rows: rows, cols: cols, rs: int64(cols), cs: 1}
	if transposed {
		v.rs, v.cs = 1, int64(rows)
	}
	m, err := matrixOf(v, round)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLinearPrecisions checks linear against a float64 product of the same inputs: exact
// weights for float32 precision; for TPU precision, activations and float32 weights rounded
// to bfloat16 first (so the result differs from the unrounded product by far more than the
// tolerance, which the test also checks). Every weight source is covered: bfloat16 and
// float32 in place, float32 rounded through a tile, and transposed (gathered) matrices.
func TestLinearPrecisions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const T, n, k = 5, 37, 83
	x := make([]float32, T*k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	bias := make([]float32, n)
	for i := range bias {
		bias[i] = float32(r.NormFloat64())
	}
	for _, tc := range []struct {
		name       string
		dtype      statedict.DType
		transposed bool
	}{{"bf16", statedict.BFloat16, false}, {"f32", statedict.Float32, false},
		{"bf16-transposed", statedict.BFloat16, true}, {"f32-transposed", statedict.Float32, true}} {
		for _, tpu := range []bool{false, true} {
			vals := w
			if tc.transposed {
				vals = make([]float32, n*k)
				for j := range n {
					for p := range k {
						vals[p*n+j] = w[j*k+p]
					}
				}
			}
			m := mappedMatrix(t, vals, tc.dtype, n, k, tc.transposed, tpu)
			got := make([]float32, T*n)
			if err := linear(got, x, T, m, bias, tpu); err != nil {
				t.Fatal(err)
			}
			wv := func(j, p int) float64 {
				v := w[j*k+p]
				switch {
				case tc.dtype == statedict.BFloat16:
					v = math.Float32frombits(math.Float32bits(v) &^ 0xFFFF) // as mappedMatrix stored it
				case tpu:
					v = roundBF16(v)
				}
				return float64(v)
			}
			var farthest float64
			for i := range T {
				for j := range n {
					var s, exact float64
					for p := range k {
						xv := float64(x[i*k+p])
						exact += xv * float64(w[j*k+p])
						if tpu {
							xv = float64(roundBF16(x[i*k+p]))
						}
						s += xv * wv(j, p)
					}
					s += float64(bias[j])
					exact += float64(bias[j])
					if d := math.Abs(float64(got[i*n+j]) - s); d > 1e-4 {
						t.Fatalf("%s tpu=%v: [%d,%d] = %g, want %g", tc.name, tpu, i, j, got[i*n+j], s)
					}
					farthest = max(farthest, math.Abs(s-exact))
				}
			}
			if tpu && farthest < 1e-2 {
				t.Errorf("%s: TPU rounding changed the product by only %g", tc.name, farthest)
			}
		}
	}
}
