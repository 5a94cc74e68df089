package optimizerstate_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/statedict"
)

// TestCarried: the training state beside a TorchTitan model, for outputs loaded by 4, 2 and
// no data-parallel ranks: the scheduler and train_state kept, the per-rank data-loader
// state of the 2 ranks that saved it kept for 2 and dropped (with the reason) for 4; and
// nothing decided for an output that is not per device.
func TestCarried(t *testing.T) {
	root := openTitan(t, "fsdp2").Root
	for _, tc := range []struct {
		dp   int
		want string
	}{
		{4, "dataloader:dropped:per-rank data-loader state of 2 ranks lr_scheduler:kept:LRScheduler train_state:kept:training state"},
		{2, "dataloader:kept:per-rank data-loader state of 2 ranks lr_scheduler:kept:LRScheduler train_state:kept:training state"},
		{0, ""},
	} {
		dec, err := optimizerstate.Decide(root, optimizerstate.Options{DataParallel: tc.dp})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range dec.Carried {
			got = append(got, c.Path+":"+c.Action+":"+c.Kind)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%d ranks: %v, want %s", tc.dp, got, tc.want)
		}
		why, dropped := dec.Drop["dataloader"]
		if dropped != (tc.dp == 4) || dropped && !strings.Contains(why, "saved by 2 data-parallel ranks, the output is for 4") {
			t.Errorf("%d ranks: drop %v %q", tc.dp, dropped, why)
		}
	}
}

// TestCarriedKinds: every kind of training state beside an optimizer, for 4 ranks: a CPU
// generator state replicated and said so, CUDA ones dropped (or replicated when kept), a
// grad scaler and counters kept, per-rank states recognized only in their exact shape.
func TestCarriedKinds(t *testing.T) {
	rng := func() *statedict.Tensor {
		return &statedict.Tensor{DType: statedict.Uint8, Shape: s(16), Strides: s(1), Storage: statedict.NewMappedStorage("r", "cpu", statedict.Uint8, make([]byte, 16))}
	}
	root := dict("model", dict("w", tensor(2, 2)),
		"optim", optim([][]statedict.Value{ids(0)}, shapes(s(2, 2))),
		"rng", dict("cpu", rng(), "cuda", list(rng())),
		"scaler", dict("scale", 65536.0, "growth_factor", 2.0, "backoff_factor", 0.5, "growth_interval", int64(2000), "_growth_tracker", int64(0)),
		"epoch", int64(3),
		"loader", dict("dp_rank_0", []byte("a"), "dp_rank_1", []byte("b")),
		"not_per_rank", dict("dp_rank_0", []byte("a"), "seed", int64(1)))
	for _, keep := range []bool{false, true} {
		dec, err := optimizerstate.Decide(root, optimizerstate.Options{DataParallel: 4, KeepCUDARNG: keep})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range dec.Carried {
			got = append(got, c.Path+":"+c.Action)
		}
		want := fmt.Sprintf("epoch:kept loader:dropped not_per_rank:kept rng.cpu:replicated rng.cuda:%s scaler:kept", map[bool]string{false: "dropped", true: "replicated"}[keep])
		if strings.Join(got, " ") != want {
			t.Errorf("keep CUDA %v: %v, want %s", keep, got, want)
		}
		for _, c := range dec.Carried {
			if c.Path == "rng.cpu" && !strings.Contains(c.Why, "each of the 4 ranks loads the same one") {
				t.Errorf("rng.cpu: %q", c.Why)
			}
			// What a layout of tensors alone carries: the generator states, not the scaler's
			// numbers, the counter or the loader's bytes.
			if tensors := strings.HasPrefix(c.Path, "rng."); c.HoldsTensors() != tensors {
				t.Errorf("%s: holds tensors %v", c.Path, c.HoldsTensors())
			}
		}
	}
	for _, d := range []*statedict.Dict{
		dict("dp_rank_x", []byte("a")),
		dict("dp_rank_0", []byte("a"), "world_size", "2"),
		dict("world_size", int64(2)),
		dict("dp_rank_-1", []byte("a")),
	} {
		if n, ok := optimizerstate.PerRank(d); ok {
			t.Errorf("%v: per-rank state of %d ranks", d.Entries(), n)
		}
	}
	if n, ok := optimizerstate.PerRank(dict("dp_rank_0", []byte("a"), "world_size", int64(8))); !ok || n != 8 {
		t.Errorf("world_size 8: %d %v", n, ok)
	}
}
