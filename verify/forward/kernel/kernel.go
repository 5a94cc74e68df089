// Package kernel holds the matrix products of the Go forward pass: float32 activation rows
// times weight rows stored as bfloat16 or float32, accumulated in float32.
//
// The products are y = x·Wᵀ with W in nn.Linear's [out, in] layout, row-major, as the
// checkpoint stores it: each output element is the dot product of one activation row with one
// weight row, so weights are read straight from the checkpoint's mapping (bfloat16 widened in
// registers, never copied to float32) and a caller can split the output features across
// goroutines even for one activation row.
//
// Three implementations compute the same thing: AVX-512 and AVX2/FMA micro-kernels in Go
// assembly (generated with avo by the program in asm/, see go:generate below; run it with
// network access to the Go module proxy, as asm/ is a module of its own so that the main
// module does not depend on avo) and a portable Go fallback. [Use] picks the best the CPU
// supports at start-up (golang.org/x/sys/cpu); tests force each in turn. They differ only in
// the order of the float32 additions. Where the CPU has AVX512_BF16, [MatMulBF16x2]
// multiplies bfloat16 activations by bfloat16 weights with VDPBF16PS, twice the rate of the
// widening kernels.
package kernel

//go:generate sh -c "cd asm && go run . -out ../kernel_amd64.s -stubs ../stubs_amd64.go -pkg kernel -tables ../tables_amd64.go"

import (
	"fmt"
	"math"
)

// Impl is one implementation of the micro-kernels: it computes blocks of up to MR
// activation rows by NR weight rows over a run of K a multiple of Step long.
type Impl struct {
	Name   string
	MR, NR int // largest block
	Step   int // K granularity of the micro-kernels; the rest is done in Go
	// bf16[mr][nr] and f32[mr][nr] compute dst[i*ldd+j] = Σ_{p<k} x[i*ldx+p]·w[j*ldw+p]
	// for i<mr, j<nr, with k a multiple of Step (0 allowed).
	bf16 [][]func(dst *float32, ldd int, x *float32, ldx int, w *uint16, ldw int, k int)
	f32  [][]func(dst *float32, ldd int, x *float32, ldx int, w *float32, ldw int, k int)
	// dp[mr][nr], when the CPU has a bfloat16 dot-product instruction (AVX512_BF16), is
	// the bfloat16×bfloat16 product over k a multiple of dpStep; nil otherwise.
	dp     [][]func(dst *float32, ldd int, x *uint16, ldx int, w *uint16, ldw int, k int)
	dpStep int
}

// impls lists the implementations usable on this machine, best first; the last is Generic.
var impls []*Impl

// current is the implementation in use.
var current *Impl

func init() {
	impls = append(archImpls(), generic)
	current = impls[0]
}

// Available lists the implementations this machine can run, best first.
func Available() []string {
	var names []string
	for _, im := range impls {
		names = append(names, im.Name)
	}
	return names
}

// Current names the implementation in use.
func Current() string { return current.Name }

// Use selects an implementation by name ("avx512", "avx2", "generic"); it is for tests and
// benchmarks comparing them, and must not be called while products run.
func Use(name string) error {
	for _, im := range impls {
		if im.Name == name {
			current = im
			return nil
		}
	}
	return fmt.Errorf("kernel %q is not available on this machine (%v)", name, Available())
}

// MatMulBF16 sets dst[i*ldd+j] = Σ_{p<k} x[i*ldx+p]·w[j*ldw+p] for i<m, j<n, reading w as
// bfloat16 bits widened exactly to float32, accumulating in float32.
func MatMulBF16(dst []float32, ldd int, x []float32, ldx int, w []uint16, ldw int, m, n, k int) {
	check(len(dst), ldd, m, n, len(x), ldx, len(w), ldw, k)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		zero(dst, ldd, m, n)
		return
	}
	im := current
	kk := k - k%im.Step
	blocks(m, n, im, func(i, j, mr, nr int) {
		im.bf16[mr][nr](&dst[i*ldd+j], ldd, &x[i*ldx], ldx, &w[j*ldw], ldw, kk)
	})
	if kk < k {
		for i := range m {
			xr := x[i*ldx+kk : i*ldx+k]
			for j := range n {
				wr := w[j*ldw+kk : j*ldw+k]
				var s float32
				for p, v := range xr {
					s += v * math.Float32frombits(uint32(wr[p])<<16)
				}
				dst[i*ldd+j] += s
			}
		}
	}
}

// MatMulBF16x2 is MatMulBF16 with bfloat16 activations too: dst[i*ldd+j] = Σ_{p<k}
// x[i*ldx+p]·w[j*ldw+p], both bfloat16 bits, products exact, sums in float32 — a TPU matrix
// unit's default precision. With AVX512_BF16 it runs VDPBF16PS, which treats bfloat16
// subnormals as zero and flushes subnormal sums; otherwise it widens x and runs MatMulBF16.
func MatMulBF16x2(dst []float32, ldd int, x []uint16, ldx int, w []uint16, ldw int, m, n, k int) {
	check(len(dst), ldd, m, n, len(x), ldx, len(w), ldw, k)
	if m == 0 || n == 0 {
		return
	}
	im := current
	if im.dp == nil || k == 0 {
		xf := make([]float32, m*k)
		for i := range m {
			for p, h := range x[i*ldx : i*ldx+k] {
				xf[i*k+p] = math.Float32frombits(uint32(h) << 16)
			}
		}
		MatMulBF16(dst, ldd, xf, k, w, ldw, m, n, k)
		return
	}
	kk := k - k%im.dpStep
	blocks(m, n, im, func(i, j, mr, nr int) {
		im.dp[mr][nr](&dst[i*ldd+j], ldd, &x[i*ldx], ldx, &w[j*ldw], ldw, kk)
	})
	if kk < k {
		for i := range m {
			xr := x[i*ldx+kk : i*ldx+k]
			for j := range n {
				wr := w[j*ldw+kk : j*ldw+k]
				var s float32
				for p, v := range xr {
					s += math.Float32frombits(uint32(v)<<16) * math.Float32frombits(uint32(wr[p])<<16)
				}
				dst[i*ldd+j] += s
			}
		}
	}
}

// MatMulF32 is MatMulBF16 for float32 weights.
func MatMulF32(dst []float32, ldd int, x []float32, ldx int, w []float32, ldw int, m, n, k int) {
	check(len(dst), ldd, m, n, len(x), ldx, len(w), ldw, k)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		zero(dst, ldd, m, n)
		return
	}
	im := current
	kk := k - k%im.Step
	blocks(m, n, im, func(i, j, mr, nr int) {
		im.f32[mr][nr](&dst[i*ldd+j], ldd, &x[i*ldx], ldx, &w[j*ldw], ldw, kk)
	})
	if kk < k {
		for i := range m {
			xr := x[i*ldx+kk : i*ldx+k]
			for j := range n {
				wr := w[j*ldw+kk : j*ldw+k]
				var s float32
				for p, v := range xr {
					s += v * wr[p]
				}
				dst[i*ldd+j] += s
			}
		}
	}
}

func zero(dst []float32, ldd, m, n int) {
	for i := range m {
		clear(dst[i*ldd : i*ldd+n])
	}
}

// rowBlock is how many activation rows are kept hot (in L2) while the weight rows stream.
const rowBlock = 64

// blocks calls fn for each micro-kernel block, weight rows in the outer loop so that a block
// of NR weight rows stays in L1 while up to rowBlock activation rows pass over it.
func blocks(m, n int, im *Impl, fn func(i, j, mr, nr int)) {
	for i0 := 0; i0 < m; i0 += rowBlock {
		i1 := min(i0+rowBlock, m)
		for j := 0; j < n; j += im.NR {
			nr := min(im.NR, n-j)
			for i := i0; i < i1; i += im.MR {
				fn(i, j, min(im.MR, i1-i), nr)
			}
		}
	}
}

// check panics on arguments that would read or write out of bounds: a programming error, as
// gonum's mat.ErrShape is.
func check(ldst, ldd, m, n, lx, ldx, lw, ldw, k int) {
	if m < 0 || n < 0 || k < 0 || (m > 0 && (ldx < k || ldd < n)) || (n > 0 && ldw < k) ||
		(m > 0 && n > 0 && (ldst < (m-1)*ldd+n || lx < (m-1)*ldx+k || lw < (n-1)*ldw+k)) {
		panic(fmt.Sprintf("kernel: bad shapes m=%d n=%d k=%d dst %d/%d x %d/%d w %d/%d", m, n, k, ldst, ldd, lx, ldx, lw, ldw))
	}
}
