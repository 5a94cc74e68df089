package statedict

// Policy is how a conversion treats one value (a tensor, or for Drop any entry). It is
// decided by the package that knows what the value is — quant for the codes and scales of
// a quantized layer, optimizerstate for optimizer moments, step counters and RNG states —
// from the structure of the checkpoint, never from the tensor's name, gathered by package
// plan and carried to remap as data.
type Policy struct {
	// Drop leaves the entry out of the output (a CUDA RNG state on a TPU).
	Drop bool
	// NoCast exempts the tensor from the conversion's dtype cast (a scale cast to bfloat16
	// would silently change every weight it dequantizes; a step counter is no weight).
	NoCast bool
	// DType, when valid, is the dtype the tensor is cast to in place of the conversion's
	// (optimizer moments under an optimizer dtype of their own).
	DType DType
	// Host keeps the tensor on the CPU whatever the target (RNG states, which
	// torch.set_rng_state takes as CPU byte tensors; host data such as numpy arrays).
	Host bool
	// KeepDevice keeps the device tag the tensor was saved with (an optimizer's step
	// counter stays where torch put it: on the CPU unless the optimizer was fused or
	// capturable).
	KeepDevice bool
	// Why says who decided and why, for reports ("quantized group kept", "optimizer step").
	Why string
}

// Policies holds the decisions about the tensors of a checkpoint tree, keyed by the tensors
// of the tree as read (before any remapping). Tensors without an entry are treated as
// model weights.
type Policies map[*Tensor]Policy

// Merge adds the decisions of q. A tensor decided by both keeps the stricter of each
// field: Drop, NoCast, Host and KeepDevice if either sets them, q's DType if p has none.
func (p Policies) Merge(q Policies) {
	for t, b := range q {
		a, ok := p[t]
		if !ok {
			p[t] = b
			continue
		}
		a.Drop = a.Drop || b.Drop
		a.NoCast = a.NoCast || b.NoCast
		a.Host = a.Host || b.Host
		a.KeepDevice = a.KeepDevice || b.KeepDevice
		if a.DType == Invalid {
			a.DType = b.DType
		}
		if a.Why == "" {
			a.Why = b.Why
		} else if b.Why != "" && b.Why != a.Why {
			a.Why += "; " + b.Why
		}
		p[t] = a
	}
}
