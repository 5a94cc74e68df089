package torchpickle

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/statedict"
)

// The classes a pickled DTensor names. torch.distributed.tensor registers them with
// add_safe_globals when imported (as does device_mesh the mesh layouts), which is how
// torch.load(weights_only=True) loads per-rank FSDP2 saves.
var (
	dtensorClass    = pickle.Global{Module: "torch.distributed.tensor", Name: "DTensor"}
	dtensorSpec     = pickle.Global{Module: "torch.distributed.tensor._dtensor_spec", Name: "DTensorSpec"}
	tensorMeta      = pickle.Global{Module: "torch.distributed.tensor._dtensor_spec", Name: "TensorMeta"}
	shardOrderEntry = pickle.Global{Module: "torch.distributed.tensor._dtensor_spec", Name: "ShardOrderEntry"}
	deviceMesh      = pickle.Global{Module: "torch.distributed.device_mesh", Name: "DeviceMesh"}
	meshLayout      = pickle.Global{Module: "torch.distributed._mesh_layout", Name: "_MeshLayout"}
	flatLayout      = pickle.Global{Module: "torch.distributed._mesh_layout", Name: "_FlatLayout"}
	placementModule = "torch.distributed.tensor.placement_types"
)

// maxMeshRanks bounds the ranks a pickled mesh may claim: a mesh is checked against the
// rank files present, and products of hostile axis sizes must not overflow before that.
const maxMeshRanks = 1 << 24

// wrapperSubclasses says why a tensor subclass other than DTensor is not read. The pickle
// decodes a subclass's state before the call that rebuilds it, and a ShardedTensor's calls
// builtins.getattr, which the reader (like torch's weights_only unpickler) refuses with a
// message naming neither: knownSubclass says what the failing pickle holds.
var wrapperSubclasses = map[pickle.Global]string{
	{Module: "torch.distributed._shard.sharded_tensor.api", Name: "ShardedTensor"}: "a ShardedTensor, as FSDP1's SHARDED_STATE_DICT and LOCAL_STATE_DICT hold when saved with torch.save: torch.load(weights_only=True) refuses it too; save with torch.distributed.checkpoint (DCP), which ckpt reads, or gather with FULL_STATE_DICT",
}

// knownSubclass words err, the failure to decode data (the pickle up to where it failed),
// as the refusal of a tensor subclass wrapperSubclasses names when the pickle references
// one; else it returns err. It scans only a pickle that failed.
func knownSubclass(data []byte, err error) error {
	rep, _ := pickle.Scan(data)
	for _, g := range rep.Globals {
		if why, ok := wrapperSubclasses[g.Global]; ok {
			return fmt.Errorf("%w: tensor subclass %s: %s (%v)", ckpterr.ErrUnsupported, g.Global, why, err)
		}
	}
	return err
}

// rebuildWrapperSubclass handles _rebuild_from_type_v2(_rebuild_wrapper_subclass, cls,
// (cls, dtype, size, stride, storage_offset, layout, device, requires_grad), state) for
// cls DTensor: state holds the slots _local_tensor (the rank's shard, a plain tensor) and
// _spec (DTensorSpec: the mesh, the placements and the global TensorMeta). The result is a
// statedict.DTensor. Other wrapper subclasses have no data ckpt can read.
func (c *converter) rebuildWrapperSubclass(cls pickle.Global, args pickle.Tuple, state pickle.Value) (statedict.Value, error) {
	const fn = "_rebuild_wrapper_subclass"
	if cls != dtensorClass {
		return nil, fmt.Errorf("%w: %s: tensor subclass %s: ckpt reads DTensor, no other wrapper subclass", ckpterr.ErrUnsupported, fn, cls)
	}
	if len(args) != 8 {
		return nil, fmt.Errorf("%s takes 8 arguments, got %d", fn, len(args))
	}
	dt, isDT := args[1].(pickle.Global)
	dtype, ok := dtypeGlobal(dt)
	if !isDT || !ok {
		return nil, argError(fn, 1, "a torch dtype", args[1])
	}
	shape, ok1 := ints(args[2])
	stride, ok2 := ints(args[3])
	if !ok1 || !ok2 || len(shape) != len(stride) {
		return nil, fmt.Errorf("%s: DTensor size %s and stride %s are not tuples of ints of one length", fn, describe(args[2]), describe(args[3]))
	}
	if off, ok := args[4].(int64); !ok || off != 0 {
		return nil, argError(fn, 4, "storage offset 0", args[4])
	}
	slots := objectFields(state)
	lv, _ := slots.get("_local_tensor")
	local, err := c.value(lv)
	if err != nil {
		return nil, fmt.Errorf("DTensor _local_tensor: %w", err)
	}
	t, ok := local.(*statedict.Tensor)
	if !ok {
		return nil, fmt.Errorf("DTensor _local_tensor is %s, want a tensor", describe(lv))
	}
	if t.DType != dtype {
		return nil, fmt.Errorf("DTensor of %s holds a local tensor of %s", dtype, t.DType)
	}
	sv, _ := slots.get("_spec")
	d, err := c.dtensorSpec(sv, shape, stride, dtype)
	if err != nil {
		return nil, fmt.Errorf("DTensor _spec: %w", err)
	}
	d.Local = t
	if rg, ok := args[7].(bool); ok && rg != t.RequiresGrad {
		local := *t
		local.RequiresGrad = rg
		d.Local = &local
	}
	return d, nil
}

// fields are the attributes a pickled object's BUILD state sets: a __dict__, or the
// (__dict__ or None, slots) pair of objects with __slots__.
type fields []*pickle.Dict

func objectFields(state pickle.Value) fields {
	switch s := state.(type) {
	case *pickle.Dict:
		return fields{s}
	case pickle.Tuple:
		var f fields
		for _, x := range s {
			if d, ok := x.(*pickle.Dict); ok {
				f = append(f, d)
			}
		}
		return f
	}
	return nil
}

func (f fields) get(name string) (pickle.Value, bool) {
	for _, d := range f {
		if v, ok := d.Get(name); ok {
			return v, true
		}
	}
	return nil, false
}

// instance returns the attributes of an object of class g built by NEWOBJ or a call
// without arguments and a BUILD (how dataclasses and torch's placement and mesh classes
// pickle).
func instance(v pickle.Value, g pickle.Global) (fields, error) {
	o, ok := v.(*pickle.Object)
	if !ok || o.Class != g {
		return nil, fmt.Errorf("%s is %s", g.Name, describe(v))
	}
	return objectFields(o.State), nil
}

// dtensorSpec reads a DTensorSpec: its mesh, placements and tensor_meta, which must agree
// with the DTensor's size, stride and dtype.
func (c *converter) dtensorSpec(v pickle.Value, shape, stride []int64, dtype statedict.DType) (*statedict.DTensor, error) {
	f, err := instance(v, dtensorSpec)
	if err != nil {
		return nil, err
	}
	mv, _ := f.get("mesh")
	d, err := readMesh(mv)
	if err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	d.Shape, d.Stride = shape, stride
	pv, _ := f.get("placements")
	ps, ok := pv.(pickle.Tuple)
	if !ok {
		if l, isList := pv.(*pickle.List); isList {
			ps, ok = pickle.Tuple(l.Items), true
		}
	}
	if !ok || len(ps) != len(d.Mesh) {
		return nil, fmt.Errorf("placements are %s, want one per axis of the %d-axis mesh", describe(pv), len(d.Mesh))
	}
	for _, p := range ps {
		s, err := placement(p, len(shape))
		if err != nil {
			return nil, err
		}
		d.Placements = append(d.Placements, s)
	}
	if err := checkShardOrder(f); err != nil {
		return nil, err
	}
	tv, _ := f.get("tensor_meta")
	if o, ok := tv.(*pickle.Object); ok && o.Class == tensorMeta && len(o.Args) == 3 {
		msh, ok1 := ints(o.Args[0])
		mst, ok2 := ints(o.Args[1])
		g, _ := o.Args[2].(pickle.Global)
		mdt, ok3 := dtypeGlobal(g)
		if !ok1 || !ok2 || !ok3 || !slices.Equal(msh, shape) || !slices.Equal(mst, stride) || mdt != dtype {
			return nil, fmt.Errorf("tensor_meta disagrees with the DTensor's size %v, stride %v and dtype %s", shape, stride, dtype)
		}
	} else if _, none := tv.(pickle.None); !none && tv != nil {
		return nil, fmt.Errorf("tensor_meta is %s, want a TensorMeta(shape, stride, dtype)", describe(tv))
	}
	return d, nil
}

// placement reads one placement into torch's repr of it.
func placement(v pickle.Value, ndim int) (string, error) {
	o, ok := v.(*pickle.Object)
	if !ok || o.Class.Module != placementModule {
		return "", fmt.Errorf("placement is %s", describe(v))
	}
	f := objectFields(o.State)
	dim := func() (int, error) {
		x, _ := f.get("dim")
		d, ok := x.(int64)
		if !ok || d < -int64(ndim) || d >= int64(ndim) {
			return 0, fmt.Errorf("%s dim is %s for a %d-dimensional tensor", o.Class.Name, describe(x), ndim)
		}
		if d < 0 {
			d += int64(ndim)
		}
		return int(d), nil
	}
	switch o.Class.Name {
	case "Replicate":
		return "Replicate()", nil
	case "Shard":
		d, err := dim()
		if err != nil {
			return "", err
		}
		return "Shard(dim=" + strconv.Itoa(d) + ")", nil
	case "_StridedShard":
		d, err := dim()
		if err != nil {
			return "", err
		}
		x, _ := f.get("split_factor")
		sf, ok := x.(int64)
		if !ok || sf < 1 || sf > maxMeshRanks {
			return "", fmt.Errorf("_StridedShard split_factor is %s", describe(x))
		}
		return "_StridedShard(dim=" + strconv.Itoa(d) + ", sf=" + strconv.FormatInt(sf, 10) + ")", nil
	case "Partial":
		x, _ := f.get("reduce_op")
		op, ok := asString(x)
		if !ok {
			op = "sum"
		}
		return "Partial(" + op + ")", nil
	}
	return "", fmt.Errorf("placement of class %s", o.Class)
}

// readMesh reads a pickled DeviceMesh: its shape from _layout (recent torch: one
// _FlatLayout per mesh axis, the axis size the product of its shape) or from the mesh
// tensor (earlier torch), its dimension names, the saving rank (_rank, or the mesh
// tensor's entry at its coordinate) and its coordinate, and the job's size.
func readMesh(v pickle.Value) (*statedict.DTensor, error) {
	f, err := instance(v, deviceMesh)
	if err != nil {
		return nil, err
	}
	var sizes []int64
	// The mesh tensor (each coordinate's global rank) of releases that pickle one:
	// "mesh" before the layouts, "_mesh" beside them in some.
	var ranks *statedict.Tensor
	for _, name := range []string{"mesh", "_mesh"} {
		mv, ok := f.get(name)
		if !ok {
			continue
		}
		t, isT := mv.(*statedict.Tensor)
		if !isT || (t.DType != statedict.Int32 && t.DType != statedict.Int64) || len(t.Strides) != len(t.Shape) {
			return nil, fmt.Errorf("%s is %s, want a tensor of ranks", name, describe(mv))
		}
		ranks = t
	}
	if lv, ok := f.get("_layout"); ok {
		lf, err := instance(lv, meshLayout)
		if err != nil {
			return nil, err
		}
		av, _ := lf.get("axes")
		axes, ok := av.(pickle.Tuple)
		if !ok {
			return nil, fmt.Errorf("_MeshLayout axes are %s", describe(av))
		}
		for _, a := range axes {
			af, err := instance(a, flatLayout)
			if err != nil {
				return nil, err
			}
			sv, _ := af.get("shape")
			sh, ok := ints(sv)
			if !ok {
				return nil, fmt.Errorf("_FlatLayout shape is %s", describe(sv))
			}
			n := int64(1)
			for _, s := range sh {
				if s < 1 {
					return nil, fmt.Errorf("mesh axis of size %d", s)
				}
				if s > maxMeshRanks {
					return nil, fmt.Errorf("%w: a mesh axis of %d ranks (more than %d)", ckpterr.ErrUnsupported, s, maxMeshRanks)
				}
				n *= s
				if n > maxMeshRanks {
					return nil, fmt.Errorf("%w: a mesh axis of more than %d ranks", ckpterr.ErrUnsupported, maxMeshRanks)
				}
			}
			sizes = append(sizes, n)
		}
		if ranks != nil && !slices.Equal(ranks.Shape, sizes) {
			return nil, fmt.Errorf("the mesh tensor's shape %v is not the layout's %v", ranks.Shape, sizes)
		}
	} else if ranks != nil {
		sizes = ranks.Shape
	} else {
		return nil, fmt.Errorf("DeviceMesh has neither _layout nor mesh")
	}
	d := &statedict.DTensor{}
	total := int64(1)
	for _, s := range sizes {
		if s < 1 {
			return nil, fmt.Errorf("mesh axis of size %d", s)
		}
		total *= s
		if total > maxMeshRanks {
			return nil, fmt.Errorf("%w: a mesh of more than %d ranks", ckpterr.ErrUnsupported, maxMeshRanks)
		}
		d.Mesh = append(d.Mesh, statedict.MeshAxis{Size: int(s)})
	}
	nv, _ := f.get("_mesh_dim_names")
	if nv == nil {
		nv, _ = f.get("mesh_dim_names")
	}
	switch names := nv.(type) {
	case nil, pickle.None:
	case pickle.Tuple:
		if len(names) != len(d.Mesh) {
			return nil, fmt.Errorf("%d dimension names for a %d-axis mesh", len(names), len(d.Mesh))
		}
		for i, n := range names {
			s, ok := asString(n)
			if !ok {
				return nil, fmt.Errorf("mesh dimension name is %s", describe(n))
			}
			d.Mesh[i].Name = s
		}
	default:
		return nil, fmt.Errorf("mesh dimension names are %s", describe(nv))
	}
	cv, _ := f.get("_coordinate_on_dim")
	coord, ok := ints(cv)
	if !ok || len(coord) != len(d.Mesh) {
		return nil, fmt.Errorf("the saving rank's coordinate is %s, want one per mesh axis (a rank outside the mesh saved it)", describe(cv))
	}
	row := 0
	for i, x := range coord {
		if x < 0 || x >= int64(d.Mesh[i].Size) {
			return nil, fmt.Errorf("coordinate %v lies outside the mesh", coord)
		}
		d.Coord = append(d.Coord, int(x))
		row = row*d.Mesh[i].Size + int(x)
	}
	d.Rank = row
	if ranks != nil {
		r, err := rankAt(ranks, d.Coord)
		if err != nil {
			return nil, fmt.Errorf("mesh tensor: %w", err)
		}
		d.Rank = r
	}
	// The root mesh's ranks, which every mesh of recent releases pickles (under the name
	// _global_rank_permutation for a while before _rank_map).
	mv, ok := f.get("_rank_map")
	if !ok {
		mv, ok = f.get("_global_rank_permutation")
	}
	if ok {
		t, isT := mv.(*statedict.Tensor)
		if !isT || t.NumEl() < int64(d.MeshSize()) {
			return nil, fmt.Errorf("the mesh's _rank_map is %s, want the job's ranks (at least the mesh's %d)", describe(mv), d.MeshSize())
		}
		if n := t.NumEl(); n > maxMeshRanks || n < 0 {
			return nil, fmt.Errorf("%w: a job of %d ranks (more than %d)", ckpterr.ErrUnsupported, n, maxMeshRanks)
		}
		d.World = int(t.NumEl())
	}
	if rv, ok := f.get("_rank"); ok {
		r, isInt := rv.(int64)
		if !isInt || r < 0 || r > math.MaxInt32 {
			return nil, fmt.Errorf("the saving rank is %s", describe(rv))
		}
		d.Rank = int(r)
	}
	return d, nil
}

// checkShardOrder refuses a DTensorSpec whose shard_order (torch 2.10 and later) applies the
// mesh axes sharding one tensor dimension in an order other than left to right without
// saying so in the placements (_StridedShard, which the placements then carry): the
// placements alone would place its shards wrongly.
func checkShardOrder(f fields) error {
	v, _ := f.get("shard_order")
	entries, ok := v.(pickle.Tuple)
	if !ok {
		return nil // None, or absent (torch before 2.10): the placements say it all
	}
	for _, e := range entries {
		o, ok := e.(*pickle.Object)
		if !ok || o.Class != shardOrderEntry || len(o.Args) != 2 {
			return fmt.Errorf("shard_order entry is %s", describe(e))
		}
		dims, ok := ints(o.Args[1])
		if !ok {
			return fmt.Errorf("shard_order mesh_dims are %s", describe(o.Args[1]))
		}
		for i := 1; i < len(dims); i++ {
			if dims[i] <= dims[i-1] {
				return fmt.Errorf("%w: shard_order %v shards a tensor dimension over the mesh axes out of order", ckpterr.ErrUnsupported, dims)
			}
		}
	}
	return nil
}

// rankAt reads the rank at coordinate coord of a mesh tensor (int32 or int64), one element
// of its storage.
func rankAt(t *statedict.Tensor, coord []int) (int, error) {
	off := t.Offset
	for i, c := range coord {
		off += int64(c) * t.Strides[i]
	}
	size := int64(t.DType.Size())
	if t.Storage == nil || off < 0 || (off+1)*size > t.Storage.Size {
		return 0, fmt.Errorf("coordinate %v lies outside its storage", coord)
	}
	b := make([]byte, size)
	if _, err := t.Storage.ReadAt(b, off*size); err != nil {
		return 0, err
	}
	if t.Storage.BigEndian {
		slices.Reverse(b)
	}
	var r int64
	for i := len(b) - 1; i >= 0; i-- {
		r = r<<8 | int64(b[i])
	}
	if size == 4 {
		r = int64(int32(r))
	}
	if r < 0 || r > math.MaxInt32 {
		return 0, fmt.Errorf("rank %d at coordinate %v", r, coord)
	}
	return int(r), nil
}
