package runtime

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/statedict"
)

// Role is what a tensor is to the memory plan.
type Role string

// The roles.
const (
	// RoleWeight is a model state-dict entry: parameters and buffers.
	RoleWeight Role = "weight"
	// RoleOptimizer is optimizer state (moments, step) of one parameter.
	RoleOptimizer Role = "optimizer"
	// RoleOther is any other tensor of the checkpoint (scaler, counters): replicated unless
	// a plan rule shards it by name.
	RoleOther Role = "other"
)

// TensorSpec is what the memory plan needs of a tensor: no data.
type TensorSpec struct {
	Name  string
	DType statedict.DType
	Shape []int64
	Role  Role
	// Param names the parameter (a RoleWeight spec) optimizer state belongs to: the state
	// follows its placements (StateSharding). Empty when unknown: the state is then placed
	// by its own name and shape.
	Param string
}

// MemoryOptions says what to plan for.
type MemoryOptions struct {
	Topology *Topology
	// Mesh lays the ranks over the topology's devices; it must cover them all.
	Mesh *Mesh
	// Plan places the tensors; nil is the built-in plan.
	Plan *Plan
	// WeightDType, when set, is the dtype floating-point weights (float16, bfloat16,
	// float32, float64) are converted to, as convert --dtype does; quantized codes,
	// integers and optimizer state keep theirs.
	WeightDType statedict.DType
	// DropOptimizer leaves optimizer state out.
	DropOptimizer bool
}

// Bytes is a size without and with TPU tile padding.
type Bytes struct {
	Raw    int64 `json:"raw"`
	Padded int64 `json:"padded"`
}

func (b *Bytes) add(o Bytes) { b.Raw += o.Raw; b.Padded += o.Padded }

// DeviceMemory is what one device (rank) holds.
type DeviceMemory struct {
	Rank      int   `json:"rank"`
	Host      int   `json:"host"`
	Weights   Bytes `json:"weights"`
	Optimizer Bytes `json:"optimizer"`
	Other     Bytes `json:"other"`
	Total     Bytes `json:"total"`
}

// TensorMemory is one tensor's placement and its largest share on a device.
type TensorMemory struct {
	Name     string          `json:"name"`
	Role     Role            `json:"role"`
	DType    statedict.DType `json:"dtype"`
	Shape    []int64         `json:"shape"`
	Param    string          `json:"param,omitempty"`
	Sharding Sharding        `json:"sharding"`
	// Largest is rank 0's share, the largest any rank holds (see MemoryPlan.Fullest).
	Largest Bytes `json:"largest"`
	// Host is set for scalar optimizer state, which stays in host memory.
	Host bool `json:"host,omitempty"`
}

// ErrDoesNotFit is matched by errors.Is for the error a plan that does not fit gives (see
// MemoryPlan.Err).
var ErrDoesNotFit = errors.New("does not fit the slice's HBM")

// Err is nil when the plan fits, else an error matching ErrDoesNotFit that says by how much
// the fullest device is over.
func (p *MemoryPlan) Err() error {
	if p.Fits {
		return nil
	}
	return fmt.Errorf("rank %d needs %d bytes more than its %d bytes of HBM: %w", p.Fullest, p.Over, p.HBMPerDevice, ErrDoesNotFit)
}

// MemoryPlan is the per-device memory of a checkpoint's tensors on a slice.
type MemoryPlan struct {
	AcceleratorType string `json:"accelerator_type"`
	TopologyShape   string `json:"topology"`
	Generation      string `json:"generation"`
	Mesh            string `json:"mesh"`
	PlanFile        string `json:"plan_file,omitempty"`
	WeightDType     string `json:"weight_dtype,omitempty"`
	HBMPerDevice    int64  `json:"hbm_per_device"`
	// Devices lists every rank.
	Devices []DeviceMemory `json:"devices"`
	// Fullest is the rank holding the most padded bytes (the lowest such rank). Under
	// torch.chunk splits the first chunk along every dimension is the largest, so rank 0
	// is always among the fullest.
	Fullest int `json:"fullest"`
	// Fits is whether the fullest device's padded bytes fit its HBM; Over is by how much
	// they exceed it.
	Fits bool  `json:"fits"`
	Over int64 `json:"over,omitempty"`
	// Suggestions, when it does not fit, are changes that were planned and what they give.
	Suggestions []Suggestion   `json:"suggestions,omitempty"`
	Tensors     []TensorMemory `json:"tensors"`
}

// Suggestion is a change to the target or the checkpoint, planned: the fullest device after
// it and whether that fits.
type Suggestion struct {
	// Change says what to do, in words (the setting's fields say it as data).
	Change string `json:"change"`
	// Topology, Mesh, WeightDType and DropOptimizer are the planned setting.
	Topology      string `json:"topology"`
	Mesh          string `json:"mesh"`
	WeightDType   string `json:"weight_dtype,omitempty"`
	DropOptimizer bool   `json:"drop_optimizer,omitempty"`
	Fullest       Bytes  `json:"fullest"`
	HBMPerDevice  int64  `json:"hbm_per_device"`
	Fits          bool   `json:"fits"`
}

// placed is a tensor with its planned dtype and sharding.
type placed struct {
	spec  *TensorSpec
	dtype statedict.DType
	s     Sharding
	host  bool
}

// castable is the set of dtypes convert --dtype casts (remap's rule): IEEE floats only;
// fp8/fp4/e8m0 hold quantized codes.
func castable(d statedict.DType) bool {
	switch d {
	case statedict.Float16, statedict.BFloat16, statedict.Float32, statedict.Float64:
		return true
	}
	return false
}

// checkSpec rejects specs that cannot describe a tensor: an unknown dtype, a negative
// dimension, more bytes than an int64 holds.
func checkSpec(t *TensorSpec) error {
	if t.DType.Size() <= 0 {
		return fmt.Errorf("tensor %s: dtype %s has no element size", t.Name, t.DType)
	}
	n := uint64(t.DType.Size())
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor %s: negative dimension in shape %v", t.Name, t.Shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > 1<<62 {
			return fmt.Errorf("tensor %s: shape %v is too large", t.Name, t.Shape)
		}
		n = lo
	}
	switch t.Role {
	case RoleWeight, RoleOptimizer, RoleOther:
		return nil
	}
	return fmt.Errorf("tensor %s: unknown role %q", t.Name, t.Role)
}

// place plans every tensor's dtype and sharding.
func place(tensors []TensorSpec, o MemoryOptions) ([]placed, error) {
	if err := o.Mesh.Check(o.Topology); err != nil {
		return nil, err
	}
	params := map[string]int{}
	out := make([]placed, 0, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		if err := checkSpec(t); err != nil {
			return nil, err
		}
		if t.Role == RoleOptimizer && o.DropOptimizer {
			continue
		}
		// Scalar optimizer state (step) stays on the host: torch keeps it on the CPU
		// unless the optimizer is capturable or fused.
		p := placed{spec: t, dtype: t.DType, host: t.Role == RoleOptimizer && len(t.Shape) == 0}
		if t.Role == RoleWeight && o.WeightDType != statedict.Invalid && castable(t.DType) {
			p.dtype = o.WeightDType
		}
		var err error
		if j, ok := params[t.Param]; ok && t.Role == RoleOptimizer {
			p.s = StateSharding(out[j].s, out[j].spec.Shape, t.Shape)
		} else {
			name := t.Name
			if t.Role == RoleOptimizer && t.Param != "" {
				name = t.Param
			}
			p.s, err = o.Plan.sharding(name, t.Shape, o.Mesh, t.Role != RoleOther)
		}
		if err != nil {
			return nil, err
		}
		if t.Role == RoleWeight {
			params[t.Name] = len(out)
		}
		out = append(out, p)
	}
	return out, nil
}

// share is rank coord's raw and padded bytes of a placed tensor; sizes is scratch space
// of at least the tensor's rank.
func (p *placed) share(g *Generation, m *Mesh, coord []int, sizes []int64) Bytes {
	if p.host {
		return Bytes{}
	}
	sizes = sizes[:len(p.spec.Shape)]
	p.s.localSizes(p.spec.Shape, m, coord, sizes)
	return Bytes{RawBytes(p.dtype, sizes), g.PaddedBytes(p.dtype, sizes)}
}

func (d *DeviceMemory) add(r Role, b Bytes) {
	switch r {
	case RoleWeight:
		d.Weights.add(b)
	case RoleOptimizer:
		d.Optimizer.add(b)
	default:
		d.Other.add(b)
	}
	d.Total.add(b)
}

// PlanMemory computes what every device of o.Topology holds of the tensors once they are
// placed on o.Mesh by o.Plan — raw and tile-padded (padding applies to each device's own
// shard) — finds the fullest device and compares it with its HBM. When it does not fit, it
// plans the changes that could make it fit — more devices, FSDP, bfloat16 weights, no
// optimizer state — and reports each one's result. Scalar optimizer state (step) is
// counted as host memory, where torch keeps it. Activations, gradients and XLA's
// workspace come on top: a plan that fits with little room to spare will not train.
func PlanMemory(tensors []TensorSpec, o MemoryOptions) (*MemoryPlan, error) {
	ps, err := place(tensors, o)
	if err != nil {
		return nil, err
	}
	t, m := o.Topology, o.Mesh
	mp := &MemoryPlan{
		AcceleratorType: t.AcceleratorType(), TopologyShape: t.ShapeString(), Generation: t.Gen.Name,
		Mesh: m.String(), HBMPerDevice: t.HBMPerDevice(), Devices: make([]DeviceMemory, m.Size()),
	}
	if o.Plan != nil {
		mp.PlanFile = o.Plan.Path
	}
	if o.WeightDType != statedict.Invalid {
		mp.WeightDType = o.WeightDType.String()
	}
	coords := make([][]int, m.Size())
	for r := range coords {
		coords[r] = m.Coord(r)
		mp.Devices[r].Rank, mp.Devices[r].Host = r, t.Host(r)
	}
	var sizes []int64
	for i := range ps {
		p := &ps[i]
		sizes = slices.Grow(sizes[:0], len(p.spec.Shape))
		// A rank's share depends only on its coordinates along the axes sharding the
		// tensor: compute each distinct share once.
		var axes []int
		n := 1
		for a, pl := range p.s.Placements {
			if pl.Shard {
				axes = append(axes, a)
				n *= m.Axes[a].Size
			}
		}
		shares, done := make([]Bytes, n), make([]bool, n)
		for r, c := range coords {
			key := 0
			for _, a := range axes {
				key = key*m.Axes[a].Size + c[a]
			}
			if !done[key] {
				shares[key], done[key] = p.share(t.Gen, m, c, sizes), true
			}
			mp.Devices[r].add(p.spec.Role, shares[key])
		}
		mp.Tensors = append(mp.Tensors, TensorMemory{
			Name: p.spec.Name, Role: p.spec.Role, DType: p.dtype, Shape: p.spec.Shape, Param: p.spec.Param,
			Sharding: p.s, Largest: shares[0], Host: p.host,
		})
	}
	for r, d := range mp.Devices {
		if d.Total.Padded > mp.Devices[mp.Fullest].Total.Padded {
			mp.Fullest = r
		}
	}
	full := mp.Devices[mp.Fullest].Total.Padded
	mp.Fits = full <= mp.HBMPerDevice
	if !mp.Fits {
		mp.Over = full - mp.HBMPerDevice
		if mp.Suggestions, err = suggest(tensors, o); err != nil {
			return nil, err
		}
	}
	return mp, nil
}

// rank0 is the bytes rank 0 — a fullest device — holds under o.
func rank0(tensors []TensorSpec, o MemoryOptions) (Bytes, error) {
	ps, err := place(tensors, o)
	if err != nil {
		return Bytes{}, err
	}
	var b Bytes
	zero := make([]int, o.Mesh.NDim())
	var sizes []int64
	for i := range ps {
		sizes = slices.Grow(sizes[:0], len(ps[i].spec.Shape))
		b.add(ps[i].share(o.Topology.Gen, o.Mesh, zero, sizes))
	}
	return b, nil
}

// suggest plans the changes that could make o fit.
func suggest(tensors []TensorSpec, o MemoryOptions) ([]Suggestion, error) {
	var out []Suggestion
	try := func(change string, alt MemoryOptions) (Suggestion, error) {
		b, err := rank0(tensors, alt)
		s := Suggestion{Change: change, Topology: alt.Topology.AcceleratorType(), Mesh: alt.Mesh.String(),
			DropOptimizer: alt.DropOptimizer, Fullest: b, HBMPerDevice: alt.Topology.HBMPerDevice(),
			Fits: b.Padded <= alt.Topology.HBMPerDevice()}
		if alt.WeightDType != statedict.Invalid {
			s.WeightDType = alt.WeightDType.String()
		}
		return s, err
	}
	var combined []string
	all := o
	if m := fsdpMesh(o.Mesh); m != nil {
		alt := o
		alt.Mesh = m
		s, err := try("shard with FSDP (mesh "+m.String()+")", alt)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
		all.Mesh = m
		combined = append(combined, "FSDP")
	}
	if wide := slices.ContainsFunc(tensors, func(t TensorSpec) bool {
		d := t.DType
		if o.WeightDType != statedict.Invalid {
			d = o.WeightDType
		}
		return t.Role == RoleWeight && castable(t.DType) && d.Size() > 2
	}); wide {
		alt := o
		alt.WeightDType = statedict.BFloat16
		s, err := try("convert the weights to bfloat16", alt)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
		all.WeightDType = statedict.BFloat16
		combined = append(combined, "bfloat16 weights")
	}
	if !o.DropOptimizer && slices.ContainsFunc(tensors, func(t TensorSpec) bool { return t.Role == RoleOptimizer }) {
		alt := o
		alt.DropOptimizer = true
		s, err := try("leave the optimizer state out (weights only)", alt)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
		all.DropOptimizer = true
		combined = append(combined, "no optimizer state")
	}
	s, ok, err := moreDevices(o, try)
	if err != nil {
		return nil, err
	}
	if s != nil {
		out = append(out, *s)
	}
	if ok || slices.ContainsFunc(out, func(s Suggestion) bool { return s.Fits }) || len(combined) == 0 {
		return out, nil
	}
	// No single change fits: all of them together, on as few devices as that needs.
	change := strings.Join(combined, " + ")
	c, err := try(change+" (mesh "+all.Mesh.String()+")", all)
	if err != nil || c.Fits {
		return append(out, c), err
	}
	if s, ok, err = moreDevices(all, try); err != nil {
		return nil, err
	}
	if ok {
		s.Change = change + ", " + s.Change
		out = append(out, *s)
	}
	return out, nil
}

// moreDevices finds the smallest power-of-two multiple of o's slice of the same generation
// on which o fits, its fsdp axis (or a new outer one) scaled to the added devices. ok is
// false when not even the largest slice tried fits; s is then that slice's result.
func moreDevices(o MemoryOptions, try func(string, MemoryOptions) (Suggestion, error)) (s *Suggestion, ok bool, err error) {
	g := o.Topology.Gen
	for f := 2; o.Topology.Chips*f <= g.MaxChips; f *= 2 {
		if o.Topology.Chips*f == 2 {
			continue // Cloud TPU sells no 2-chip slices
		}
		shape, okShape := defaultShape(g.TopologyDims, o.Topology.Chips*f)
		if !okShape {
			break
		}
		t, err := NewTopology(g, shape)
		if err != nil {
			break
		}
		alt := o
		alt.Topology, alt.Mesh = t, scaleFSDP(o.Mesh, f)
		got, err := try(fmt.Sprintf("use %d× the devices (%s, mesh %s)", f, t.AcceleratorType(), alt.Mesh), alt)
		if err != nil {
			return nil, false, err
		}
		s = &got
		if got.Fits {
			return s, true, nil
		}
	}
	if s != nil {
		s.Change = "not even " + s.Topology + " fits: " + s.Change
	}
	return s, false, nil
}

// fsdpMesh is the mesh with FSDP in place of plain data parallelism, or nil when m already
// shards with FSDP: its dp axes become one fsdp axis where the first was; with no dp axis
// either, FSDP over every device.
func fsdpMesh(m *Mesh) *Mesh {
	out := &Mesh{}
	dp := 1
	for _, a := range m.Axes {
		switch AxisKinds[a.Name] {
		case KindFSDP:
			return nil
		case KindDP:
			if dp == 1 {
				out.Axes = append(out.Axes, Axis{"fsdp", 0})
			}
			dp *= a.Size
		default:
			out.Axes = append(out.Axes, a)
		}
	}
	if i := out.Index("fsdp"); i >= 0 {
		out.Axes[i].Size = dp
		return out
	}
	return &Mesh{Axes: []Axis{{"fsdp", m.Size()}}}
}

// scaleFSDP multiplies m's first fsdp axis by f, or adds an outer fsdp=f axis.
func scaleFSDP(m *Mesh, f int) *Mesh {
	out := &Mesh{Axes: slices.Clone(m.Axes)}
	for i, a := range out.Axes {
		if AxisKinds[a.Name] == KindFSDP {
			out.Axes[i].Size *= f
			return out
		}
	}
	out.Axes = append([]Axis{{"fsdp", f}}, out.Axes...)
	return out
}
