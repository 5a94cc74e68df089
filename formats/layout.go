package formats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Layout is an on-disk layout ckpt writes — the one vocabulary of outputs: what a user asks
// for (torch, safetensors, dcp: the layouts whose names are formats), what ChooseLayout
// makes of it for a destination, what the conversion's record says was written. Its
// capabilities (Folder, Tree, PerRank, Ext) and writer come from one table.
type Layout string

// The layouts ckpt writes.
const (
	// TorchFile is a torch.save zip archive, which torch.load(weights_only=True) reads.
	TorchFile Layout = "torch"
	// SafetensorsFile is one .safetensors file of the tensors (other values left out).
	SafetensorsFile Layout = "safetensors"
	// HFFolder is a Hugging Face model folder: safetensors shards, their index, and the
	// source folder's configuration and tokenizer files.
	HFFolder Layout = "hf"
	// DCPFolder is a torch.distributed.checkpoint directory: one data file per rank when
	// sharded.
	DCPFolder Layout = "dcp"
	// SafetensorsRanks is a per-device safetensors folder: one file per rank holding its
	// pieces of every tensor, and a sharding manifest (safetensors.Sharding).
	SafetensorsRanks Layout = "safetensors-ranks"
)

// layoutInfo is what a layout is and how it is written.
type layoutInfo struct {
	write statedict.Writer
	// finish completes a per-rank output written in parts (nil: not per rank).
	finish       statedict.Finisher
	folder, tree bool
	ext          string
}

// layouts is the table of output layouts.
var layouts = map[Layout]layoutInfo{
	TorchFile:        {write: torchzip.WriteCheckpoint, tree: true, ext: ".pt"},
	SafetensorsFile:  {write: safetensors.WriteCheckpoint, ext: ".safetensors"},
	HFFolder:         {write: components(hf.Write), folder: true},
	DCPFolder:        {write: components(dcp.Write), folder: true, tree: true, finish: dcp.Finish},
	SafetensorsRanks: {write: safetensors.WriteRanks, folder: true, finish: safetensors.FinishRanks},
}

// Valid reports whether l is a layout ckpt writes.
func (l Layout) Valid() bool {
	_, ok := layouts[l]
	return ok
}

// Folder reports whether the layout is a folder of files rather than one file.
func (l Layout) Folder() bool { return layouts[l].folder }

// Tree reports whether the layout holds a whole checkpoint tree (non-tensor values,
// nesting); flat layouts hold named tensors only.
func (l Layout) Tree() bool { return layouts[l].tree }

// PerRank reports whether the layout is one file per rank of a distributed job, taking a
// statedict.Sharding (and written in parts, one per host, that Finisher completes).
func (l Layout) PerRank() bool { return layouts[l].finish != nil }

// Format is the format the layout is written in, as a user names it: torch, safetensors
// (a file, a Hugging Face folder or one file per rank) or dcp.
func (l Layout) Format() string {
	switch l {
	case HFFolder, SafetensorsRanks:
		return string(SafetensorsFile)
	}
	return string(l)
}

// Ext is the extension of a single-file layout's file ("" for a folder).
func (l Layout) Ext() string { return layouts[l].ext }

// Writer writes the layout (nil for an invalid layout).
func (l Layout) Writer() statedict.Writer { return layouts[l].write }

// Finisher completes a per-rank output written in parts (nil when not PerRank).
func (l Layout) Finisher() statedict.Finisher { return layouts[l].finish }

// ParseLayout parses a layout name.
func ParseLayout(s string) (Layout, error) {
	if l := Layout(s); l.Valid() {
		return l, nil
	}
	names := make([]string, 0, len(layouts))
	for l := range layouts {
		names = append(names, string(l))
	}
	slices.Sort(names)
	return "", fmt.Errorf("output layout %q: one of %s", s, strings.Join(names, ", "))
}

// ErrLayout marks a layout that cannot be written where or as it was asked.
var ErrLayout = errors.New("output layout")

// ErrEarlierOutput marks a destination folder that is itself an earlier output, where a
// single-file output would be written inside (with ErrLayout).
var ErrEarlierOutput = errors.New("the destination folder is an earlier output, not a folder to write into")

// ChooseLayout applies the destination rules (docs/formats.md, "Where the output goes") to
// a conversion of src into dst: the output path and the layout written. want is the layout
// asked for — TorchFile, SafetensorsFile or DCPFolder as a format, any other layout as it
// is, "" to let the source and destination decide; perRank is set for an output written
// per device (one file per rank).
//
//   - DST ending in .safetensors, .pt, .pth or .bin names a file of that format (a folder
//     there is refused, not written into).
//   - A folder source, a DST ending in "/" or an existing folder (not a link to one) give a
//     folder output:
//     with safetensors or without a format a Hugging Face folder (a DCP source, a DCP
//     folder), with dcp a DCP folder — at DST itself, the configuration and tokenizer files
//     carried along.
//   - A single-file format (torch, or a file source without a format) with a folder DST
//     writes a file inside it named after the source, as cp does — unless the folder is
//     itself an earlier output (it holds a ckpt manifest): a second checkpoint inside it
//     would go unrecorded by that manifest, and is refused (ErrLayout).
//   - Otherwise DST is a torch.save file.
//   - Per rank, the output is a folder: dcp by default, safetensors as one file per rank;
//     a torch.save file holds whole tensors and cannot be.
func ChooseLayout(ctx context.Context, src, dst string, want Layout, perRank bool) (string, Layout, error) {
	if want != "" && !want.Valid() {
		_, err := ParseLayout(string(want))
		return "", "", fmt.Errorf("%w: %w", ErrLayout, err)
	}
	if perRank {
		return chooseRanks(dst, want)
	}
	st, err := storage.Stat(ctx, src)
	srcDir := err == nil && st.IsDir()
	ext := strings.ToLower(path.Ext(filepath.ToSlash(strings.TrimRight(dst, "/"+string(filepath.Separator)))))
	dstDir := strings.HasSuffix(dst, "/") || strings.HasSuffix(dst, string(filepath.Separator)) || !fileExt[ext] && isFolder(ctx, dst)
	if dstDir {
		dst = strings.TrimRight(dst, "/"+string(filepath.Separator))
		if dst == "" {
			dst = "/"
		}
	}
	inside := func(l Layout) (string, Layout, error) {
		if st, err := storage.Stat(ctx, storage.Join(dst, manifest.Name)); err == nil && !st.IsDir() {
			return "", "", fmt.Errorf("%w: %w: %s holds %s: a %s file written inside would go unrecorded", ErrLayout, ErrEarlierOutput, dst, manifest.Name, l)
		}
		base := strings.TrimSuffix(storage.Base(src), path.Ext(storage.Base(src)))
		return storage.Join(dst, base+l.Ext()), l, nil
	}
	switch want {
	case TorchFile:
		if dstDir {
			return inside(TorchFile)
		}
		return dst, TorchFile, nil
	case SafetensorsFile:
		if dstDir || ext != ".safetensors" {
			return dst, HFFolder, nil
		}
		return dst, SafetensorsFile, nil
	case "":
	default:
		return dst, want, nil
	}
	switch {
	case ext == ".safetensors" && !dstDir:
		return dst, SafetensorsFile, nil
	case (ext == ".pt" || ext == ".pth" || ext == ".bin") && !dstDir:
		return dst, TorchFile, nil
	case srcDir && dcp.IsCheckpoint(ctx, src):
		return dst, DCPFolder, nil
	case srcDir:
		return dst, HFFolder, nil
	case dstDir:
		if strings.HasSuffix(strings.ToLower(src), ".safetensors") {
			return inside(SafetensorsFile)
		}
		return inside(TorchFile)
	}
	return dst, TorchFile, nil
}

// fileExt are the extensions that make a DST name a file, even where a folder of that
// name exists (which the conversion then refuses to replace, never writing into it).
var fileExt = map[string]bool{".safetensors": true, ".pt": true, ".pth": true, ".bin": true}

// isFolder reports whether dst is an existing folder — a folder itself, not a link to one:
// a link planted at DST never leads the output somewhere else.
func isFolder(ctx context.Context, dst string) bool {
	if storage.IsRemote(dst) {
		st, err := storage.Stat(ctx, dst)
		return err == nil && st.IsDir()
	}
	st, err := os.Lstat(dst)
	return err == nil && st.IsDir()
}

// chooseRanks is ChooseLayout for a per-rank output.
func chooseRanks(dst string, want Layout) (string, Layout, error) {
	dst = strings.TrimRight(dst, "/"+string(filepath.Separator))
	switch want {
	case "", DCPFolder:
		return dst, DCPFolder, nil
	case SafetensorsFile, SafetensorsRanks:
		if strings.HasSuffix(strings.ToLower(dst), ".safetensors") {
			return "", "", fmt.Errorf("%w: %s: a per-device safetensors output is a folder (one file per rank), not a .safetensors file", ErrLayout, dst)
		}
		return dst, SafetensorsRanks, nil
	}
	return "", "", fmt.Errorf("%w: a %s output holds whole tensors: a per-device output is a dcp or safetensors folder", ErrLayout, want)
}
