// Package ckpterr holds the errors every part of ckpt returns for bad input, so that a
// caller can sort any failure whatever the format, store or step that found it.
//
// Three sentinels name what kind of failure it is; test for them with errors.Is:
//
//   - [ErrCorrupt]: the input breaks its format's rules — truncated, inconsistent, out of
//     bounds, a record missing. The file is at fault, and the program that wrote it (or the
//     copy that cut it short) is where to look.
//   - [ErrUnsupported]: well-formed input, or a requested output, that ckpt does not handle:
//     a compression method, a stream transform, an input larger than a decoder's limits, a
//     backend that cannot write. Another tool, or a later ckpt, may read it.
//   - [ErrDangerous]: the input references code that Python's pickle would run if the file
//     were loaded the way its producer loads it. ckpt never runs it.
//
// A failure that is none of these is an I/O error (the operating system's, the network's,
// an object store's answer; see [CorruptCause]), a cancelled context, or a typed error of
// the package that returned it (a usage mistake, a plan that does not fit, ...).
//
// Where the failure has a position, it is a [*FormatError]: the one positional error type
// of every reader (safetensors, torch zip and legacy streams, DCP, pickle, npy, tar), as
// archive/zip and debug/elf each have one. It names the file, the format being read, the
// item at fault (a tensor, a record, an archive member, a pickle opcode) and the absolute
// byte offset, and wraps the cause — which may be another reader's FormatError, as a
// pickle's inside a torch zip record. errors.Is(err, ErrCorrupt) holds for a FormatError exactly when
// [CorruptCause] says its cause means a broken file; ErrUnsupported and ErrDangerous are
// found in the cause itself.
//
// The package imports only the standard library, so every package of the module, and
// every caller, can use it without pulling in a reader.
package ckpterr
