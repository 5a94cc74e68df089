package plan

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// shard decides how the output's tensors split across the ranks of the target's mesh: the
// entries of model state dicts by their names under the target's plan, each optimizer
// state tensor after the parameter it belongs to (Target.PlaceState: moments take the
// parameter's placements, scalar state is replicated), and everything else — and whatever
// a policy keeps on the host or on its saved device (step counters, RNG states) — whole on
// every rank, as plain tensors. Optimizer states that cannot be tied to their model are
// placed whole, with a warning.
func (p *Plan) shard() error {
	t := p.Target
	sh := t.Sharding()
	pol := p.outPolicies()
	whole := func(x *statedict.Tensor) bool { return pol[x].Host || pol[x].KeepDevice || x.Storage == nil }
	place := func(name string, x *statedict.Tensor, pl runtime.Placed) error {
		if pl.Sharding == nil {
			return nil
		}
		l, err := pl.Sharding.Layout(x.Shape, t.Mesh)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if prev, ok := sh.Tensors[x]; ok && fmt.Sprint(prev.Pieces) != fmt.Sprint(l.Pieces) {
			return fmt.Errorf("%s: one tensor under two names placed two ways (%v and %v)", name, prev.Placements, l.Placements)
		}
		sh.Tensors[x] = l
		return nil
	}
	for _, f := range p.follows {
		x := f.Tensor
		if f.Key == "step" || whole(x) {
			continue
		}
		pl, err := t.PlaceState(f.Param, f.Shape, x.Shape, x.DType, x.Storage.Location)
		if err != nil {
			return fmt.Errorf("optimizer state of %s: %w", f.Param, err)
		}
		if err := place(f.Param+" ("+f.Key+")", x, pl); err != nil {
			return err
		}
	}
	if len(p.unsharded) > 0 {
		p.warn(Warning{Kind: "optimizer_unsharded", Items: p.unsharded,
			Message: fmt.Sprintf("optimizer state %s could not be tied to its model's parameters: its tensors are written whole on every rank instead of following their parameters' sharding", Summarize(p.unsharded))})
	}
	for _, dt := range p.trace.Dicts {
		if !p.decisions.Models[dt.Src] {
			continue
		}
		for _, e := range dt.Out.Entries() {
			x, ok := e.Value.(*statedict.Tensor)
			if !ok || whole(x) {
				continue
			}
			full := statedict.JoinName(dt.Name, statedict.KeyString(e.Key))
			pl, err := t.Place(full, x.Shape, x.DType, x.Storage.Location)
			if err != nil {
				return err
			}
			if err := place(full, x, pl); err != nil {
				return err
			}
		}
	}
	p.Sharding = sh
	return nil
}

// outPolicies are the policies of the source's tensors, keyed by the output's tensors they
// became.
func (p *Plan) outPolicies() statedict.Policies {
	out := make(statedict.Policies, len(p.policies))
	for src, pol := range p.policies {
		if t, ok := p.outOf(src); ok {
			out[t] = pol
		}
	}
	return out
}
