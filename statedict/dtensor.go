package statedict

// DTensor is one rank's shard of a torch.distributed.tensor.DTensor, as the rank pickled it
// (torch.save of an FSDP2 or tensor-parallel model's state_dict on each rank): Local holds
// the rank's elements, the rest places them in the global tensor. It is a node of a rank
// file's tree, not a tensor of the checkpoint: a reader of the ranks' files reassembles the
// whole tensor from them (DTensor.full_tensor()), and nothing else reads it as data.
type DTensor struct {
	// Local is the rank's shard (DTensor._local_tensor).
	Local *Tensor
	// Shape and Stride are the global tensor's (DTensor.shape, DTensor.stride()).
	Shape, Stride []int64
	// Placements are one per mesh axis as torch's repr writes them: "Shard(dim=0)",
	// "Replicate()", "_StridedShard(dim=0, sf=2)", "Partial(sum)".
	Placements []string
	// Mesh is the device mesh's shape, outermost axis first, with its dimension names
	// ("" for an unnamed mesh).
	Mesh []MeshAxis
	// Rank is the global rank that saved the shard: the mesh's _rank, or for meshes
	// pickled without one (earlier torch), the mesh tensor's rank at Coord.
	Rank int
	// Coord is the saving rank's coordinate on the mesh.
	Coord []int
	// World is the number of ranks of the job when the pickle says it (recent torch pickles
	// the root mesh's rank map with every mesh, submeshes included), else 0. A
	// DTensor on a submesh (FSDP2 on the dp axis of a dp × tp job, for a parameter tensor
	// parallelism leaves alone) is replicated over the mesh axes not in it.
	World int
}

// MeshSize is the number of ranks of the DTensor's mesh.
func (d *DTensor) MeshSize() int {
	n := 1
	for _, a := range d.Mesh {
		n *= a.Size
	}
	return n
}
