// Package statedict is ckpt's in-memory checkpoint: what every format reader produces and
// every writer consumes. A Checkpoint is a tree of values — insertion-ordered dicts (string
// or int keys), lists, tuples, scalars, inert records of Python objects ckpt does not model,
// numpy data — whose leaves include tensors. A Tensor is a validated strided view (dtype,
// shape, strides, storage offset, lazy conj/neg bits, quantizer) of a Storage, which holds
// the bytes of one torch storage with the device tag it was saved with and is shared by all
// tensors viewing it, so tied weights stay tied through a conversion. Bytes are read lazily:
// usually straight from an mmap'd file, or computed on demand (casts, dequantization, DCP
// chunk assembly) through io.ReaderAt, and streamed as contiguous little-endian bytes by
// Tensor.WriteTo with bounded buffers.
//
// Writers of every format take a checkpoint through one contract (writer.go: Output,
// Writer, WriteOptions, Written). Per-rank layouts also take a Sharding — each tensor's
// pieces and the ranks holding them, decided by the TPU target (package runtime) — and can
// be written in parts, one per host, which a Finisher completes.
//
// The DType registry lists every torch 2.14 dtype with its element size, its typed-storage
// class and its safetensors name. Flattened names join dict keys and list indices with ".",
// as torch.distributed.checkpoint flattens state dicts.
package statedict
