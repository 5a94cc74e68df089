package convert

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/statedict"
)

// DefaultMaxShardSize is transformers' default max_shard_size (5 GB, decimal).
const DefaultMaxShardSize = 5_000_000_000

// flatTensors lists the tensors to write to a flat format: every tensor of the tree under its
// flattened name, tied aliases removed (kept once, as safetensors' own converter does), and a
// warning for each non-tensor value the format cannot hold. tied maps removed → kept.
func (j *writeJob) flatTensors() (list []statedict.NamedTensor, tied map[string]string, err error) {
	tied = map[string]string{}
	byStorage := map[*statedict.Storage][]statedict.NamedTensor{}
	var order []*statedict.Storage
	err = statedict.Walk(j.src.Root, "", func(name string, v statedict.Value) error {
		t, ok := v.(*statedict.Tensor)
		if !ok {
			j.sum.Warnings = append(j.sum.Warnings, fmt.Sprintf("%s: %s value not written (safetensors holds tensors only)", name, typeName(v)))
			return nil
		}
		if _, seen := byStorage[t.Storage]; !seen {
			order = append(order, t.Storage)
		}
		byStorage[t.Storage] = append(byStorage[t.Storage], statedict.NamedTensor{Name: name, Tensor: t})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for _, st := range order {
		group := byStorage[st]
		// Identical views of one storage are one tensor under several names.
		for len(group) > 0 {
			first := group[0].Tensor
			var same, rest []statedict.NamedTensor
			for _, nt := range group {
				if sameView(nt.Tensor, first) {
					same = append(same, nt)
				} else {
					rest = append(rest, nt)
				}
			}
			keep := keepName(same)
			for _, nt := range same {
				if nt.Name == keep.Name {
					list = append(list, nt)
				} else {
					tied[nt.Name] = keep.Name
				}
			}
			group = rest
		}
	}
	// Keep the tree's order for the kept names.
	pos := map[string]int{}
	i := 0
	statedict.Walk(j.src.Root, "", func(name string, _ statedict.Value) error { pos[name] = i; i++; return nil })
	sort.SliceStable(list, func(a, b int) bool { return pos[list[a].Name] < pos[list[b].Name] })
	return list, tied, nil
}

func typeName(v statedict.Value) string {
	switch x := v.(type) {
	case *statedict.Object:
		return x.Class
	case nil:
		return "None"
	}
	return fmt.Sprintf("%T", v)
}

func sameView(a, b *statedict.Tensor) bool {
	if a.DType != b.DType || a.Offset != b.Offset || len(a.Shape) != len(b.Shape) || a.Conj != b.Conj || a.Neg != b.Neg {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] || a.Strides[i] != b.Strides[i] {
			return false
		}
	}
	return true
}

// keepName picks the name a tied group is written under: as safetensors' converter, the
// first in sorted order, except that output-projection aliases (lm_head.*), which
// transformers re-ties from the embedding, are dropped in favour of the other name.
func keepName(group []statedict.NamedTensor) statedict.NamedTensor {
	best := group[0]
	rank := func(n string) int {
		if strings.HasPrefix(n, "lm_head.") || strings.Contains(n, ".lm_head.") {
			return 1
		}
		return 0
	}
	for _, nt := range group[1:] {
		if rank(nt.Name) < rank(best.Name) || rank(nt.Name) == rank(best.Name) && nt.Name < best.Name {
			best = nt
		}
	}
	return best
}

// stMetadata is the safetensors __metadata__: format "pt" as Hugging Face writers put, plus
// removed → kept for tied aliases (the convention of safetensors' converter).
func stMetadata(tied map[string]string) map[string]string {
	md := map[string]string{"format": "pt"}
	for k, v := range tied {
		md[k] = v
	}
	return md
}

// writeSafetensors writes tensors to w in the reference writer's order and returns the
// bytes written.
func (j *writeJob) writeSafetensors(w io.Writer, list []statedict.NamedTensor, md map[string]string) (int64, error) {
	infos := make([]safetensors.TensorInfo, len(list))
	byName := make(map[string]*statedict.Tensor, len(list))
	for i, nt := range list {
		info, err := safetensors.TensorInfoFor(nt.Name, nt.Tensor)
		if err != nil {
			return 0, err
		}
		infos[i] = info
		byName[nt.Name] = nt.Tensor
	}
	safetensors.SortLikeReference(infos)
	cw := &statedict.Counter{W: w}
	sw, err := safetensors.NewWriter(j.progress(cw), infos, md)
	if err != nil {
		return 0, err
	}
	for _, info := range infos {
		if err := sw.WriteTensor(info.Name, j.summed(byName[info.Name])); err != nil {
			return cw.N, err
		}
	}
	return cw.N, sw.Close()
}

// safetensorsFile writes a single .safetensors file.
func (j *writeJob) safetensorsFile() error {
	list, tied, err := j.flatTensors()
	if err != nil {
		return err
	}
	dst := j.opts.Dst
	f, err := atomicfile.Create(dst, j.opts.Force)
	if err != nil {
		return err
	}
	defer f.Abort()
	n, err := writeOut(f.File, func(w io.Writer) (int64, error) { return j.writeSafetensors(w, list, stMetadata(tied)) })
	if err != nil {
		return err
	}
	j.sum.Bytes, j.sum.Tied = n, tied
	return j.commitFile(f, namesOf(list))
}

func namesOf(list []statedict.NamedTensor) map[*statedict.Tensor]string {
	m := make(map[*statedict.Tensor]string, len(list))
	for _, nt := range list {
		m[nt.Tensor] = nt.Name
	}
	return m
}

// safetensorsFolder writes a Hugging Face folder: model.safetensors, or shards
// model-0000i-of-0000n.safetensors with model.safetensors.index.json, plus the source's
// config and tokenizer files.
func (j *writeJob) safetensorsFolder() error {
	list, tied, err := j.flatTensors()
	if err != nil {
		return err
	}
	max := j.opts.MaxShardSize
	if max <= 0 {
		max = DefaultMaxShardSize
	}
	// Split in state-dict order as huggingface_hub does: a tensor that does not fit starts a
	// new shard; one larger than the limit gets a shard of its own.
	var shards [][]statedict.NamedTensor
	var size int64
	for _, nt := range list {
		n := nt.Tensor.NBytes()
		if len(shards) == 0 || size+n > max && len(shards[len(shards)-1]) > 0 {
			shards = append(shards, nil)
			size = 0
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], nt)
		size += n
	}
	if len(shards) == 0 {
		shards = append(shards, nil)
	}
	d, err := atomicfile.CreateDir(j.opts.Dst, j.opts.Force, ownedFiles)
	if err != nil {
		return err
	}
	defer d.Abort()
	weightMap := map[string]string{}
	var total, params int64
	for i, shard := range shards {
		name := "model.safetensors"
		if len(shards) > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
		f, err := os.Create(filepath.Join(d.Path, name))
		if err != nil {
			return err
		}
		n, err := writeOut(f, func(w io.Writer) (int64, error) { return j.writeSafetensors(w, shard, stMetadata(tiedIn(tied, shard))) })
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		j.sum.Bytes += n
		j.sum.Files = append(j.sum.Files, name)
		for _, nt := range shard {
			weightMap[nt.Name] = name
			total += nt.Tensor.NBytes()
			params += nt.Tensor.NumEl()
		}
	}
	if len(shards) > 1 {
		idx := map[string]any{
			"metadata":   map[string]int64{"total_size": total, "total_parameters": params},
			"weight_map": weightMap,
		}
		b, err := json.MarshalIndent(idx, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d.Path, "model.safetensors.index.json"), append(b, '\n'), 0o644); err != nil {
			return err
		}
		j.sum.Files = append(j.sum.Files, "model.safetensors.index.json")
	}
	if err := j.copyExtras(d.Path); err != nil {
		return err
	}
	if err := j.convertAlongside(d.Path); err != nil {
		return err
	}
	j.sum.Tied = tied
	return j.commitDir(d, namesOf(list))
}

// tiedIn returns the tied aliases whose kept tensor is in shard.
func tiedIn(tied map[string]string, shard []statedict.NamedTensor) map[string]string {
	in := map[string]bool{}
	for _, nt := range shard {
		in[nt.Name] = true
	}
	out := map[string]string{}
	for removed, kept := range tied {
		if in[kept] {
			out[removed] = kept
		}
	}
	return out
}

// copyExtras copies the files that travel with the weights (config.json, tokenizer files, …)
// from a source folder into the output folder.
func (j *writeJob) copyExtras(dir string) error {
	for _, name := range j.src.Extras {
		content, rewritten := j.rewrite[name]
		if name == ManifestName || rewritten && content == nil {
			continue
		}
		if rewritten {
			if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
				return err
			}
		} else if err := copyFile(j.src, name, filepath.Join(dir, name)); err != nil {
			return err
		}
		j.sum.Files = append(j.sum.Files, name)
	}
	return nil
}

// copyFile copies the file name of ck's folder (read confined to it) to dst.
func copyFile(ck *statedict.Checkpoint, name, dst string) error {
	in, err := ck.Files.Open(name)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
