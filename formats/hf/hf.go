// Package hf reads Hugging Face model folders: a single `model.safetensors` or
// `pytorch_model.bin`, or shards (`model-00001-of-00003.safetensors`, `pytorch_model-…bin`)
// listed by an index (`model.safetensors.index.json`, `pytorch_model.bin.index.json`),
// together with the files that travel with the weights (config.json, tokenizer files,
// hf_quant_config.json, …). It checks that index and shards agree exactly: every shard the
// index names exists, every tensor is in the shard the index says, no tensor or shard is
// unaccounted for.
package hf

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Formats ckpt reports for Hugging Face folders.
const (
	FormatSafetensors        = "hf-safetensors"
	FormatSafetensorsSharded = "hf-safetensors-sharded"
	FormatBin                = "hf-bin"
	FormatBinSharded         = "hf-bin-sharded"
	// A PEFT adapter folder: adapter_config.json with adapter_model.safetensors (or .bin).
	FormatAdapterSafetensors = "peft-safetensors"
	FormatAdapterBin         = "peft-bin"
)

// layout is one way a folder can hold weights, in order of preference (safetensors first,
// as transformers prefers them).
// The weights name is the base name a safetensors output of the folder uses again
// (statedict.Checkpoint.WeightsName): diffusers and PEFT load their own file names only.
type layout struct {
	index, single, format, shardedFormat string
	shard                                *regexp.Regexp
	weightsName                          string
}

var layouts = []layout{
	{"model.safetensors.index.json", "model.safetensors", FormatSafetensors, FormatSafetensorsSharded,
		regexp.MustCompile(`^model-\d+-of-\d+\.safetensors$`), "model"},
	{"diffusion_pytorch_model.safetensors.index.json", "diffusion_pytorch_model.safetensors", FormatSafetensors, FormatSafetensorsSharded,
		regexp.MustCompile(`^diffusion_pytorch_model-\d+-of-\d+\.safetensors$`), "diffusion_pytorch_model"},
	{"pytorch_model.bin.index.json", "pytorch_model.bin", FormatBin, FormatBinSharded,
		regexp.MustCompile(`^pytorch_model-\d+-of-\d+\.bin$`), "model"},
	{"diffusion_pytorch_model.bin.index.json", "diffusion_pytorch_model.bin", FormatBin, FormatBinSharded,
		regexp.MustCompile(`^diffusion_pytorch_model-\d+-of-\d+\.bin$`), "diffusion_pytorch_model"},
	// PEFT writes one adapter file, never sharded (no index).
	{"", "adapter_model.safetensors", FormatAdapterSafetensors, "", nil, "adapter_model"},
	{"", "adapter_model.bin", FormatAdapterBin, "", nil, "adapter_model"},
}

// Index is a sharded checkpoint's index file.
type Index struct {
	// Metadata is the "metadata" object (total_size, total_parameters, …), kept verbatim.
	Metadata map[string]json.RawMessage
	// WeightMap maps each tensor name to its shard file, in file order.
	WeightMap []WeightEntry
}

// WeightEntry is one "name": "shard file" pair of an index.
type WeightEntry struct{ Name, File string }

// Detect reports whether dir looks like a Hugging Face folder and which format it holds.
func Detect(ctx context.Context, dir string) (format string, ok bool) {
	for _, l := range layouts {
		if l.index != "" && exists(ctx, storage.Join(dir, l.index)) {
			return l.shardedFormat, true
		}
		if exists(ctx, storage.Join(dir, l.single)) {
			return l.format, true
		}
	}
	return "", false
}

func exists(ctx context.Context, p string) bool {
	st, err := storage.Stat(ctx, p)
	return err == nil && st.Mode().IsRegular()
}

// Open reads the folder. openFile opens one weights file (safetensors or torch.save) with
// format detection; passing it in keeps this package independent of the readers.
func Open(ctx context.Context, dir string, openFile func(context.Context, string) (*statedict.Checkpoint, error)) (*statedict.Checkpoint, error) {
	for _, l := range layouts {
		if l.index != "" && exists(ctx, storage.Join(dir, l.index)) {
			return openSharded(ctx, dir, l, openFile)
		}
		if exists(ctx, storage.Join(dir, l.single)) {
			return openSingle(ctx, dir, l, openFile)
		}
	}
	return nil, fmt.Errorf("%s: no model.safetensors, pytorch_model.bin or index file", dir)
}

func openSingle(ctx context.Context, dir string, l layout, openFile func(context.Context, string) (*statedict.Checkpoint, error)) (*statedict.Checkpoint, error) {
	path := storage.Join(dir, l.single)
	ck, err := openFile(ctx, path)
	if err != nil {
		return nil, err
	}
	root, err := flatTensorDict(path, ck.Root)
	if err != nil {
		ck.Close()
		return nil, err
	}
	out := &statedict.Checkpoint{Format: l.format, Path: dir, Root: root, Closers: ck.Closers, Metadata: ck.Metadata, WeightsName: l.weightsName}
	if err := addFiles(ctx, out, dir, map[string]bool{l.single: true}); err != nil {
		out.Close()
		return nil, err
	}
	return out, nil
}

// flatTensorDict checks that a weights file holds a flat {name: tensor} mapping, as
// save_pretrained writes (a `state_dict` key wrapping it, as some trainers save, is accepted).
func flatTensorDict(path string, root statedict.Value) (*statedict.Dict, error) {
	d, ok := root.(*statedict.Dict)
	if !ok {
		return nil, fmt.Errorf("%s: %w: holds a %T, not a mapping of tensor names to tensors", path, ckpterr.ErrCorrupt, root)
	}
	if inner, ok := d.Get("state_dict"); ok && d.Len() == 1 {
		if id, ok := inner.(*statedict.Dict); ok {
			d = id
		}
	}
	for _, e := range d.Entries() {
		if _, ok := e.Key.(string); !ok {
			return nil, fmt.Errorf("%s: %w: key %s is not a tensor name", path, ckpterr.ErrCorrupt, statedict.KeyString(e.Key))
		}
		if _, ok := e.Value.(*statedict.Tensor); !ok {
			return nil, fmt.Errorf("%s: %w: %s is a %T, not a tensor", path, ckpterr.ErrCorrupt, statedict.KeyString(e.Key), e.Value)
		}
	}
	return d, nil
}

// MaxIndex bounds an index file: a weight_map entry of some hundred bytes for each of up to
// millions of tensors.
const MaxIndex = 1 << 30

// ReadIndex parses an index file, keeping weight_map order and rejecting duplicate names.
func ReadIndex(ctx context.Context, path string) (*Index, error) {
	b, err := storage.ReadFile(ctx, path, MaxIndex)
	if err != nil {
		return nil, err
	}
	var raw struct {
		Metadata  map[string]json.RawMessage `json:"metadata"`
		WeightMap json.RawMessage            `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, ckpterr.ErrCorrupt, err)
	}
	if raw.WeightMap == nil {
		return nil, fmt.Errorf("%s: %w: no weight_map", path, ckpterr.ErrCorrupt)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw.WeightMap)))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%s: %w: weight_map is not an object", path, ckpterr.ErrCorrupt)
	}
	idx := &Index{Metadata: raw.Metadata}
	seen := map[string]bool{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: weight_map: %w: %w", path, ckpterr.ErrCorrupt, err)
		}
		name, _ := kt.(string)
		var file string
		if err := dec.Decode(&file); err != nil {
			return nil, fmt.Errorf("%s: weight_map[%q] is not a file name: %w: %w", path, name, ckpterr.ErrCorrupt, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("%s: %w: weight_map lists %q twice", path, ckpterr.ErrCorrupt, name)
		}
		if file == "" || filepath.Base(file) != file {
			return nil, fmt.Errorf("%s: %w: weight_map[%q] = %q is not a file in the folder", path, ckpterr.ErrCorrupt, name, file)
		}
		seen[name] = true
		idx.WeightMap = append(idx.WeightMap, WeightEntry{name, file})
	}
	return idx, nil
}

func openSharded(ctx context.Context, dir string, l layout, openFile func(context.Context, string) (*statedict.Checkpoint, error)) (ck *statedict.Checkpoint, err error) {
	indexPath := storage.Join(dir, l.index)
	idx, err := ReadIndex(ctx, indexPath)
	if err != nil {
		return nil, err
	}
	// Shards in the order the index first names them.
	var shards []string
	want := map[string]map[string]bool{} // shard → names the index puts there
	for _, e := range idx.WeightMap {
		if want[e.File] == nil {
			want[e.File] = map[string]bool{}
			shards = append(shards, e.File)
		}
		want[e.File][e.Name] = true
	}
	sort.Strings(shards)
	entries, err := storage.ReadDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	for _, de := range entries {
		if l.shard.MatchString(de.Name()) && want[de.Name()] == nil {
			return nil, fmt.Errorf("%s: %w: shard %s is in the folder but the index names none of its tensors", indexPath, ckpterr.ErrCorrupt, de.Name())
		}
	}
	out := &statedict.Checkpoint{Format: l.shardedFormat, Path: dir, WeightsName: l.weightsName}
	defer func() {
		if err != nil {
			out.Close()
		}
	}()
	root := statedict.NewDict("")
	where := map[string]string{}
	for _, shard := range shards {
		path := storage.Join(dir, shard)
		if !exists(ctx, path) {
			return nil, fmt.Errorf("%s: %w: shard %s is missing (the index maps %d tensors to it)", indexPath, ckpterr.ErrCorrupt, shard, len(want[shard]))
		}
		sck, err := openFile(ctx, path)
		if err != nil {
			return nil, err
		}
		out.Closers = append(out.Closers, sck.Closers...)
		out.Metadata = commonMetadata(out.Metadata, sck.Metadata, shard == shards[0])
		d, err := flatTensorDict(path, sck.Root)
		if err != nil {
			return nil, err
		}
		root.NameOrder = root.NameOrder || d.NameOrder
		for _, e := range d.Entries() {
			name := e.Key.(string)
			if prev, dup := where[name]; dup {
				return nil, fmt.Errorf("%s: %w: tensor %q is in both %s and %s", dir, ckpterr.ErrCorrupt, name, prev, shard)
			}
			where[name] = shard
			if !want[shard][name] {
				if other := indexFile(idx, name); other != "" {
					return nil, fmt.Errorf("%s: %w: tensor %q is in %s but the index maps it to %s", indexPath, ckpterr.ErrCorrupt, name, shard, other)
				}
				return nil, fmt.Errorf("%s: %w: tensor %q in %s is not in the index", indexPath, ckpterr.ErrCorrupt, name, shard)
			}
			root.Set(name, e.Value)
		}
	}
	for _, e := range idx.WeightMap {
		if _, ok := where[e.Name]; !ok {
			return nil, fmt.Errorf("%s: %w: the index maps %q to %s, which does not contain it", indexPath, ckpterr.ErrCorrupt, e.Name, e.File)
		}
	}
	skip := map[string]bool{l.index: true}
	for _, s := range shards {
		skip[s] = true
	}
	if err := addFiles(ctx, out, dir, skip); err != nil {
		return nil, err
	}
	out.Root = root
	return out, nil
}

// commonMetadata keeps the metadata entries every shard holds with the same value (first:
// md is the first shard's).
func commonMetadata(acc, md map[string]string, first bool) map[string]string {
	if first {
		return maps.Clone(md)
	}
	for k, v := range acc {
		if md[k] != v {
			delete(acc, k)
		}
	}
	return acc
}

func indexFile(idx *Index, name string) string {
	for _, e := range idx.WeightMap {
		if e.Name == name {
			return e.File
		}
	}
	return ""
}

// addFiles gives ck confined access to dir's files and lists them (see extraFiles).
func addFiles(ctx context.Context, ck *statedict.Checkpoint, dir string, weights map[string]bool) error {
	f, err := OpenFolder(ctx, dir)
	if err != nil {
		return err
	}
	ck.Closers = append(ck.Closers, f)
	ck.Files = f
	ck.Extras, ck.Ignored, ck.Outside, err = extraFiles(ctx, f, weights)
	return err
}

// extraFiles lists the regular files of the folder other than the weights read
// (config.json, generation_config.json, tokenizer files, hf_quant_config.json, …), which
// converters copy, and apart from them the files holding weights or pickles of another
// layout, which they must not carry along unconverted. Symbolic links to regular files
// count when they stay inside the folder or its hub cache blobs (a Hugging Face hub cache
// snapshot is made of them); links leading elsewhere, and entries that are not files
// (FIFOs, devices, sockets), are listed in outside, never read.
func extraFiles(ctx context.Context, f *Folder, weights map[string]bool) (extras, ignored, outside []string, err error) {
	entries, err := storage.ReadDir(ctx, f.dir)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, de := range entries {
		name := de.Name()
		if weights[name] {
			continue
		}
		if de.Type()&fs.ModeSymlink != 0 {
			st, err := storage.Stat(ctx, storage.Join(f.dir, name))
			if err != nil || st.IsDir() {
				continue // dangling, or a link to a folder
			}
			if !st.Mode().IsRegular() { // to a FIFO or a device: never opened
				outside = append(outside, name)
				continue
			}
			if !f.Confined(name) {
				outside = append(outside, name)
				continue
			}
		} else if !de.Type().IsRegular() {
			if !de.IsDir() { // a FIFO, device or socket: never opened
				outside = append(outside, name)
			}
			continue
		}
		if otherWeights(name) {
			ignored = append(ignored, name)
		} else {
			extras = append(extras, name)
		}
	}
	return extras, ignored, outside, nil
}

// WeightFiles lists the files of dir that hold weights or pickles, judged by their names,
// so that an error about a folder ckpt does not read as a whole can name the files it could
// read one by one.
func WeightFiles(ctx context.Context, dir string) []string {
	f, err := OpenFolder(ctx, dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	_, files, _, _ := extraFiles(ctx, f, nil)
	return files
}

// otherWeights reports whether a file holds weights or pickles rather than configuration:
// shards and single files of any checkpoint format and their indexes (pytorch_model.bin
// next to model.safetensors, Mistral's consolidated.safetensors), and the training-state
// pickles of a Trainer checkpoint folder (optimizer.pt, scheduler.pt, rng_state.pth,
// training_args.bin).
func otherWeights(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".h5", ".msgpack", ".gguf", ".distcp", ".npz", ".onnx":
		return true
	}
	return strings.HasSuffix(name, ".index.json")
}
