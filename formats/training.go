package formats

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// WithTrainingState returns ck with the training state of an HF Trainer or accelerate
// checkpoint folder inside its tree: the weights under "model", each of optimizer.pt,
// scheduler.pt, scaler.pt and rng_state*.pth (accelerate's optimizer.bin,
// random_states_0.pkl, an FSDP optimizer_0/ folder, …) under its file's stem ("optimizer",
// "rng_state_1", "optimizer_0"), the names a training script resuming from one checkpoint
// uses. The optimizer state can then be tied to the model as in any training checkpoint.
// ck is returned as it is when its folder holds no training state; otherwise the returned
// checkpoint takes over ck's closers (closing ck does nothing more) and adds the
// training-state files'.
func WithTrainingState(ctx context.Context, ck *statedict.Checkpoint) (*statedict.Checkpoint, error) {
	var files, rest []string
	for _, f := range ck.Ignored {
		if hf.IsTrainerState(f) || hf.IsTrainingStateFolder(f) {
			files = append(files, f)
		} else {
			rest = append(rest, f)
		}
	}
	if len(files) == 0 {
		return ck, nil
	}
	root := statedict.NewDict("")
	root.Set("model", ck.Root)
	// A training-state folder's files travel inside the tree, not as extras.
	var extras []string
	for _, e := range ck.Extras {
		if !slices.ContainsFunc(files, func(f string) bool { return strings.HasSuffix(f, "/") && strings.HasPrefix(e, f) }) {
			extras = append(extras, e)
		}
	}
	out := &statedict.Checkpoint{Format: ck.Format, Path: ck.Path, Root: root, Extras: extras, Ignored: rest, Outside: ck.Outside,
		Files: ck.Files, Metadata: ck.Metadata, WeightsName: ck.WeightsName, Shards: ck.Shards, Closers: ck.Closers}
	own := len(ck.Closers)
	ck.Closers = nil
	for _, f := range files {
		part, err := Open(ctx, storage.Join(ck.Path, f))
		if err != nil {
			// ck keeps its own closers; the parts opened so far are closed.
			ck.Closers = out.Closers[:own:own]
			for _, c := range out.Closers[own:] {
				c.Close()
			}
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out.Closers = append(out.Closers, part.Closers...)
		if part.Shards != nil {
			if out.Shards == nil {
				out.Shards = map[*statedict.Tensor][]statedict.Shard{}
			}
			maps.Copy(out.Shards, part.Shards)
		}
		f = strings.TrimSuffix(f, "/")
		root.Set(strings.TrimSuffix(f, filepath.Ext(f)), part.Root)
	}
	return out, nil
}
