package plan

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Role is what a tensor of the output is, as the package that recognized it says.
type Role string

// Roles.
const (
	// Weight is an entry of a model state dict: a parameter or a buffer.
	Weight Role = "weight"
	// Dequantized is a quantized layer's logical tensor, unpacked from its codes and
	// scales; Quantized a code, scale or runtime-only tensor of a layer kept as stored.
	Dequantized Role = "dequantized"
	Quantized   Role = "quantized"
	// Moment is an optimizer's per-parameter state other than its step counter; Step the
	// counter; OptimizerState any other tensor of an optimizer state (of a parameter the
	// optimizer could not be tied to, or of its groups).
	Moment         Role = "optimizer moment"
	Step           Role = "optimizer step"
	OptimizerState Role = "optimizer state"
	// RNG is a random generator's state, kept on the CPU.
	RNG Role = "rng state"
	// HostData is a tensor made from a numpy array: host data, kept on the CPU.
	HostData Role = "host data"
	// Other is any other tensor (counters, a scaler's scale, values of unknown objects).
	Other Role = "other"
)

// Entry is one tensor of the output as the plan decided it.
type Entry struct {
	// Name is the tensor's flattened name in the output; Tensor the tensor to write.
	Name   string
	Tensor *statedict.Tensor
	Role   Role
	// Param is, for optimizer state tied to its parameter, the output name of the
	// parameter's model entry; Key the state key ("exp_avg").
	Param, Key string
	// Policy is what the plan decided beyond the conversion's defaults (no cast, its own
	// dtype, the host, the saved device); zero for a weight.
	Policy statedict.Policy
	// Group is the quantized group a Dequantized tensor unpacks.
	Group *quant.Group
	// Sharding is the tensor's layout on the target's ranks; nil when it is whole on every
	// rank (or the output is not per device).
	Sharding *statedict.TensorSharding
}

// roles is what Each needs to say what each output tensor is.
type roles struct {
	follows map[*statedict.Tensor]int // index into Plan.follows
	policy  statedict.Policies
	groups  map[*statedict.Tensor]*quant.Group
	weights map[*statedict.Tensor]bool
	kinds   map[*statedict.Tensor]Role // roles decided from the source's tensors
}

func (p *Plan) roles() *roles {
	r := &roles{follows: map[*statedict.Tensor]int{}, policy: p.outPolicies(), groups: map[*statedict.Tensor]*quant.Group{},
		weights: map[*statedict.Tensor]bool{}, kinds: map[*statedict.Tensor]Role{}}
	for i, f := range p.follows {
		r.follows[f.Tensor] = i
	}
	for src, g := range p.groups {
		if t, ok := p.outOf(src); ok {
			r.groups[t] = g
		}
	}
	for _, dt := range p.trace.Dicts {
		if p.decisions.Models[dt.Src] {
			for _, e := range dt.Out.Entries() {
				if t, ok := e.Value.(*statedict.Tensor); ok {
					r.weights[t] = true
				}
			}
		}
	}
	kind := func(src *statedict.Tensor, role Role) {
		if t, ok := p.outOf(src); ok {
			r.kinds[t] = role
		}
	}
	for src := range p.decisions.Policies {
		switch s, state := p.decisions.States[src]; {
		case state && s.Key == "step":
			kind(src, Step)
		case state:
			kind(src, Moment)
		case p.decisions.Policies[src].Host:
			kind(src, RNG)
		default:
			kind(src, OptimizerState)
		}
	}
	for src := range p.host {
		kind(src, HostData)
	}
	for src := range p.kept {
		kind(src, Quantized)
	}
	return r
}

// entry says what the output tensor t, named name, is.
func (r *roles) entry(p *Plan, name string, t *statedict.Tensor) Entry {
	e := Entry{Name: name, Tensor: t, Role: Other, Policy: r.policy[t]}
	if i, ok := r.follows[t]; ok {
		f := p.follows[i]
		e.Param, e.Key, e.Role = f.Param, f.Key, Moment
		if f.Key == "step" {
			e.Role = Step
		}
	} else if g, ok := r.groups[t]; ok {
		e.Role, e.Group = Dequantized, g
	} else if k, ok := r.kinds[t]; ok {
		e.Role = k
	} else if r.weights[t] {
		e.Role = Weight
	}
	if p.Sharding != nil {
		e.Sharding = p.Sharding.Tensors[t]
	}
	return e
}

// Each calls fn with every tensor of the output, in tree order, as the plan decided it.
func (p *Plan) Each(fn func(Entry) error) error {
	r := p.roles()
	return statedict.Walk(p.Output.Root, "", func(name string, v statedict.Value) error {
		if t, ok := v.(*statedict.Tensor); ok {
			return fn(r.entry(p, name, t))
		}
		return nil
	})
}

// TensorSpecs lists the output's tensors for the HBM memory plan (runtime.PlanMemory): the
// weights, the optimizer state of each parameter, everything else. A tensor viewing the
// same bytes as an earlier one (tied weights) is one tensor on the device and is listed
// once.
func (p *Plan) TensorSpecs() ([]runtime.TensorSpec, error) {
	type view struct {
		st     *statedict.Storage
		offset int64
		shape  string
	}
	seen := map[view]bool{}
	var specs []runtime.TensorSpec
	err := p.Each(func(e Entry) error {
		t := e.Tensor
		v := view{t.Storage, t.Offset, fmt.Sprint(t.Shape, t.Strides)}
		if t.Storage != nil && seen[v] {
			return nil
		}
		seen[v] = true
		s := runtime.TensorSpec{Name: e.Name, DType: t.DType, Shape: t.Shape, Role: runtime.RoleOther}
		switch e.Role {
		case Weight, Dequantized, Quantized:
			s.Role = runtime.RoleWeight
		case Moment, Step, OptimizerState:
			s.Role, s.Param = runtime.RoleOptimizer, e.Param
		}
		specs = append(specs, s)
		return nil
	})
	return specs, err
}

// outOf is the output tensor the source tensor src became (ok false when it was dropped
// or not reached).
func (p *Plan) outOf(src *statedict.Tensor) (*statedict.Tensor, bool) {
	if p.trace.Tensors == nil { // consumed: every tensor is its own output
		return src, true
	}
	t, ok := p.trace.Tensors[src]
	return t, ok
}
