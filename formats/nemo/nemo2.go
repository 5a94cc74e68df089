package nemo

import (
	"context"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/formats/megatron"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Format2 is the statedict.Checkpoint.Format of NeMo 2 checkpoint folders.
const Format2 = "nemo2"

// Folders of a NeMo 2 checkpoint.
const (
	ContextDir = "context"
	WeightsDir = "weights"
)

// Detect2 reports whether dir is a NeMo 2 checkpoint: context/ (the serialized model and
// trainer configuration, tokenizer files) beside weights/, a Megatron-core torch_dist
// folder.
func Detect2(ctx context.Context, dir string) bool {
	st, err := storage.Stat(ctx, storage.Join(dir, ContextDir))
	return err == nil && st.IsDir() && megatron.IsDist(ctx, storage.Join(dir, WeightsDir))
}

// Open2 reads the NeMo 2 checkpoint at dir as the Megatron torch_dist checkpoint under
// weights/, with every file of context/ carried as an extra ("context/model.yaml").
func Open2(ctx context.Context, dir string, op megatron.Openers) (_ *statedict.Checkpoint, err error) {
	folder, err := hf.OpenFolder(ctx, dir)
	if err != nil {
		return nil, err
	}
	ck := &statedict.Checkpoint{Format: Format2, Path: dir, Files: folder, Closers: []io.Closer{folder}}
	defer func() {
		if err != nil {
			ck.Close()
		}
	}()
	w, err := megatron.Open(ctx, storage.Join(dir, WeightsDir), op)
	if err != nil {
		return nil, err
	}
	ck.Root, ck.Shards = w.Root, w.Shards
	ck.Closers = append(ck.Closers, w.Closers...)
	for _, f := range w.Ignored {
		ck.Ignored = append(ck.Ignored, path.Join(WeightsDir, f))
	}
	// context/ walked where it lies (a local folder or a bucket prefix); names relative to dir.
	ctxDir := storage.Join(dir, ContextDir)
	err = storage.WalkDir(ctx, ctxDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := path.Join(ContextDir, filepath.ToSlash(strings.TrimPrefix(p, ctxDir)))
		switch {
		case d.IsDir():
		case !folder.Confined(name):
			ck.Outside = append(ck.Outside, name)
		case d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0:
			ck.Extras = append(ck.Extras, name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	entries, err := storage.ReadDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if n := e.Name(); n != ContextDir && n != WeightsDir {
			ck.Ignored = append(ck.Ignored, n)
		}
	}
	sort.Strings(ck.Extras)
	return ck, nil
}
