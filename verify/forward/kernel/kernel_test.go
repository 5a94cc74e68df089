package kernel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// ref computes the product in float64 from the same inputs: the exact value every
// implementation approximates with float32 sums.
func ref(x []float32, ldx int, w func(j, p int) float32, m, n, k int) []float64 {
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += float64(x[i*ldx+p]) * float64(w(j, p))
			}
			out[i*n+j] = s
		}
	}
	return out
}

type shape struct{ m, n, k int }

// shapes covers every block size of every implementation, tails in m, n and k, and padded
// leading dimensions.
func shapes() []shape {
	var s []shape
	for _, m := range []int{1, 2, 3, 4, 5, 7, 8, 9, 13, 67} {
		for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 11, 16} {
			for _, k := range []int{0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 48, 100} {
				s = append(s, shape{m, n, k})
			}
		}
	}
	return append(s, shape{3, 5, 1024}, shape{33, 70, 257})
}

// forEach runs f under every available implementation, restoring the default afterwards.
func forEach(t *testing.T, f func(t *testing.T)) {
	def := Current()
	defer Use(def)
	for _, name := range Available() {
		if err := Use(name); err != nil {
			t.Fatal(err)
		}
		t.Run(name, f)
	}
}

func randVals(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func TestMatMul(t *testing.T) {
	if len(Available()) < 2 && !testing.Short() {
		t.Logf("only %v available on this machine", Available())
	}
	forEach(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, sh := range shapes() {
			ldx, ldw, ldd := sh.k+3, sh.k+5, sh.n+2
			x := randVals(r, sh.m*ldx)
			wf := randVals(r, sh.n*ldw)
			wb := make([]uint16, len(wf))
			for i, v := range wf {
				wb[i] = uint16(math.Float32bits(v) >> 16)
			}
			xb := make([]uint16, len(x))
			for i, v := range x {
				xb[i] = uint16(math.Float32bits(v) >> 16)
			}
			for _, wt := range []string{"bf16", "f32", "bf16x2"} {
				dst := make([]float32, (sh.m-1)*ldd+sh.n)
				for i := range dst {
					dst[i] = float32(math.NaN()) // every output must be written
				}
				var want []float64
				switch wt {
				case "bf16":
					MatMulBF16(dst, ldd, x, ldx, wb, ldw, sh.m, sh.n, sh.k)
					want = ref(x, ldx, func(j, p int) float32 { return math.Float32frombits(uint32(wb[j*ldw+p]) << 16) }, sh.m, sh.n, sh.k)
				case "bf16x2":
					MatMulBF16x2(dst, ldd, xb, ldx, wb, ldw, sh.m, sh.n, sh.k)
					xw := make([]float32, len(xb))
					for i, h := range xb {
						xw[i] = math.Float32frombits(uint32(h) << 16)
					}
					want = ref(xw, ldx, func(j, p int) float32 { return math.Float32frombits(uint32(wb[j*ldw+p]) << 16) }, sh.m, sh.n, sh.k)
				default:
					MatMulF32(dst, ldd, x, ldx, wf, ldw, sh.m, sh.n, sh.k)
					want = ref(x, ldx, func(j, p int) float32 { return wf[j*ldw+p] }, sh.m, sh.n, sh.k)
				}
				for i := range sh.m {
					for j := range sh.n {
						got, w := float64(dst[i*ldd+j]), want[i*sh.n+j]
						// float32 sums of k products of N(0,1) values: error grows like k·2^-24·|terms|.
						if tol := 1e-6 * float64(sh.k+1) * 4; math.Abs(got-w) > tol || math.IsNaN(got) {
							t.Fatalf("%s %dx%dx%d: dst[%d,%d] = %g, want %g", wt, sh.m, sh.n, sh.k, i, j, got, w)
						}
					}
				}
			}
		}
	})
}

// TestImplsAgree compares every implementation with the generic one on the same inputs:
// identical up to the order of float32 additions.
func TestImplsAgree(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m, n, k := 9, 13, 300
	x := randVals(r, m*k)
	w := randVals(r, n*k)
	run := func(name string) []float32 {
		def := Current()
		defer Use(def)
		if err := Use(name); err != nil {
			t.Fatal(err)
		}
		dst := make([]float32, m*n)
		MatMulF32(dst, n, x, k, w, k, m, n, k)
		return dst
	}
	want := run("generic")
	for _, name := range Available() {
		got := run(name)
		for i := range got {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-4 {
				t.Errorf("%s: element %d = %g, generic %g", name, i, got[i], want[i])
			}
		}
	}
}

func TestUseUnknown(t *testing.T) {
	if err := Use("sse9"); err == nil {
		t.Fatal("Use accepted an unknown kernel")
	}
}

func TestBadShapesPanic(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a too-short weight slice")
		}
	}()
	MatMulF32(make([]float32, 4), 2, make([]float32, 8), 4, make([]float32, 7), 4, 2, 2, 4)
}

// BenchmarkMatMul reports GFLOP/s (2·m·n·k per product) of one goroutine for the shapes of
// a 32-token forward pass of a Qwen3-0.6B-sized model, per wall-clock second and per second
// of CPU time (what the kernel does while it has a core, on a shared machine).
func BenchmarkMatMul(b *testing.B) {
	for _, sh := range []shape{{32, 1024, 1024}, {32, 3072, 1024}, {32, 1024, 3072}, {1, 4096, 4096}} {
		for _, name := range Available() {
			for _, wt := range []string{"bf16", "f32", "bf16x2"} {
				b.Run(fmt.Sprintf("%s/%s/%dx%dx%d", name, wt, sh.m, sh.n, sh.k), func(b *testing.B) {
					def := Current()
					defer Use(def)
					Use(name)
					r := rand.New(rand.NewPCG(5, 6))
					x := randVals(r, sh.m*sh.k)
					wf := randVals(r, sh.n*sh.k)
					wb := make([]uint16, len(wf))
					xb := make([]uint16, len(x))
					dst := make([]float32, sh.m*sh.n)
					b.ResetTimer()
					cpu0 := cpuSeconds()
					for b.Loop() {
						switch wt {
						case "bf16":
							MatMulBF16(dst, sh.n, x, sh.k, wb, sh.k, sh.m, sh.n, sh.k)
						case "bf16x2":
							MatMulBF16x2(dst, sh.n, xb, sh.k, wb, sh.k, sh.m, sh.n, sh.k)
						default:
							MatMulF32(dst, sh.n, x, sh.k, wf, sh.k, sh.m, sh.n, sh.k)
						}
					}
					flop := 2 * float64(sh.m*sh.n*sh.k) * float64(b.N)
					b.ReportMetric(flop/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					if cpu := cpuSeconds() - cpu0; cpu > 0 {
						b.ReportMetric(flop/cpu/1e9, "GFLOP/cpu-s")
					}
				})
			}
		}
	}
}
