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
	// DCPFolder is a torch.distributed.checkpoint directory.
	DCPFolder Layout = "dcp"
)

// LayoutWriter is a layout's writer and whether its output is a folder.
type LayoutWriter struct {
	Write  statedict.Writer
	Folder bool
	// Tree reports whether the layout holds a whole checkpoint tree (non-tensor values,
	// nesting); flat layouts hold named tensors only.
	Tree bool
}

// Writers lists the writer of every layout.
var Writers = map[Layout]LayoutWriter{
	TorchFile:       {Write: torchzip.WriteCheckpoint, Tree: true},
	SafetensorsFile: {Write: safetensors.WriteCheckpoint},
	HFFolder:        {Write: hf.Write, Folder: true},
	DCPFolder:       {Write: dcp.Write, Folder: true, Tree: true},
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
