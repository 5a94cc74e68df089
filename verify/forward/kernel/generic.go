package kernel

import (
	"math"
	"unsafe"
)

// generic is the portable implementation: plain Go loops, each output a float32 sum in index
// order. It is the specification the assembly kernels are tested against.
var generic = &Impl{Name: "generic", MR: 4, NR: 4, Step: 1,
	bf16: tableOf(4, 4, genericBF16), f32: tableOf(4, 4, genericF32)}

// tableOf builds the [mr][nr] table of block functions from one that takes the block size.
func tableOf[W any](mr, nr int, f func(mr, nr int, dst *float32, ldd int, x *float32, ldx int, w *W, ldw int, k int)) [][]func(*float32, int, *float32, int, *W, int, int) {
	t := make([][]func(*float32, int, *float32, int, *W, int, int), mr+1)
	for i := 1; i <= mr; i++ {
		t[i] = make([]func(*float32, int, *float32, int, *W, int, int), nr+1)
		for j := 1; j <= nr; j++ {
			t[i][j] = func(dst *float32, ldd int, x *float32, ldx int, w *W, ldw int, k int) {
				f(i, j, dst, ldd, x, ldx, w, ldw, k)
			}
		}
	}
	return t
}

func genericBF16(mr, nr int, dst *float32, ldd int, x *float32, ldx int, w *uint16, ldw int, k int) {
	for i := range mr {
		xr := unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(x), 4*i*ldx)), k)
		for j := range nr {
			wr := unsafe.Slice((*uint16)(unsafe.Add(unsafe.Pointer(w), 2*j*ldw)), k)
			wr = wr[:len(xr)]
			var s float32
			for p, v := range xr {
				s += v * math.Float32frombits(uint32(wr[p])<<16)
			}
			*(*float32)(unsafe.Add(unsafe.Pointer(dst), 4*(i*ldd+j))) = s
		}
	}
}

func genericF32(mr, nr int, dst *float32, ldd int, x *float32, ldx int, w *float32, ldw int, k int) {
	for i := range mr {
		xr := unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(x), 4*i*ldx)), k)
		for j := range nr {
			wr := unsafe.Slice((*float32)(unsafe.Add(unsafe.Pointer(w), 4*j*ldw)), k)
			wr = wr[:len(xr)]
			var s float32
			for p, v := range xr {
				s += v * wr[p]
			}
			*(*float32)(unsafe.Add(unsafe.Pointer(dst), 4*(i*ldd+j))) = s
		}
	}
}
