package runtime

import (
	"errors"
	"fmt"

	"github.com/ckpt-dev/ckpt/statedict"
)

// Target is what a conversion writes for, as one value: the device tag storages get (or
// the map_location that decides it), and optionally the TPU generation (what its matrix
// units run natively), the slice, and the mesh and plan that shard every tensor across its
// devices. Build it with NewTarget, from a Spec; Spec gives it back.
type Target struct {
	// Device is the tag written on device-bound storages: "tpu" (TorchTPU's process-local
	// device) or "cpu".
	Device string
	// MapLocation, when set, decides every storage's tag in Device's place, from the tag
	// it was saved with (torch.load's map_location).
	MapLocation *MapLocation
	// Generation decides what runs natively; with a Topology it is the topology's.
	Generation *Generation
	// Topology is the slice; nil when the conversion is not for a particular one.
	Topology *Topology
	// Mesh lays ranks over the topology's devices; with it set, every tensor gets a
	// Sharding. Plan places the tensors on it (nil: the built-in plan).
	Mesh *Mesh
	Plan *Plan
}

// Spec is a target as people and records name it: the device, the generation, the slice's
// topology, the mesh, the plan's rules and the map_location, each as text (or, for the
// plan, as the rules of a plan file). Empty fields are unset. It is what `ckpt convert`'s
// flags say and what a conversion's manifest records.
type Spec struct {
	// Device is "tpu" or "cpu"; empty means "tpu".
	Device string `json:"device"`
	// Generation names a TPU generation (v5e, v5p, v6e, tpu7x, …); with a Topology it must
	// be the topology's (or empty).
	Generation string `json:"generation,omitempty"`
	// Topology names the slice (v5p-32, v6e:4x4, tpu7x:2,2,1,2; see ParseTopology).
	Topology string `json:"topology,omitempty"`
	// Mesh is the logical mesh (fsdp=8, dp=2,fsdp=4); with a Topology and no Mesh, fsdp
	// over every device of the slice.
	Mesh string `json:"mesh,omitempty"`
	// Plan overrides the built-in placements by tensor name; it needs a mesh.
	Plan *Plan `json:"plan,omitempty"`
	// MapLocation, when set, decides device tags in Device's place (see ParseMapLocation).
	MapLocation string `json:"map_location,omitempty"`
}

// SpecError is a target that cannot be built, naming the Spec field at fault ("device",
// "generation", "topology", "mesh", "plan", "map_location") so that a front end can point
// at the option that set it.
type SpecError struct {
	Field string
	Err   error
}

// Error says which part of the target is wrong and why.
func (e *SpecError) Error() string { return "target " + e.Field + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *SpecError) Unwrap() error { return e.Err }

func specError(field string, err error) error { return &SpecError{field, err} }

// NewTarget checks and assembles the target s names, in one step. A topology gives the
// generation and, without a mesh, an fsdp mesh over all its devices; a mesh needs a
// topology whose devices it covers, or, with no topology, stands for that many processes
// of the device type (CPU ranks under gloo, for instance); a plan needs a mesh whose axes
// it can place.
func NewTarget(s Spec) (*Target, error) {
	t := &Target{Device: s.Device, Plan: s.Plan}
	if t.Device == "" {
		t.Device = TPU
	}
	if t.Device != TPU && t.Device != "cpu" {
		return nil, specError("device", fmt.Errorf("%q: tpu or cpu", s.Device))
	}
	var err error
	if s.MapLocation != "" {
		if t.MapLocation, err = ParseMapLocation(s.MapLocation); err != nil {
			return nil, specError("map_location", err)
		}
	}
	if s.Generation != "" {
		if t.Generation, err = LookupGeneration(s.Generation); err != nil {
			return nil, specError("generation", err)
		}
	}
	if s.Topology != "" {
		if t.Topology, err = ParseTopology(s.Topology); err != nil {
			return nil, specError("topology", err)
		}
		if t.Generation != nil && t.Generation != t.Topology.Gen {
			return nil, specError("generation", fmt.Errorf("%s does not match the topology %s", t.Generation, t.Topology))
		}
		t.Generation = t.Topology.Gen
	}
	mesh := s.Mesh
	if mesh == "" && t.Topology != nil {
		mesh = fmt.Sprintf("fsdp=%d", t.Topology.Devices)
	}
	if mesh != "" {
		if t.Mesh, err = ParseMesh(mesh); err != nil {
			return nil, specError("mesh", err)
		}
		if t.Topology != nil {
			if err := t.Mesh.Check(t.Topology); err != nil {
				return nil, specError("mesh", err)
			}
		}
		if err := t.Plan.Check(t.Mesh); err != nil {
			return nil, specError("mesh", err)
		}
	} else if t.Plan != nil {
		return nil, specError("plan", errors.New("a plan places tensors on a mesh: it needs one"))
	}
	return t, nil
}

// Spec is the Spec NewTarget builds t from.
func (t *Target) Spec() Spec {
	if t == nil {
		return Spec{}
	}
	s := Spec{Device: t.Device, Plan: t.Plan}
	if t.MapLocation != nil {
		s.MapLocation = t.MapLocation.String()
	}
	if t.Generation != nil {
		s.Generation = t.Generation.Name
	}
	if t.Topology != nil {
		s.Topology = t.Topology.Gen.Name + ":" + t.Topology.ShapeString()
	}
	if t.Mesh != nil {
		s.Mesh = t.Mesh.String()
	}
	return s
}

// Placed is where one tensor goes.
type Placed struct {
	// Device is the storage's device tag.
	Device string
	// Sharding is the tensor's layout on the target mesh; nil without a mesh. A replicated
	// sharding (Sharding.Replicated) still says the tensor is a DTensor on the mesh.
	Sharding *Sharding
}

// Place says where a tensor of the checkpoint goes: its device tag — the map_location's
// when there is one, else the target's, except that storages saved on "meta" (no data)
// stay there — and, with a mesh, its sharding. The training-state exceptions (optimizer
// step and RNG states kept where they are or on the CPU) are the plan's; optimizer state
// goes through PlaceState.
func (t *Target) Place(name string, shape []int64, dtype statedict.DType, location string) (Placed, error) {
	if dtype.Size() <= 0 {
		return Placed{}, fmt.Errorf("tensor %s: dtype %s has no element size", name, dtype)
	}
	p := Placed{Device: t.DeviceFor(location)}
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

// DeviceFor is the tag a storage saved with tag location gets.
func (t *Target) DeviceFor(location string) string {
	switch {
	case t.MapLocation != nil:
		return t.MapLocation.Map(location)
	case location == "meta":
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
