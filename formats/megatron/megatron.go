// Package megatron reads Megatron-LM checkpoint folders and the Megatron-core distributed
// checkpoints NeMo 2 writes, as the state dict Megatron's own loader gives, without
// Megatron and without running any pickle.
//
// A Megatron-LM save folder holds latest_checkpointed_iteration.txt (the tracker: an
// iteration number or "release") and one folder per saved iteration, iter_0000100/ (or
// release/), in one of two layouts:
//
//   - legacy (ckpt_format torch): one folder per model-parallel rank, mp_rank_TT (tensor
//     parallel), mp_rank_TT_PPP (with pipeline parallelism), with a trailing _EEE for the
//     expert-parallel rank, each holding model_optim_rng.pt — a torch.save of args (an
//     argparse.Namespace), checkpoint_version, iteration, model, optimizer,
//     opt_param_scheduler, rng_state — and, with the distributed optimizer, distrib_optim.pt.
//     One rank without the distributed optimizer reads as its file's tree. Several ranks,
//     or the distributed optimizer's state, read as the one global model Megatron's own
//     checkpoint converter merges them into (a dense GPT model: Megatron-core's GPTModel
//     or megatron.legacy's): tensor-parallel slices joined as each layer splits them,
//     pipeline stages' layers renumbered, the vocabulary padding dropped (down to
//     args.vocab_size; kept when the args do not record it), replicas checked equal, and
//     the optimizer state (distrib_optim.pt's flat buffers, or each rank's state by id)
//     cut back into each parameter's main copy and moments — {"model", "optimizer"} in
//     torch.distributed.checkpoint's form by parameter name. A layout ckpt cannot prove it
//     merges correctly is refused, naming the tensor or rank at fault; each rank's file can
//     still be read on its own.
//   - torch_dist (Megatron-core dist_checkpointing): a DCP folder of the sharded entries
//     (.metadata, *.distcp) with common.pt (torch.save of every entry that is not sharded)
//     and metadata.json naming the backend. It reads as dist_checkpointing.load merges them:
//     common.pt's entries, then the DCP's.
//
// Other per-rank files are listed as ignored (convert says it left them out).
package megatron

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/dcp"
	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Formats of statedict.Checkpoint.Format.
const (
	Legacy = "megatron"
	Dist   = "megatron-torch-dist"
)

// Files of the layouts.
const (
	TrackerFile  = "latest_checkpointed_iteration.txt"
	RankFile     = "model_optim_rng.pt"
	CommonFile   = "common.pt"
	MetadataJSON = "metadata.json"
)

// maxTracker bounds the tracker and metadata.json files read: both are a few bytes.
const maxTracker = 1 << 16

var rankDir = regexp.MustCompile(`^mp_rank_(\d{2,})(?:_(\d{3,}))?(?:_(\d{3,}))?$`)

// ParseTracker reads latest_checkpointed_iteration.txt as Megatron's read_metadata does (an
// iteration number, or "release", surrounding white space ignored) and returns the folder
// it names: iter_%07d or release.
func ParseTracker(b []byte) (string, error) {
	s := strings.TrimSpace(string(b))
	if s == "release" {
		return "release", nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		// What it holds is not repeated: a tracker that is not one may be anything (a link
		// to a secret).
		return "", fmt.Errorf("%w: %s holds %d bytes that are not an iteration number or \"release\"", ckpterr.ErrCorrupt, TrackerFile, len(b))
	}
	return fmt.Sprintf("iter_%07d", n), nil
}

// ParseBackend reads a dist_checkpointing metadata.json and returns its sharded backend
// ("torch_dist", "zarr", …).
func ParseBackend(b []byte) (string, error) {
	var md struct {
		Sharded string `json:"sharded_backend"`
		Common  string `json:"common_backend"`
	}
	if err := json.Unmarshal(b, &md); err != nil {
		return "", fmt.Errorf("%w: %s: %w", ckpterr.ErrCorrupt, MetadataJSON, err)
	}
	if md.Sharded == "" {
		return "", fmt.Errorf("%w: %s names no sharded_backend", ckpterr.ErrCorrupt, MetadataJSON)
	}
	if md.Common != "" && md.Common != "torch" {
		return "", fmt.Errorf("%w: %s: common_backend %q (ckpt reads \"torch\")", ckpterr.ErrUnsupported, MetadataJSON, md.Common)
	}
	return md.Sharded, nil
}

// Detect reports whether dir is a Megatron checkpoint: a save folder (it has the tracker
// file), an iteration folder of rank folders, or a dist_checkpointing folder.
func Detect(ctx context.Context, dir string) bool {
	return storage.IsFile(ctx, storage.Join(dir, TrackerFile)) || slices.ContainsFunc(ranks(ctx, dir), func(e fs.DirEntry) bool { return rankDir.MatchString(e.Name()) }) || IsDist(ctx, dir)
}

// IsDist reports whether dir is a Megatron-core dist_checkpointing folder: a DCP .metadata
// beside common.pt and metadata.json.
func IsDist(ctx context.Context, dir string) bool {
	return dcp.IsCheckpoint(ctx, dir) && storage.IsFile(ctx, storage.Join(dir, CommonFile)) && storage.IsFile(ctx, storage.Join(dir, MetadataJSON))
}

// ranks lists dir's entries named as rank folders (mp_rank_*, folders or not: a link or
// file in a rank folder's place is refused by name when read), in rank order.
func ranks(ctx context.Context, dir string) []fs.DirEntry {
	entries, err := storage.ReadDir(ctx, dir)
	if err != nil {
		return nil
	}
	var out []fs.DirEntry
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "mp_rank_") {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return compareRanks(out[i].Name(), out[j].Name()) < 0 })
	return out
}

// Openers are the readers Open reads the parts with, passed in to keep this package
// independent of them.
type Openers struct {
	// File reads one torch.save file.
	File func(context.Context, string) (*statedict.Checkpoint, error)
	// DCP reads a torch.distributed.checkpoint folder.
	DCP func(context.Context, string) (*statedict.Checkpoint, error)
}

// Open reads the Megatron checkpoint at dir (see Detect).
func Open(ctx context.Context, dir string, op Openers) (_ *statedict.Checkpoint, err error) {
	folder, err := hf.OpenFolder(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer folder.Close()
	iter := ""
	if storage.IsFile(ctx, storage.Join(dir, TrackerFile)) {
		b, err := readSmall(ctx, storage.Join(dir, TrackerFile))
		if err != nil {
			return nil, err
		}
		if iter, err = ParseTracker(b); err != nil {
			return nil, fmt.Errorf("%s: %w", storage.Join(dir, TrackerFile), err)
		}
		if st, err := storage.Stat(ctx, storage.Join(dir, iter)); err != nil || !st.IsDir() || !folder.Confined(iter) {
			have := storage.Glob(ctx, dir, "iter_*")
			for i := range have {
				have[i] = storage.Base(have[i])
			}
			return nil, fmt.Errorf("%s: %w: %s names %s, which is not a folder of it (it has %s); pass an iteration folder itself",
				dir, ckpterr.ErrCorrupt, TrackerFile, iter, orNone(have))
		}
	}
	sub := func(name string) string { return path.Join(iter, name) }
	at := storage.Join(dir, iter)
	if IsDist(ctx, at) {
		return openDist(ctx, dir, iter, op, folder)
	}
	found, err := rankFolders(ctx, at)
	if err != nil {
		return nil, err
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("%s: %w: neither mp_rank_* folders (%s) nor a dist_checkpointing folder (.metadata, %s, %s)", at, ckpterr.ErrCorrupt, RankFile, CommonFile, MetadataJSON)
	}
	files := &rankFiles{dir: dir, iter: iter, folder: folder}
	if len(found) > 1 || storage.IsFile(ctx, storage.Join(at, found[0].name, DistribOptimFile)) {
		return openMerged(ctx, dir, iter, found, files, op)
	}
	// One rank without the distributed optimizer: its file's tree.
	r := found[0].name
	p, err := files.check(ctx, r, RankFile)
	if err != nil {
		return nil, err
	}
	ck, err := op.File(ctx, p)
	if err != nil {
		return nil, err
	}
	out := &statedict.Checkpoint{Format: Legacy, Path: dir, Root: ck.Root, Closers: ck.Closers}
	if err := checkRankSet(at, found, ck.Root); err != nil {
		out.Close()
		return nil, err
	}
	others, err := storage.ReadDir(ctx, storage.Join(at, r))
	if err != nil {
		out.Close()
		return nil, err
	}
	for _, e := range others {
		if e.Name() != RankFile {
			out.Ignored = append(out.Ignored, sub(path.Join(r, e.Name())))
		}
	}
	return out, nil
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "no iter_* folder"
	}
	return strings.Join(names, ", ")
}

func readSmall(ctx context.Context, p string) ([]byte, error) {
	b, err := storage.ReadFile(ctx, p, maxTracker)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", p, ckpterr.ErrCorrupt, err)
	}
	return b, nil
}

// openDist reads the dist_checkpointing folder iter of dir: common.pt's entries merged with
// the DCP's, as dist_checkpointing.load merges them.
func openDist(ctx context.Context, dir, iter string, op Openers, folder *hf.Folder) (_ *statedict.Checkpoint, err error) {
	at := storage.Join(dir, iter)
	if !folder.Confined(path.Join(iter, CommonFile)) {
		return nil, &fs.PathError{Op: "open", Path: storage.Join(at, CommonFile), Err: hf.ErrOutside}
	}
	b, err := readSmall(ctx, storage.Join(at, MetadataJSON))
	if err != nil {
		return nil, err
	}
	backend, err := ParseBackend(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", storage.Join(at, MetadataJSON), err)
	}
	if backend != "torch_dist" {
		return nil, fmt.Errorf("%s: %w: a %s dist_checkpointing folder (ckpt reads torch_dist)", at, ckpterr.ErrUnsupported, backend)
	}
	d, err := op.DCP(ctx, at)
	if err != nil {
		return nil, err
	}
	out := &statedict.Checkpoint{Format: Dist, Path: dir, Closers: d.Closers, Shards: d.Shards}
	defer func() {
		if err != nil {
			out.Close()
		}
	}()
	common, err := op.File(ctx, storage.Join(at, CommonFile))
	if err != nil {
		return nil, err
	}
	out.Closers = append(out.Closers, common.Closers...)
	root, ok := common.Root.(*statedict.Dict)
	if !ok {
		return nil, fmt.Errorf("%s: %w: holds a %T, not a dict", storage.Join(at, CommonFile), ckpterr.ErrCorrupt, common.Root)
	}
	merged := statedict.NewDict(root.Class)
	for _, e := range root.Entries() {
		merged.Set(e.Key, e.Value)
	}
	if _, err := merge(merged, d.Root, ""); err != nil {
		return nil, fmt.Errorf("%s: %w: merging %s with the sharded entries: %w", at, ckpterr.ErrCorrupt, CommonFile, err)
	}
	out.Root = merged
	entries, err := storage.ReadDir(ctx, at)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		n := e.Name()
		if n != dcp.MetadataFile && n != CommonFile && n != MetadataJSON && !strings.HasSuffix(n, ".distcp") {
			out.Ignored = append(out.Ignored, path.Join(iter, n))
		}
	}
	return out, nil
}

// merge is dist_checkpointing's dict_utils.merge: x2's entries into x1, dicts merged key by
// key and lists item by item; any other value present in both is an error.
func merge(x1, x2 statedict.Value, at string) (statedict.Value, error) {
	switch a := x1.(type) {
	case *statedict.Dict:
		b, ok := x2.(*statedict.Dict)
		if !ok {
			break
		}
		for _, e := range b.Entries() {
			old, ok := a.Get(e.Key)
			if !ok {
				a.Set(e.Key, e.Value)
				continue
			}
			v, err := merge(old, e.Value, statedict.JoinName(at, statedict.KeyString(e.Key)))
			if err != nil {
				return nil, err
			}
			a.Set(e.Key, v)
		}
		return a, nil
	case *statedict.List:
		b, ok := x2.(*statedict.List)
		if !ok {
			break
		}
		if len(a.Items) != len(b.Items) {
			return nil, fmt.Errorf("%s: lists of %d and %d items", at, len(a.Items), len(b.Items))
		}
		for i := range b.Items {
			v, err := merge(a.Items[i], b.Items[i], statedict.JoinName(at, strconv.Itoa(i)))
			if err != nil {
				return nil, err
			}
			a.Items[i] = v
		}
		return a, nil
	}
	return nil, fmt.Errorf("%s: a %T in one and a %T in the other", at, x1, x2)
}
