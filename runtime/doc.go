// Package runtime is ckpt's model of the TPU a checkpoint is converted for: which chips,
// how many devices, how much memory each has once TPU tile padding is counted, and which
// device holds which slice of every tensor. (The name shadows the standard library's runtime
// package in files that import it.)
//
// The pieces, from hardware to tensors:
//
//   - Generation is the catalogue (v4, v5e, v5p, v6e Trillium, TPU7x Ironwood): HBM per
//     device, devices per chip (TPU7x: 2, so the world size is twice the chips), chips per
//     host, the dtypes the matrix units multiply natively (float8_e4m3fn on TPU7x only; FP4
//     nowhere), and the (8·32/bits, 128) HBM tiling with PaddedBytes.
//   - Topology is a slice parsed from an accelerator type (v5p-32), a topology string
//     (v6e:4x4) or TorchTPU's TORCH_TPU_TOPOLOGY (tpu7x:2,2,1,2): chips, devices, hosts,
//     and which host drives which device (host-major, as torchrun numbers ranks).
//   - Mesh is a logical device mesh (dp=2,fsdp=2,tp=2) over those ranks, row-major as
//     torch's DeviceMesh lays it.
//   - Placement and Sharding are DTensor's placements: Shard(dim), split with torch.chunk
//     (uneven sizes and empty trailing shards included), and Replicate(). Sharding.Chunk
//     gives a rank's chunk — the offsets and sizes DTensor computes and DCP records — and
//     Chunk.ByteRanges the source bytes that chunk is made of.
//   - Plan assigns shardings by rule tables per mesh axis kind: FSDP2's Shard(0) on fsdp,
//     Megatron-style tensor parallelism for the Llama/Qwen/Mistral family on tp (TPRules),
//     stacked MoE experts on ep (EPRules), replication on dp and cp; a JSON plan file
//     overrides them. StateSharding makes optimizer state follow its parameter.
//   - PlanMemory adds it up per device, raw and padded, against HBM, and when the fullest
//     device does not fit plans the changes that would make it fit.
//   - Target bundles device tag, generation, topology, mesh and plan for a conversion.
//
// Facts and their sources are cited where they are used; the research notes are in
// tpu.md §1.2–2 of the project's shared research. DTensor's semantics are checked against
// torch 2.14 (testdata/runtime/gen_chunks.py).
package runtime
