package quant_test

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/statedict"
)

// BenchmarkDequantize dequantizes every quantized group into memory, as bfloat16 and
// float32, reporting Gelem/s per scheme: one read of the whole lazy storage into a
// buffer, which splits the work over GOMAXPROCS goroutines — the whole tensor in
// memory, as the reference dequantizers return it. It dequantizes the checkpoint
// folder named by CKPT_BENCH_DEQUANT (scripts/bench/dequant.sh sets it to the
// 8192×8192 block-FP8 and 32×2880×2880 MXFP4 tensors it times the reference code on),
// or else small synthetic tensors of each kind.
func BenchmarkDequantize(b *testing.B) {
	var groups []*quant.Group
	if dir := os.Getenv("CKPT_BENCH_DEQUANT"); dir != "" {
		ck, err := formats.Open(context.Background(), dir)
		if err != nil {
			b.Fatal(err)
		}
		defer ck.Close()
		cfg, err := quant.LoadConfig(ck)
		if err != nil {
			b.Fatal(err)
		}
		tensors, err := ck.Tensors()
		if err != nil {
			b.Fatal(err)
		}
		plan, err := quant.Detect(cfg, tensors)
		if err != nil {
			b.Fatal(err)
		}
		groups = plan.Groups
	} else {
		groups = syntheticGroups(b)
	}
	for _, g := range groups {
		for _, dt := range []statedict.DType{statedict.BFloat16, statedict.Float32} {
			b.Run(string(g.Scheme)+"/"+dt.String(), func(b *testing.B) {
				out, err := g.Dequantize(dt)
				if err != nil {
					b.Fatal(err)
				}
				// The destination is faulted in before timing: ckpt's reads fill buffers
				// their caller reuses.
				buf := make([]byte, out.NBytes())
				if _, err := out.Storage.ReadAt(buf, 0); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(out.NBytes())
				for b.Loop() {
					if _, err := out.Storage.ReadAt(buf, 0); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(out.NumEl())*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
			})
		}
	}
}

// syntheticGroups builds a 2048×2048 block-FP8 weight, a 1024×2048 NVFP4 weight and 4
// MXFP4 experts of 1024×1024 from random bytes.
func syntheticGroups(b testing.TB) []*quant.Group {
	r := rand.New(rand.NewPCG(5, 6))
	random := func(n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		return p
	}
	scales := make([]uint32, 16*16)
	for i := range scales {
		scales[i] = 0x3A800000 + uint32(r.IntN(1<<23))
	}
	var groups []*quant.Group
	for _, c := range []struct {
		config  string
		tensors []statedict.NamedTensor
	}{{`{"quantization_config": {"quant_method": "fp8"}}`, []statedict.NamedTensor{
		{Name: "l.weight", Tensor: mem(statedict.Float8E4M3FN, []int64{2048, 2048}, random(2048*2048))},
		{Name: "l.weight_scale_inv", Tensor: mem(statedict.Float32, []int64{16, 16}, f32s(scales...))},
	}}, {`{"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}`, []statedict.NamedTensor{
		{Name: "n.weight", Tensor: mem(statedict.Uint8, []int64{1024, 1024}, random(1024*1024))},
		{Name: "n.weight_scale", Tensor: mem(statedict.Float8E4M3FN, []int64{1024, 128}, random(1024*128))},
		{Name: "n.weight_scale_2", Tensor: mem(statedict.Float32, []int64{}, f32s(0x3AA137F4))},
	}}, {`{"quantization_config": {"quant_method": "mxfp4"}}`, []statedict.NamedTensor{
		{Name: "e.down_proj_blocks", Tensor: mem(statedict.Uint8, []int64{4, 1024, 32, 16}, random(4*1024*32*16))},
		{Name: "e.down_proj_scales", Tensor: mem(statedict.Uint8, []int64{4, 1024, 32}, random(4*1024*32))},
	}}} {
		cfg, err := quant.ParseConfig([]byte(c.config), nil)
		if err != nil {
			b.Fatal(err)
		}
		plan, err := quant.Detect(cfg, c.tensors)
		if err != nil {
			b.Fatal(err)
		}
		groups = append(groups, plan.Groups...)
	}
	return groups
}
