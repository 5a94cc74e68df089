// Package ckpt is the map of ckpt's library: Go packages that read PyTorch training
// checkpoints without executing pickle code, and convert them for TPUs. This package holds
// no code; each entry point below lives in the package named by its link.
//
// # Open
//
// [github.com/ckpt-dev/ckpt/formats.Open] opens a checkpoint in any format it recognizes —
// a torch.save file (zip, legacy stream or tar), safetensors, a Hugging Face folder or hub
// cache snapshot, a torch.distributed.checkpoint directory, Lightning, DeepSpeed, NeMo and
// Megatron layouts — from a local path, gs:// or s3:// (the readers' files come through
// [github.com/ckpt-dev/ckpt/storage], every call under the caller's context). As
// archive/zip and debug/elf do beside their Open,
// [github.com/ckpt-dev/ckpt/formats.OpenFile] reads a single-file checkpoint from any
// io.ReaderAt and [github.com/ckpt-dev/ckpt/formats.OpenFS] any checkpoint, folders
// included, from an fs.FS (os.DirFS, embed.FS, an in-memory one). Each returns a
// [github.com/ckpt-dev/ckpt/statedict.Checkpoint]: the tree torch.load would build, with
// tensors that read their bytes lazily (memory-mapped where they can). Close it when done.
//
// # Iterate
//
// [github.com/ckpt-dev/ckpt/statedict.Checkpoint.Tensors] lists every tensor under its
// flattened name, [github.com/ckpt-dev/ckpt/statedict.Checkpoint.Tensor] finds one, and
// [github.com/ckpt-dev/ckpt/statedict.Walk] visits every value of the tree, tensors and
// Python data alike. [github.com/ckpt-dev/ckpt/optimizerstate.StateFor] finds a
// parameter's optimizer state (AdamW's moments) by the parameter's name.
//
// # Decode
//
// [github.com/ckpt-dev/ckpt/statedict.Tensor.Bytes] gives a tensor's bytes as stored;
// [github.com/ckpt-dev/ckpt/codec.Float32s] decodes its logical value to float32 (every
// dtype, FP8, MXFP4 and NVFP4 bit-exactly), and [github.com/ckpt-dev/ckpt/codec] holds the
// element codecs and torch's casts.
//
// # Inspect and scan
//
// [github.com/ckpt-dev/ckpt/inspect.Build] describes a checkpoint as `ckpt inspect` prints
// it; [github.com/ckpt-dev/ckpt/scan.Scan] lists every pickle the Python loaders would
// unpickle and every global they would import, without decoding anything.
//
// # Convert
//
// [github.com/ckpt-dev/ckpt/convert.Run] is `ckpt convert`: open, remap for the target
// (device tags, dtypes, names, dequantization, training state, sharding over a slice),
// write the output atomically with its manifest
// ([github.com/ckpt-dev/ckpt/manifest]); start from
// [github.com/ckpt-dev/ckpt/convert.DefaultOptions]. The decisions it applies are made once
// by [github.com/ckpt-dev/ckpt/plan.Make].
//
// # Verify
//
// [github.com/ckpt-dev/ckpt/verify.Check] checks an output against its manifest,
// [github.com/ckpt-dev/ckpt/verify.Parity] against its source tensor by tensor, and
// [github.com/ckpt-dev/ckpt/verify.Forward] runs both as models
// ([github.com/ckpt-dev/ckpt/verify/forward.Open]) and compares their logits.
//
// # Plan a slice
//
// [github.com/ckpt-dev/ckpt/runtime.ParseTopology] reads a TPU slice (v5p-32, v6e:4x4),
// [github.com/ckpt-dev/ckpt/runtime.NewTarget] builds the target a conversion shards for,
// and [github.com/ckpt-dev/ckpt/runtime.PlanMemory] is `ckpt plan`: each device's HBM,
// raw and padded to TPU tiles, and the changes that would make a model fit.
//
// # Errors
//
// Every failure of bad input, whichever package returns it, is in the family of
// [github.com/ckpt-dev/ckpt/ckpterr]: errors.Is sorts it as
// [github.com/ckpt-dev/ckpt/ckpterr.ErrCorrupt], [github.com/ckpt-dev/ckpt/ckpterr.ErrUnsupported]
// or [github.com/ckpt-dev/ckpt/ckpterr.ErrDangerous], and errors.As finds the reader's
// [github.com/ckpt-dev/ckpt/ckpterr.FormatError]: the format, file, item and byte offset.
//
// The command ckpt ([github.com/ckpt-dev/ckpt/cmd/ckpt]) is built on these.
package ckpt
