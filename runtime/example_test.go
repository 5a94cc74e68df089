package runtime_test

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

func ExampleParseTopology() {
	for _, s := range []string{"v5p-32", "v6e-8", "tpu7x-8", "tpu7x:2,2,1,2"} {
		t, err := runtime.ParseTopology(s)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: %d chips, %d devices on %d hosts, %d GiB each\n", t, t.Chips, t.Devices, t.Hosts, t.HBMPerDevice()/runtime.GiB)
	}
	// Output:
	// v5p-32 (2x2x4): 16 chips, 16 devices on 4 hosts, 95 GiB each
	// v6e-8 (2x4): 8 chips, 8 devices on 1 hosts, 32 GiB each
	// tpu7x-8 (2x2x1): 4 chips, 8 devices on 1 hosts, 96 GiB each
	// tpu7x-8 (2x2x1): 4 chips, 8 devices on 1 hosts, 96 GiB each
}

func ExampleGeneration_PaddedBytes() {
	v6e, _ := runtime.LookupGeneration("v6e")
	v7, _ := runtime.LookupGeneration("tpu7x")
	shape := []int64{100, 64} // rows to 8 (16 on TPU7x), head_dim 64 to 128 lanes
	fmt.Println(runtime.RawBytes(statedict.BFloat16, shape), v6e.PaddedBytes(statedict.BFloat16, shape), v7.PaddedBytes(statedict.BFloat16, shape))
	fmt.Println(v6e.NativeWeight(statedict.Float8E4M3FN), v7.NativeWeight(statedict.Float8E4M3FN))
	// Output:
	// 12800 26624 28672
	// false true
}

func ExampleSharding_Chunk() {
	// Five rows over four ranks, as torch.chunk splits them: 2, 2, 1 and an empty shard,
	// whose offset DTensor reports as the dimension's size.
	m, _ := runtime.ParseMesh("fsdp=4")
	s := runtime.Sharding{Placements: []runtime.Placement{runtime.Shard(0)}}
	for r := range 4 {
		c, _ := s.Chunk([]int64{5, 3}, m, r)
		fmt.Println(r, c.Offsets, c.Sizes)
	}
	// Output:
	// 0 [0 0] [2 3]
	// 1 [2 0] [2 3]
	// 2 [4 0] [1 3]
	// 3 [5 0] [0 3]
}

func ExamplePlan_Sharding() {
	m, _ := runtime.ParseMesh("fsdp=4,tp=2")
	var builtin *runtime.Plan // nil: the built-in rule tables
	for _, t := range []struct {
		name  string
		shape []int64
	}{
		{"model.layers.0.self_attn.q_proj.weight", []int64{4096, 4096}}, // column-parallel
		{"model.layers.0.self_attn.o_proj.weight", []int64{4096, 4096}}, // row-parallel
		{"model.norm.weight", []int64{4096}},                            // replicated on tp
	} {
		s, _ := builtin.Sharding(t.name, t.shape, m)
		fmt.Println(t.name, s)
	}
	// Output:
	// model.layers.0.self_attn.q_proj.weight (Shard(dim=0), Shard(dim=0)) order [1 0]
	// model.layers.0.self_attn.o_proj.weight (Shard(dim=0), Shard(dim=1))
	// model.norm.weight (Shard(dim=0), Replicate())
}

func ExampleChunk_ByteRanges() {
	// Rank 1 of a row-parallel [4, 8] float32 weight on tp=2 needs columns 4–7 of each row.
	m, _ := runtime.ParseMesh("tp=2")
	s := runtime.Sharding{Placements: []runtime.Placement{runtime.Shard(1)}}
	shape := []int64{4, 8}
	c, _ := s.Chunk(shape, m, 1)
	for r := range c.ByteRanges(shape, statedict.ContiguousStrides(shape), 0, 4) {
		fmt.Println(r.Offset, r.Length)
	}
	// Output:
	// 16 16
	// 48 16
	// 80 16
	// 112 16
}
