package verify_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/verify"
)

// benchF32 writes n float32 values of a fixed pseudo-random sequence.
type benchF32 struct {
	n    int
	seed uint64
}

func (s benchF32) WriteTo(w io.Writer) (int64, error) {
	r := rand.New(rand.NewPCG(s.seed, 1))
	buf := make([]byte, 0, 1<<16)
	var done int64
	for i := range s.n {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(float32(r.NormFloat64())))
		if len(buf) == cap(buf) || i == s.n-1 {
			m, err := w.Write(buf)
			done += int64(m)
			if err != nil {
				return done, err
			}
			buf = buf[:0]
		}
	}
	return done, nil
}

// BenchmarkParity measures tensor parity of a 256 MiB float32 safetensors checkpoint
// (64 matrices of 1024×1024) against its conversion: a copy compared bit for bit, and a
// bfloat16 cast compared against torch's rounding of every element. Bytes are the source's.
func BenchmarkParity(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "src.safetensors")
	const tensors, rows, cols = 64, 1024, 1024
	var plan []safetensors.TensorInfo
	for i := range tensors {
		plan = append(plan, safetensors.TensorInfo{Name: fmt.Sprintf("model.layers.%d.weight", i), DType: "F32", Shape: []int64{rows, cols}})
	}
	f, err := os.Create(src)
	if err != nil {
		b.Fatal(err)
	}
	w, err := safetensors.NewWriter(f, plan, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i, p := range plan {
		if err := w.WriteTensor(p.Name, benchF32{rows * cols, uint64(i)}); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	for _, tc := range []struct {
		name  string
		dtype statedict.DType
		args  []string
	}{{"exact", statedict.Invalid, nil}, {"cast-bf16", statedict.BFloat16, []string{"--dtype", "bfloat16"}}} {
		dst := filepath.Join(dir, tc.name+".safetensors")
		convertTo(b, src, dst, formats.SafetensorsFile, tc.args, func(o *convert.Options) { o.Plan.DType = tc.dtype })
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(tensors * rows * cols * 4)
			for b.Loop() {
				rep, err := verify.Parity(b.Context(), src, dst, verify.ParityOptions{})
				if err != nil || !rep.OK() || rep.Pairs != tensors {
					b.Fatalf("%v %+v", err, rep)
				}
			}
		})
	}
}
