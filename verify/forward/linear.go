package forward

import (
	"runtime"
	"sync"
	"unsafe"

	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/verify/forward/kernel"
)

// tileBytes bounds the scratch buffer a worker decodes weight rows into.
const tileBytes = 256 << 10

// linear computes dst[t*n+j] = Σ_k x[t*k+p]·W[j,p] (+ bias[j]) for t < T: the T activation
// rows times the matrix's rows, the output features split across GOMAXPROCS goroutines in
// contiguous ranges (so even one token uses every core). With tpu set the activations are
// rounded to bfloat16 first, and float32 weights too unless the matrix is exempt.
func linear(dst, x []float32, T int, w *matrix, bias []float32, tpu bool) error {
	if w.parts != nil {
		return linearParts(dst, x, T, w, bias, tpu)
	}
	n, k := w.rows, w.cols
	var xb []uint16 // the rounded activations as bfloat16 bits, for bfloat16 weights
	if tpu {
		xb = make([]uint16, T*k)
		xr := make([]float32, T*k)
		for i, v := range x[:T*k] {
			xb[i] = codec.Float32ToBF16(v)
			xr[i] = codec.BF16ToFloat32(xb[i])
		}
		x = xr
	}
	workers := min(runtime.GOMAXPROCS(0), max(1, n/16))
	var wg sync.WaitGroup
	errs := make([]error, workers)
	per := (n + workers - 1) / workers
	per = (per + 15) &^ 15
	for g := range workers {
		j0, j1 := g*per, min((g+1)*per, n)
		if j0 >= j1 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = w.product(dst, x, xb, T, j0, j1)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if bias != nil {
		for t := range T {
			row := dst[t*n : (t+1)*n]
			for j, b := range bias {
				row[j] += b
			}
		}
	}
	return nil
}

// product computes output features [j0, j1) of all T rows; xb, when set, holds x as
// bfloat16 bits (TPU precision), multiplied with bfloat16 weights as they are.
func (w *matrix) product(dst, x []float32, xb []uint16, T, j0, j1 int) error {
	n, k := w.rows, w.cols
	out := dst[j0:]
	bf16 := func(dst []float32, w []uint16, rows int) {
		if xb != nil {
			kernel.MatMulBF16x2(dst, n, xb, k, w, k, T, rows, k)
		} else {
			kernel.MatMulBF16(dst, n, x, k, w, k, T, rows, k)
		}
	}
	switch {
	case w.bf16 != nil:
		bf16(out, w.bf16[j0*k:], j1-j0)
		return nil
	case w.f32 != nil:
		kernel.MatMulF32(out, n, x, k, w.f32[j0*k:], k, T, j1-j0, k)
		return nil
	}
	es := 4
	if w.tileBF16 {
		es = 2
	}
	rows := max(1, min(j1-j0, tileBytes/(es*k)))
	buf := make([]byte, rows*k*es)
	var hbuf []uint16
	for r := j0; r < j1; r += rows {
		r1 := min(r+rows, j1)
		tile := buf[:(r1-r)*k*es]
		if err := w.fill(tile, r, r1); err != nil {
			return err
		}
		if w.tileBF16 {
			bf16(dst[r:], unsafe.Slice((*uint16)(unsafe.Pointer(&tile[0])), len(tile)/2), r1-r)
			continue
		}
		f := unsafe.Slice((*float32)(unsafe.Pointer(&tile[0])), len(tile)/4)
		if w.round {
			// Rounded weights are bfloat16 numbers: multiply them as bfloat16, by the same
			// kernel as weights stored in bfloat16, so a float32 checkpoint and its bfloat16
			// cast compute identical TPU-precision logits.
			if cap(hbuf) < len(f) {
				hbuf = make([]uint16, len(f))
			}
			h := hbuf[:len(f)]
			for i, v := range f {
				h[i] = codec.Float32ToBF16(v)
			}
			bf16(dst[r:], h, r1-r)
			continue
		}
		kernel.MatMulF32(dst[r:], n, x, k, f, k, T, r1-r, k)
	}
	return nil
}

// roundBF16 rounds x to the nearest bfloat16, ties to even, and widens it back: what a
// TPU's matrix unit does to float32 inputs at default precision.
func roundBF16(x float32) float32 {
	return codec.BF16ToFloat32(codec.Float32ToBF16(x))
}

// roundedBF16 returns a copy of x with every element rounded to bfloat16.
func roundedBF16(x []float32) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = roundBF16(v)
	}
	return out
}
