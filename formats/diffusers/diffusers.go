// Package diffusers reads diffusers pipeline folders: a root holding model_index.json,
// which names the pipeline's components, and one folder per component — model components
// (unet/, vae/, transformer/, text_encoder/, …) holding weights in any layout ckpt reads
// (diffusion_pytorch_model.safetensors, model.safetensors, shards, a DCP folder), the others
// (scheduler/, tokenizer/, feature_extractor/) configuration only.
//
// The pipeline reads as one checkpoint whose root maps each model component's name to its
// tree ("unet.conv_in.weight"), with statedict.Checkpoint.Components saying which entries
// are components, so that folder writers put each in its own folder again; model_index.json
// and every configuration file travel as the checkpoint's extras under their paths in the
// pipeline ("unet/config.json", "scheduler/scheduler_config.json").
package diffusers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Format is the statedict.Checkpoint.Format of pipelines.
const Format = "diffusers-pipeline"

// IndexFile names a pipeline's components.
const IndexFile = "model_index.json"

// Detect reports whether dir is a pipeline root.
func Detect(ctx context.Context, dir string) bool {
	st, err := storage.Stat(ctx, storage.Join(dir, IndexFile))
	return err == nil && st.Mode().IsRegular()
}

// Components returns the component names model_index.json lists, in its order: the keys
// whose value is a [library, class] pair (metadata keys start with "_"; a component saved
// as [null, null] is absent).
func Components(index []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(index))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%w: %s is not a JSON object", ckpterr.ErrCorrupt, IndexFile)
	}
	var names []string
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ckpterr.ErrCorrupt, IndexFile, err)
		}
		key, _ := kt.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("%w: %s: %q: %w", ckpterr.ErrCorrupt, IndexFile, key, err)
		}
		pair, isPair := v.([]any)
		if strings.HasPrefix(key, "_") || !isPair || len(pair) != 2 || pair[0] == nil {
			continue
		}
		if key == "" || path.Base(key) != key || key == "." || key == ".." {
			return nil, fmt.Errorf("%w: %s names the component %q, not a folder of the pipeline", ckpterr.ErrCorrupt, IndexFile, key)
		}
		names = append(names, key)
	}
	return names, nil
}

// maxIndex bounds model_index.json: a line per component.
const maxIndex = 16 << 20

// Open reads the pipeline at dir. openDir opens one component folder in whatever layout it
// is (passed in to keep this package independent of the readers); a component folder that
// holds no weights contributes its files as extras.
func Open(ctx context.Context, dir string, openDir func(context.Context, string) (*statedict.Checkpoint, error), isWeights func(context.Context, string) bool) (_ *statedict.Checkpoint, err error) {
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
	index, err := storage.ReadFile(ctx, storage.Join(dir, IndexFile), maxIndex)
	if err != nil {
		return nil, err
	}
	names, err := Components(index)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	root := statedict.NewDict("")
	listed := map[string]bool{}
	for _, name := range names {
		listed[name] = true
		sub := storage.Join(dir, name)
		if st, err := storage.Stat(ctx, sub); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%s: %w: %s lists the component %s, which has no folder", dir, ckpterr.ErrCorrupt, IndexFile, name)
		}
		if !folder.Confined(name) {
			ck.Outside = append(ck.Outside, name)
			continue
		}
		if !isWeights(ctx, sub) {
			files, err := hf.FilesUnder(ctx, dir, name)
			if err != nil {
				return nil, err
			}
			ck.Extras = append(ck.Extras, files...)
			continue
		}
		c, err := openDir(ctx, sub)
		if err != nil {
			return nil, err
		}
		ck.Closers = append(ck.Closers, c.Closers...)
		root.Set(name, c.Root)
		ck.Components = append(ck.Components, statedict.Component{Name: name, Format: c.Format, WeightsName: c.WeightsName, Metadata: c.Metadata})
		for _, e := range c.Extras {
			ck.Extras = append(ck.Extras, path.Join(name, e))
		}
		for _, e := range c.Ignored {
			ck.Ignored = append(ck.Ignored, path.Join(name, e))
		}
		for _, e := range c.Outside {
			ck.Outside = append(ck.Outside, path.Join(name, e))
		}
	}
	if len(ck.Components) == 0 {
		return nil, fmt.Errorf("%s: %w: none of the components %s lists (%s) holds weights", dir, ckpterr.ErrCorrupt, IndexFile, strings.Join(names, ", "))
	}
	entries, err := storage.ReadDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	for _, de := range entries {
		name := de.Name()
		switch {
		case listed[name]:
		case de.IsDir():
			ck.Ignored = append(ck.Ignored, name+"/")
		case !folder.Confined(name):
			ck.Outside = append(ck.Outside, name)
		case de.Type().IsRegular() || de.Type()&os.ModeSymlink != 0:
			ck.Extras = append(ck.Extras, name)
		}
	}
	ck.Root = root
	return ck, nil
}
