package formats

import (
	"fmt"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/accelerate"
	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/formats/diffusers"
	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/formats/megatron"
	"github.com/ckpt-dev/ckpt/formats/nemo"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/formats/store"
	"github.com/ckpt-dev/ckpt/formats/zero"
	"github.com/ckpt-dev/ckpt/statedict"
)

// DCP is the format name of torch.distributed.checkpoint directories.
const DCP Kind = "dcp"

// openDir reads a folder: a torch.distributed.checkpoint directory (it has `.metadata`), a
// per-device safetensors folder (it has sharding.json), a DeepSpeed ZeRO checkpoint
// (consolidated), a Megatron-LM save folder (legacy rank files or torch_dist), a NeMo 2
// checkpoint (context/ + weights/), an accelerate FSDP save_state folder
// (pytorch_model_fsdp_N/), a diffusers pipeline (model_index.json) or a Hugging Face model or PEFT
// adapter folder.
func openDir(dir string) (*statedict.Checkpoint, error) {
	if nemo.Detect2(dir) {
		return nemo.Open2(dir, megatronOpeners)
	}
	if megatron.Detect(dir) {
		return megatron.Open(dir, megatronOpeners)
	}
	if _, err := store.Stat(store.Join(dir, ".metadata")); err == nil {
		return dcp.Open(dir)
	}
	if isRanksFolder(dir) {
		return openRanks(dir)
	}
	if tag, ok := zero.Detect(dir); ok {
		return zero.Open(tag, openPart)
	}
	if models := accelerate.Detect(dir); len(models) > 0 {
		return accelerate.Open(dir, models, dcp.Open)
	}
	if diffusers.Detect(dir) {
		return diffusers.Open(dir, openDir, holdsWeights)
	}
	if _, ok := hf.Detect(dir); ok {
		return hf.Open(dir, openFile)
	}
	err := fmt.Errorf("%s: not a checkpoint folder (no DCP .metadata, no model.safetensors, pytorch_model.bin or index file)", dir)
	if files := hf.WeightFiles(dir); len(files) > 0 {
		err = fmt.Errorf("%w; it holds %s: pass a file itself (ckpt reads any single checkpoint file)", err, strings.Join(files, ", "))
	}
	return nil, err
}

// holdsWeights reports whether the folder dir is one openDir reads as a checkpoint of its
// own (a DCP folder, a Hugging Face or PEFT folder).
func holdsWeights(dir string) bool {
	if _, err := store.Stat(store.Join(dir, ".metadata")); err == nil {
		return true
	}
	_, ok := hf.Detect(dir)
	return ok
}

// megatronOpeners read the parts of Megatron and NeMo checkpoints: rank and common.pt
// files as any checkpoint file, the sharded entries as DCP.
var megatronOpeners = megatron.Openers{File: openPart, DCP: dcp.Open}

func openSafetensors(path string) (*statedict.Checkpoint, error) {
	return safetensors.Open(path)
}
