// Package accelerate reads the folders Hugging Face accelerate's Accelerator.save_state
// writes when FSDP saves a sharded state dict (SHARDED_STATE_DICT): each model as a DCP
// folder pytorch_model_fsdp_N/ of {"model": state dict}, each optimizer as optimizer_N/ of
// {"optimizer": state by parameter name}, beside scheduler.bin, random_states_N.pkl and
// the other files save_accelerator_state writes (accelerate/utils/fsdp_utils.py
// save_fsdp_model, save_fsdp_optimizer; accelerate/checkpointing.py).
//
// The folder reads as the model accelerate's load_fsdp_model loads: the DCP's "model"
// entry (several models: each under its folder's name). The training state — the
// optimizer folders and files — is listed as ignored for convert to carry: the files as
// an HF Trainer folder's are, each optimizer_N/ folder copied as it is into folder outputs
// (a DCP holds no device tags) and read into a torch file's tree. (A save_state folder
// without FSDP holds model.safetensors or pytorch_model.bin and reads as a Hugging Face
// folder.)
package accelerate

import (
	"context"
	"fmt"
	"io"
	"maps"
	"regexp"
	"sort"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Format is the statedict.Checkpoint.Format of these folders.
const Format = "accelerate-fsdp"

var modelDir = regexp.MustCompile(`^pytorch_model_fsdp_\d+$`)

// Detect returns the model folders (pytorch_model_fsdp_N holding a DCP .metadata) of dir,
// in order; none when dir is not such a folder.
func Detect(ctx context.Context, dir string) []string {
	entries, err := storage.ReadDir(ctx, dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && modelDir.MatchString(e.Name()) {
			if dcp.IsCheckpoint(ctx, storage.Join(dir, e.Name())) {
				out = append(out, e.Name())
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) < len(out[j])
		}
		return out[i] < out[j]
	})
	return out
}

// Open reads the folder dir whose model folders are models (see Detect); openDCP reads a
// DCP folder.
func Open(ctx context.Context, dir string, models []string, openDCP func(context.Context, string) (*statedict.Checkpoint, error)) (_ *statedict.Checkpoint, err error) {
	folder, err := hf.OpenFolder(ctx, dir)
	if err != nil {
		return nil, err
	}
	ck := &statedict.Checkpoint{Format: Format, Path: dir, Files: folder, Closers: []io.Closer{folder}}
	defer func() {
		if err != nil {
			ck.Close()
		}
	}()
	root := statedict.NewDict("")
	for _, m := range models {
		if !folder.Confined(m) {
			ck.Outside = append(ck.Outside, m+"/")
			continue
		}
		d, err := openDCP(ctx, storage.Join(dir, m))
		if err != nil {
			return nil, err
		}
		ck.Closers = append(ck.Closers, d.Closers...)
		if d.Shards != nil { // a multi-rank FSDP save: keep each tensor's stored pieces
			if ck.Shards == nil {
				ck.Shards = map[*statedict.Tensor][]statedict.Shard{}
			}
			maps.Copy(ck.Shards, d.Shards)
		}
		top, _ := d.Root.(*statedict.Dict)
		var model statedict.Value
		if top != nil {
			model, _ = top.Get("model")
		}
		if model == nil {
			return nil, fmt.Errorf("%s: %w: accelerate saves a model as {\"model\": state dict}; this DCP has no \"model\" entry", storage.Join(dir, m), ckpterr.ErrCorrupt)
		}
		if len(models) == 1 {
			ck.Root = model
		} else {
			root.Set(m, model)
		}
	}
	if ck.Root == nil {
		if root.Len() == 0 {
			return nil, fmt.Errorf("%s: %w: every model folder leads outside the folder", dir, ckpterr.ErrCorrupt)
		}
		ck.Root = root
	}
	entries, err := storage.ReadDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case modelDir.MatchString(name) && e.IsDir():
		case !folder.Confined(name):
			ck.Outside = append(ck.Outside, name)
		case e.IsDir() && hf.IsTrainingStateFolder(name+"/"):
			ck.Ignored = append(ck.Ignored, name+"/")
			files, err := hf.FilesUnder(ctx, dir, name)
			if err != nil {
				return nil, err
			}
			ck.Extras = append(ck.Extras, files...)
		case e.IsDir():
			ck.Ignored = append(ck.Ignored, name+"/")
		default:
			ck.Ignored = append(ck.Ignored, name)
		}
	}
	return ck, nil
}
