package megatron

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// DistribOptimFile is the distributed optimizer's parameter state, beside each rank's
// model_optim_rng.pt.
const DistribOptimFile = "distrib_optim.pt"

// flatBuffer is one buffer of a distrib_optim.pt as DistributedOptimizer's
// get_parameter_state_dp_zero saves it: the parameters of one dtype, flattened back to back
// in the buffer's order with the padding between buckets removed, one flat tensor per state
// ("param" — the fp32 main parameters — then the optimizer's: exp_avg, exp_avg_sq).
type flatBuffer struct {
	dtype  statedict.DType // the parameters' dtype (the buffer key's first member)
	key    string          // the buffer key as saved, for messages
	keys   []string        // the states, in file order
	flat   []*statedict.Tensor
	numel  int64 // numel_unpadded
	bucket int   // the buffer's index in the file
}

// parseDistribOptim reads a distrib_optim.pt's tree: {"buckets_coalesced": True, 0: {(param
// dtype, grad dtype): {"param": …, "exp_avg": …, "exp_avg_sq": …, "numel_unpadded": n}}, 1:
// …}, one entry per buffer.
func parseDistribOptim(root statedict.Value) ([]flatBuffer, error) {
	d, ok := root.(*statedict.Dict)
	if !ok {
		if _, isList := root.(*statedict.List); isList {
			return nil, fmt.Errorf("%w: a list of per-optimizer states (a ChainedOptimizer: several optimizers, e.g. for experts); ckpt merges one distributed optimizer", ckpterr.ErrUnsupported)
		}
		return nil, fmt.Errorf("%w: holds %s, not the dict DistributedOptimizer saves", ckpterr.ErrCorrupt, describe(root))
	}
	if v, _ := d.Get("buckets_coalesced"); v != true {
		return nil, fmt.Errorf("%w: no buckets_coalesced: a distrib_optim.pt in Megatron-LM's format from before April 2024 (per-bucket lists); Megatron's --ckpt-convert-update-legacy-dist-opt-format re-saves it", ckpterr.ErrUnsupported)
	}
	var out []flatBuffer
	for _, e := range d.Entries() {
		if e.Key == "buckets_coalesced" {
			continue
		}
		i, ok := e.Key.(int64)
		if !ok || i != int64(len(out)) {
			return nil, fmt.Errorf("%w: entry %s: the buffers are numbered 0, 1, … in order", ckpterr.ErrCorrupt, statedict.KeyString(e.Key))
		}
		byDType, ok := e.Value.(*statedict.Dict)
		if !ok || byDType.Len() != 1 {
			return nil, fmt.Errorf("%w: buffer %d: not one dict keyed by its (param dtype, grad dtype)", ckpterr.ErrCorrupt, i)
		}
		k := byDType.Entries()[0]
		key, ok := k.Key.(statedict.Tuple)
		var pdt statedict.DType
		if ok && len(key) == 2 {
			pdt, ok = key[0].(statedict.DType)
		}
		if !ok {
			return nil, fmt.Errorf("%w: buffer %d is keyed %s, not (param dtype, grad dtype)", ckpterr.ErrCorrupt, i, statedict.KeyString(k.Key))
		}
		st, ok := k.Value.(*statedict.Dict)
		if !ok {
			return nil, fmt.Errorf("%w: buffer %d: its state is %s, not a dict", ckpterr.ErrCorrupt, i, describe(k.Value))
		}
		b := flatBuffer{dtype: pdt, key: statedict.KeyString(k.Key), bucket: int(i)}
		for _, s := range st.Entries() {
			name, _ := s.Key.(string)
			switch v := s.Value.(type) {
			case int64:
				if name != "numel_unpadded" || v < 0 {
					return nil, fmt.Errorf("%w: buffer %d: %s = %d", ckpterr.ErrCorrupt, i, statedict.KeyString(s.Key), v)
				}
				b.numel = v
			case *statedict.Tensor:
				if name == "" || len(v.Shape) != 1 {
					return nil, fmt.Errorf("%w: buffer %d: %s is a %v tensor, not a flat one", ckpterr.ErrCorrupt, i, statedict.KeyString(s.Key), v.Shape)
				}
				b.keys = append(b.keys, name)
				b.flat = append(b.flat, v)
			default:
				return nil, fmt.Errorf("%w: buffer %d: %s is %s", ckpterr.ErrCorrupt, i, statedict.KeyString(s.Key), describe(v))
			}
		}
		if !slices.Contains(b.keys, "param") {
			return nil, fmt.Errorf("%w: buffer %d has no \"param\" (the main parameters)", ckpterr.ErrCorrupt, i)
		}
		for j, t := range b.flat {
			if t.Shape[0] != b.numel {
				return nil, fmt.Errorf("%w: buffer %d: %s holds %d elements, numel_unpadded says %d", ckpterr.ErrCorrupt, i, b.keys[j], t.Shape[0], b.numel)
			}
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no buffer", ckpterr.ErrCorrupt)
	}
	return out, nil
}

// layoutParam is one trainable parameter of a rank, in model order.
type layoutParam struct {
	numel  int64
	shared bool // the shared_embedding flag: a tied embedding or its copy with PP > 1
}

// noBuckets is a bucket size that never closes a bucket.
const noBuckets = 0

// bufferLayout is where DistributedOptimizer puts each parameter of a buffer in the
// coalesced state get_parameter_state_dp_zero saves, and that state's size
// (numel_unpadded): _compute_per_buffer_param_layout takes the parameters in reverse order,
// starts each at a multiple of align elements (64 since Megatron-LM of July 2024, 1
// before), closes a bucket once it holds bucketSize elements and around a shared embedding
// (which gets a bucket of its own); the saved state drops each bucket's end padding, so a
// bucket's parameters keep their places relative to its start.
func bufferLayout(params []layoutParam, bucketSize, align int64) (starts []int64, total int64) {
	starts = make([]int64, len(params))
	pad := func(x int64) int64 { return (x + align - 1) / align * align }
	var start, end int64 // within the current bucket
	open := 0            // parameters in the current bucket
	for i := len(params) - 1; i >= 0; i-- {
		p := params[i]
		start = pad(start)
		if p.shared && open > 0 {
			total += start
			start, open = 0, 0
		}
		end = start + p.numel
		starts[i] = total + start
		open++
		if (bucketSize != noBuckets && end >= bucketSize) || p.shared {
			total += end
			start, open = 0, 0
		} else {
			start = end
		}
	}
	if open > 0 {
		total += end
	}
	return starts, total
}

// alignments are the parameter alignments Megatron-LM's releases have used, newest first.
var alignments = []int64{64, 1}

// placeParams finds the layout of buffer b over params (a rank's parameters of b's dtype,
// in model order): the alignment whose total matches the saved numel_unpadded. Two
// alignments that match but place the parameters differently are refused, as is none.
func placeParams(b flatBuffer, params []layoutParam, bucketSize int64, names []string) ([]int64, error) {
	var found []int64
	var tried []string
	for _, align := range alignments {
		starts, total := bufferLayout(params, bucketSize, align)
		if total != b.numel {
			tried = append(tried, fmt.Sprintf("%d aligned to %d elements", total, align))
			continue
		}
		if found != nil && !slices.Equal(found, starts) {
			return nil, fmt.Errorf("%w: buffer %d %s: the parameters fit its %d elements laid out by more than one Megatron-LM release, at different places", ckpterr.ErrUnsupported, b.bucket, b.key, b.numel)
		}
		found = starts
	}
	if found == nil {
		bs := "no bucketing"
		if bucketSize != noBuckets {
			bs = fmt.Sprintf("buckets of %d elements", bucketSize)
		}
		return nil, fmt.Errorf("%w: buffer %d %s holds %d elements, but its %d parameters (%s … %s) laid out as DistributedOptimizer lays them (%s) take %s: frozen parameters, or a bucket size the args do not record",
			ckpterr.ErrCorrupt, b.bucket, b.key, b.numel, len(params), names[0], names[len(names)-1], bs, strings.Join(tried, " or "))
	}
	return found, nil
}

// bucketSizeOf is the bucket size DDP used on pipeline stage pp for a rank of numParams
// parameters (training.py's resolve_ddp_bucket_size and the per-chunk sizes): no buckets
// past the first stage, without overlap_grad_reduce, or with
// overlap_param_gather_with_optimizer_step; otherwise ddp_num_buckets' share,
// ddp_bucket_size, or max(40M, 1M × data-parallel ranks).
func (r *runArgs) bucketSizeOf(pp, numParams int64) int64 {
	switch {
	case pp > 0 || !r.overlapGrad || r.overlapParams:
		return noBuckets
	case r.buckets > 0:
		return max(numParams/r.buckets, 1)
	case r.bucketSize > 0:
		return r.bucketSize
	}
	return max(40_000_000, 1_000_000*r.dpcp)
}

// view is the tensor of shape viewing elements [start, start+numel(shape)) of the flat
// tensor t.
func view(t *statedict.Tensor, start int64, shape []int64) (*statedict.Tensor, error) {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	if start < 0 || start+n > t.Shape[0] {
		return nil, fmt.Errorf("%w: elements [%d, %d) of a %d-element buffer", ckpterr.ErrCorrupt, start, start+n, t.Shape[0])
	}
	if len(t.Strides) != 1 || (t.Shape[0] > 1 && t.Strides[0] != 1) {
		return nil, fmt.Errorf("%w: a strided flat buffer", ckpterr.ErrUnsupported)
	}
	out := *t
	out.Shape, out.Strides, out.Offset = slices.Clone(shape), statedict.ContiguousStrides(shape), t.Offset+start
	out.RequiresGrad, out.Parameter, out.Attrs = false, false, nil
	return &out, nil
}
