package formats

import (
	"fmt"
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
	HFFolder:         {Write: hf.Write, Folder: true},
	DCPFolder:        {Write: dcp.Write, Folder: true, Tree: true, Finish: dcp.Finish},
	SafetensorsRanks: {Write: safetensors.WriteRanks, Folder: true, Finish: safetensors.FinishRanks},
}

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
