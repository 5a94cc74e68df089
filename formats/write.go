package formats

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Layout is an on-disk layout ckpt writes.
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

// LayoutWriter is a layout's writer and whether its output is a folder.
type LayoutWriter struct {
	Write  statedict.Writer
	Folder bool
	// Tree reports whether the layout holds a whole checkpoint tree (non-tensor values,
	// nesting); flat layouts hold named tensors only.
	Tree bool
	// Finish, for the per-rank layouts (those that take a statedict.Sharding), completes an
	// output whose ranks were written in parts; nil for the others.
	Finish statedict.Finisher
}

// Writers lists the writer of every layout.
var Writers = map[Layout]LayoutWriter{
	TorchFile:        {Write: torchzip.WriteCheckpoint, Tree: true},
	SafetensorsFile:  {Write: safetensors.WriteCheckpoint},
	HFFolder:         {Write: components(hf.Write), Folder: true},
	DCPFolder:        {Write: components(dcp.Write), Folder: true, Tree: true, Finish: dcp.Finish},
	SafetensorsRanks: {Write: safetensors.WriteRanks, Folder: true, Finish: safetensors.FinishRanks},
}

// Valid reports whether l is a layout ckpt writes.
func (l Layout) Valid() bool {
	_, ok := Writers[l]
	return ok
}

// components makes a folder layout's writer write a checkpoint made of components
// (statedict.Checkpoint.Components: a diffusers pipeline) one component per folder, each
// in the layout with its own weights name and metadata, then the checkpoint's extras (the
// pipeline's index and every component's configuration) at their paths.
func components(write statedict.Writer) statedict.Writer {
	return func(out statedict.Output, ck *statedict.Checkpoint, opts statedict.WriteOptions) (*statedict.Written, error) {
		if len(ck.Components) == 0 {
			return write(out, ck, opts)
		}
		root, ok := ck.Root.(*statedict.Dict)
		if !ok {
			return nil, fmt.Errorf("%s: a checkpoint of components holds a %T, not a dict of them", ck.Path, ck.Root)
		}
		all := &statedict.Written{Names: map[*statedict.Tensor]string{}, Tied: map[string]string{}}
		done := map[string]bool{}
		for _, c := range ck.Components {
			tree, ok := root.Get(c.Name)
			if !ok {
				continue // dropped or not selected
			}
			done[c.Name] = true
			o := opts
			o.Rewrite, o.Metadata = nil, c.Metadata
			part := &statedict.Checkpoint{Format: c.Format, Path: ck.Path, Root: tree, WeightsName: c.WeightsName}
			w, err := write(prefixed{out, c.Name}, part, o)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
			for _, f := range w.Files {
				all.Files = append(all.Files, c.Name+"/"+f)
			}
			all.Bytes += w.Bytes
			names := w.Names
			if names == nil {
				tensors, err := part.Tensors()
				if err != nil {
					return nil, err
				}
				names = map[*statedict.Tensor]string{}
				for _, nt := range tensors {
					names[nt.Tensor] = nt.Name
				}
			}
			for t, n := range names {
				all.Names[t] = statedict.JoinName(c.Name, n)
			}
			for a, b := range w.Tied {
				all.Tied[statedict.JoinName(c.Name, a)] = statedict.JoinName(c.Name, b)
			}
			for _, n := range w.NotWritten {
				all.NotWritten = append(all.NotWritten, statedict.JoinName(c.Name, n))
			}
			for _, n := range w.Kept {
				all.Kept = append(all.Kept, statedict.JoinName(c.Name, n))
			}
		}
		for _, e := range root.Entries() {
			if !done[statedict.KeyString(e.Key)] {
				return nil, fmt.Errorf("%s: %s is not one of the checkpoint's components", ck.Path, statedict.KeyString(e.Key))
			}
		}
		extras, err := statedict.CopyFiles(out, ck, opts.Rewrite)
		if err != nil {
			return nil, err
		}
		all.Files = append(all.Files, extras...)
		return all, nil
	}
}

// prefixed is the folder dir of an output, as an output of its own.
type prefixed struct {
	out statedict.Output
	dir string
}

func (p prefixed) Create(name string) (io.WriteCloser, error) {
	if name == "" {
		return nil, fmt.Errorf("%s: a component is a folder, not a file", p.Name())
	}
	return p.out.Create(p.dir + "/" + name)
}

func (p prefixed) Name() string { return filepath.Join(p.out.Name(), p.dir) }

// ParseLayout parses a layout name.
func ParseLayout(s string) (Layout, error) {
	l := Layout(s)
	if _, ok := Writers[l]; ok {
		return l, nil
	}
	names := make([]string, 0, len(Writers))
	for l := range Writers {
		names = append(names, string(l))
	}
	slices.Sort(names)
	return "", fmt.Errorf("output layout %q: one of %s", s, strings.Join(names, ", "))
}
