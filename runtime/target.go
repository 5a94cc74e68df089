package runtime

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/statedict"
)

// Target is what a conversion writes for, as one value: the device tag storages get, and
// optionally the TPU generation (what its matrix units run natively), the slice, and the
// mesh and plan that shard every tensor across its devices.
type Target struct {
	// Device is the tag written on device-bound storages: "tpu" (TorchTPU's process-local
	// device) or "cpu".
	Device string
	// Generation decides what runs natively; with a Topology it is the topology's.
	Generation *Generation
	// Topology is the slice; nil when the conversion is not for a particular one.
	Topology *Topology
	// Mesh lays ranks over the topology's devices; with it set, every tensor gets a
	// Sharding. Plan places the tensors on it (nil: the built-in plan).
	Mesh *Mesh
	Plan *Plan
}

// NewTarget checks and assembles a target. gen may be nil (taken from topology); a mesh
// needs a topology whose devices it covers, or, with no topology, stands for that many
// processes of the device type (CPU ranks under gloo, for instance).
func NewTarget(device string, gen *Generation, topology *Topology, mesh *Mesh, plan *Plan) (*Target, error) {
	if device != "tpu" && device != "cpu" {
		return nil, fmt.Errorf("target device %q: tpu or cpu", device)
	}
	if topology != nil {
		if gen != nil && gen != topology.Gen {
			return nil, fmt.Errorf("generation %s does not match topology %s", gen, topology)
		}
		gen = topology.Gen
	}
	if mesh != nil {
		if topology != nil {
			if err := mesh.Check(topology); err != nil {
				return nil, err
			}
		}
		if err := plan.Check(mesh); err != nil {
			return nil, err
		}
	} else if plan != nil {
		return nil, fmt.Errorf("a plan needs a mesh")
	}
	return &Target{Device: device, Generation: gen, Topology: topology, Mesh: mesh, Plan: plan}, nil
}

// Placed is where one tensor goes.
type Placed struct {
	// Device is the storage's device tag.
	Device string
	// Sharding is the tensor's layout on the target mesh; nil without a mesh. A replicated
	// sharding (Sharding.Replicated) still says the tensor is a DTensor on the mesh.
	Sharding *Sharding
}

// Place says where a tensor of the checkpoint goes: its device tag — the target's, except
// that storages saved on "meta" (no data) stay there — and, with a mesh, its sharding. The
// training-state exceptions (optimizer step and RNG states kept on the CPU) are the
// remapper's; optimizer state goes through PlaceState.
func (t *Target) Place(name string, shape []int64, dtype statedict.DType, location string) (Placed, error) {
	if dtype.Size() <= 0 {
		return Placed{}, fmt.Errorf("tensor %s: dtype %s has no element size", name, dtype)
	}
	p := Placed{Device: t.device(location)}
	if t.Mesh == nil {
		return p, nil
	}
	s, err := t.Plan.Sharding(name, shape, t.Mesh)
	if err != nil {
		return Placed{}, err
	}
	p.Sharding = &s
	return p, nil
}

// PlaceState says where a parameter's optimizer state tensor goes: the parameter's device,
// and a sharding that follows the parameter's (StateSharding).
func (t *Target) PlaceState(param string, paramShape, stateShape []int64, dtype statedict.DType, location string) (Placed, error) {
	pp, err := t.Place(param, paramShape, dtype, location)
	if err != nil || pp.Sharding == nil {
		return pp, err
	}
	s := StateSharding(*pp.Sharding, paramShape, stateShape)
	pp.Sharding = &s
	return pp, nil
}

func (t *Target) device(location string) string {
	if location == "meta" {
		return location
	}
	return t.Device
}

// Ranks is the number of ranks (processes) the target has: the mesh's size, 1 without a
// mesh.
func (t *Target) Ranks() int {
	if t.Mesh == nil {
		return 1
	}
	return t.Mesh.Size()
}
