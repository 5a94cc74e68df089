package optimizerstate

import (
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/statedict"
)

// ModelParam is a model state-dict entry that can be an optimizer parameter.
type ModelParam struct {
	// Name is the entry's key: the first of the names viewing this tensor.
	Name   string
	Tensor *statedict.Tensor
	// Tied are later keys viewing the same tensor (tied weights such as lm_head.weight
	// = embed_tokens.weight). named_parameters() lists a tied parameter once, under its
	// first name, and so does the optimizer.
	Tied []string
}

// Skipped is a model state-dict entry that is not an optimizer parameter, and why.
type Skipped struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// bufferNames are the last name components of the buffers models register next to their
// parameters: BatchNorm running statistics and counter, rotary-embedding frequencies.
var bufferNames = []string{"running_mean", "running_var", "num_batches_tracked", "inv_freq", "original_inv_freq"}

// IsModelStateDict reports whether v looks like nn.Module.state_dict(): a non-empty dict
// with string keys and only tensor values.
func IsModelStateDict(v statedict.Value) bool {
	d, ok := v.(*statedict.Dict)
	if !ok || d.Len() == 0 {
		return false
	}
	for _, e := range d.Entries() {
		if _, ok := e.Key.(string); !ok {
			return false
		}
		if _, ok := e.Value.(*statedict.Tensor); !ok {
			return false
		}
	}
	return true
}

// ModelParams lists the entries of a model state dict that can be parameters, in
// state-dict order (which is named_parameters() order with the buffers left out), and the
// entries that cannot: buffers known by name, tensors of a non-floating dtype (integers
// cannot have gradients), and later names of tied tensors, which are folded into the
// first name's ModelParam.
func ModelParams(model *statedict.Dict) ([]ModelParam, []Skipped) {
	var params []ModelParam
	var skipped []Skipped
	type view struct {
		st     *statedict.Storage
		offset int64
		shape  string
	}
	first := map[view]int{}
	for _, e := range model.Entries() {
		name, _ := e.Key.(string)
		t, ok := e.Value.(*statedict.Tensor)
		if !ok {
			continue
		}
		last := name[strings.LastIndexByte(name, '.')+1:]
		switch {
		case slices.Contains(bufferNames, last):
			skipped = append(skipped, Skipped{name, "buffer"})
			continue
		case !t.DType.IsFloatingPoint() && !t.DType.IsComplex():
			skipped = append(skipped, Skipped{name, t.DType.String() + " buffer"})
			continue
		}
		if t.Storage != nil {
			v := view{t.Storage, t.Offset, shapeKey(t)}
			if i, tied := first[v]; tied {
				params[i].Tied = append(params[i].Tied, name)
				skipped = append(skipped, Skipped{name, "tied to " + params[i].Name})
				continue
			}
			first[v] = len(params)
		}
		params = append(params, ModelParam{Name: name, Tensor: t})
	}
	return params, skipped
}

// shapeKey identifies a view's geometry (shape and strides) for tie detection.
func shapeKey(t *statedict.Tensor) string {
	var b strings.Builder
	for i, d := range t.Shape {
		b.WriteString(statedict.KeyString(d))
		b.WriteByte(':')
		b.WriteString(statedict.KeyString(t.Strides[i]))
		b.WriteByte(',')
	}
	return b.String()
}
