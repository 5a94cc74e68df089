package formats

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/accelerate"
	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/formats/diffusers"
	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/formats/megatron"
	"github.com/ckpt-dev/ckpt/formats/nemo"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/formats/zero"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// folderReader is a folder layout ckpt reads: how it is recognized and how it is read.
type folderReader struct {
	// layout names it in messages.
	layout string
	detect func(ctx context.Context, dir string) bool
	open   func(ctx context.Context, dir string) (*statedict.Checkpoint, error)
}

// folderReaders are the folder layouts ckpt reads, in the order they are tried (the more
// specific first: a NeMo 2 or Megatron folder holds DCP folders, a diffusers pipeline HF
// ones), the reading side of the layouts table. Set in init: some readers read their
// parts with openDir, which reads this table.
var folderReaders []folderReader

func init() {
	folderReaders = []folderReader{
		{"NeMo 2", nemo.Detect2, func(ctx context.Context, d string) (*statedict.Checkpoint, error) {
			return nemo.Open2(ctx, d, megatronOpeners)
		}},
		{"Megatron-LM", megatron.Detect, func(ctx context.Context, d string) (*statedict.Checkpoint, error) {
			return megatron.Open(ctx, d, megatronOpeners)
		}},
		{"DCP", dcp.IsCheckpoint, dcp.Open},
		{"per-device safetensors", isRanksFolder, openRanks},
		{"DeepSpeed ZeRO", func(ctx context.Context, d string) bool { _, ok := zero.Detect(ctx, d); return ok }, func(ctx context.Context, d string) (*statedict.Checkpoint, error) {
			tag, _ := zero.Detect(ctx, d)
			return zero.Open(ctx, tag, openPart)
		}},
		{"accelerate FSDP", func(ctx context.Context, d string) bool { return len(accelerate.Detect(ctx, d)) > 0 }, func(ctx context.Context, d string) (*statedict.Checkpoint, error) {
			return accelerate.Open(ctx, d, accelerate.Detect(ctx, d), dcp.Open)
		}},
		{"diffusers", diffusers.Detect, func(ctx context.Context, d string) (*statedict.Checkpoint, error) {
			return diffusers.Open(ctx, d, openDir, holdsWeights)
		}},
		{"Hugging Face", func(ctx context.Context, d string) bool { _, ok := hf.Detect(ctx, d); return ok }, func(ctx context.Context, d string) (*statedict.Checkpoint, error) {
			return hf.Open(ctx, d, openFile)
		}},
		{"per-rank DTensor saves", isDTensorFolder, openDTensorRanks},
	}
}

// openDir reads a folder with the first of folderReaders that recognizes it: a NeMo 2
// checkpoint (context/ + weights/), a Megatron-LM save folder (legacy rank files or
// torch_dist), a torch.distributed.checkpoint directory (it has `.metadata`), a per-device
// safetensors folder (it has sharding.json), a DeepSpeed ZeRO checkpoint (consolidated), an
// accelerate FSDP save_state folder (pytorch_model_fsdp_N/), a diffusers pipeline
// (model_index.json) or a Hugging Face model or PEFT adapter folder.
func openDir(ctx context.Context, dir string) (*statedict.Checkpoint, error) {
	for _, r := range folderReaders {
		if r.detect(ctx, dir) {
			return r.open(ctx, dir)
		}
	}
	err := fmt.Errorf("%s: not a checkpoint folder (no DCP .metadata, no model.safetensors, pytorch_model.bin or index file)", dir)
	if files := hf.WeightFiles(ctx, dir); len(files) > 0 {
		err = fmt.Errorf("%w; it holds %s: pass a file itself (ckpt reads any single checkpoint file)", err, strings.Join(files, ", "))
	} else if steps := trainerCheckpoints(ctx, dir); len(steps) > 0 {
		list := strings.Join(steps, ", ")
		if len(steps) > 4 {
			list = strings.Join(steps[:2], ", ") + ", … " + steps[len(steps)-1]
		}
		err = fmt.Errorf("%w; it is a Trainer output folder holding the checkpoints %s: name one, e.g. %s (the latest step)", err, list, storage.Join(dir, steps[len(steps)-1]))
	}
	return nil, err
}

// trainerCheckpoints lists the checkpoint-STEP folders of a Hugging Face Trainer's (or
// accelerate's) output folder dir, by step.
func trainerCheckpoints(ctx context.Context, dir string) []string {
	entries, err := storage.ReadDir(ctx, dir)
	if err != nil {
		return nil
	}
	type step struct {
		name string
		n    int
	}
	var steps []step
	for _, e := range entries {
		num, ok := strings.CutPrefix(e.Name(), "checkpoint-")
		if n, err := strconv.Atoi(num); ok && err == nil && n >= 0 && e.IsDir() {
			steps = append(steps, step{e.Name(), n})
		}
	}
	slices.SortFunc(steps, func(a, b step) int { return a.n - b.n })
	names := make([]string, len(steps))
	for i, s := range steps {
		names[i] = s.name
	}
	return names
}

// holdsWeights reports whether the folder dir is one openDir reads as a checkpoint of its
// own (a DCP folder, a Hugging Face or PEFT folder).
func holdsWeights(ctx context.Context, dir string) bool {
	if dcp.IsCheckpoint(ctx, dir) {
		return true
	}
	_, ok := hf.Detect(ctx, dir)
	return ok
}

// megatronOpeners read the parts of Megatron and NeMo checkpoints: rank and common.pt
// files as any checkpoint file, the sharded entries as DCP.
var megatronOpeners = megatron.Openers{File: openPart, DCP: dcp.Open}

func openSafetensors(ctx context.Context, path string) (*statedict.Checkpoint, error) {
	return safetensors.Open(ctx, path)
}
