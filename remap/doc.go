// Package remap is ckpt's map_location: it rewrites a checkpoint tree for its destination
// — device tags, dtypes, tensor names, the sub-tree to keep and what to drop — without
// reading tensor bytes, applying decisions made elsewhere. What each tensor is and what
// happens to it (an optimizer moment not cast, an RNG state kept on the CPU, a CUDA RNG
// state dropped) is package plan's to decide; remap applies those policies and the
// conversion's name rules (renames, wrapper prefixes, selection, drops), and reports what
// it did and where each source value went (Trace). Storages stay shared: tensors that
// shared a storage before share the remapped one, so tied weights stay tied.
//
// Plain turns the values torch.load(weights_only=True) refuses into the data they hold,
// before anything is decided about them.
package remap
