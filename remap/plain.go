package remap

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"

	"github.com/ckpt-dev/ckpt/codec"
	"github.com/ckpt-dev/ckpt/statedict"
)

// numpyDTypes maps numpy's dtype kind+size ("f8") to torch dtypes.
var numpyDTypes = map[string]statedict.DType{
	"f2": statedict.Float16, "f4": statedict.Float32, "f8": statedict.Float64,
	"i1": statedict.Int8, "i2": statedict.Int16, "i4": statedict.Int32, "i8": statedict.Int64,
	"u1": statedict.Uint8, "u2": statedict.Uint16, "u4": statedict.Uint32, "u8": statedict.Uint64,
	"b1": statedict.Bool, "c8": statedict.Complex64, "c16": statedict.Complex128,
}

// PlainReport says what Plain turned into data.
type PlainReport struct {
	// Converted describes each value turned into plain data ("epoch: numpy scalar <i8 →
	// Python number"), in tree order.
	Converted []string
	// HostData lists the tensors made from numpy arrays, by flattened name: host data,
	// never on a device in the source (numpy's RNG state must stay on the CPU for
	// np.random.set_state to take it back).
	HostData []string
	// Host holds those tensors.
	Host map[*statedict.Tensor]bool
}

// Plain returns root with the values torch.load(weights_only=True) refuses turned into
// the plain data they hold: a numpy scalar becomes a Python int/float/bool, a numpy array a
// CPU tensor, a pickled nn.Module its state_dict, a container of data (argparse.Namespace,
// Lightning's AttributeDict, omegaconf's DictConfig, a dataclass: statedict.Object.Data)
// the dict or list it holds, a defaultdict a dict. Entries skip reports are left as they
// are (a conversion drops them). Containers are copied only on the way to a value that
// changed; the source tree is never modified, and shared containers stay shared.
func Plain(root statedict.Value, skip func(name string) bool) (statedict.Value, *PlainReport, error) {
	p := &plainer{rep: &PlainReport{Host: map[*statedict.Tensor]bool{}}, skip: skip, done: map[any]statedict.Value{}}
	out, _, err := p.value(root, "")
	if err != nil {
		return nil, nil, err
	}
	return out, p.rep, nil
}

type plainer struct {
	rep  *PlainReport
	skip func(string) bool
	// done holds the result for each container already walked, so that a container the
	// tree shares stays one.
	done map[any]statedict.Value
}

// value is v as plain data, and whether it differs from v (v itself when nothing under it
// changes).
func (p *plainer) value(v statedict.Value, name string) (statedict.Value, bool, error) {
	pv, changed, err := p.convert(v, name)
	if err != nil {
		return nil, false, err
	}
	if changed {
		v = pv
	}
	switch c := v.(type) {
	case *statedict.Dict:
		if out, ok := p.done[c]; ok {
			return out, changed || out != statedict.Value(c), nil
		}
		var out *statedict.Dict
		for i, e := range c.Entries() {
			full := statedict.JoinName(name, statedict.KeyString(e.Key))
			nv, ch := e.Value, false
			if p.skip == nil || !p.skip(full) {
				if nv, ch, err = p.value(e.Value, full); err != nil {
					return nil, false, err
				}
			}
			if ch && out == nil {
				out = statedict.NewDictSize(c.Class, c.Len())
				out.Attrs = c.Attrs
				for _, prev := range c.Entries()[:i] {
					out.Append(prev.Key, prev.Value)
				}
			}
			if out != nil {
				out.Append(e.Key, nv)
			}
		}
		if out == nil {
			p.done[c] = c
			return c, changed, nil
		}
		p.done[c] = out
		return out, true, nil
	case *statedict.List:
		if out, ok := p.done[c]; ok {
			return out, changed || out != statedict.Value(c), nil
		}
		var out *statedict.List
		for i, it := range c.Items {
			nv, ch := it, false
			if full := statedict.JoinName(name, fmt.Sprint(i)); p.skip == nil || !p.skip(full) {
				if nv, ch, err = p.value(it, full); err != nil {
					return nil, false, err
				}
			}
			if ch && out == nil {
				out = &statedict.List{Items: append(make([]statedict.Value, 0, len(c.Items)), c.Items[:i]...)}
			}
			if out != nil {
				out.Items = append(out.Items, nv)
			}
		}
		if out == nil {
			p.done[c] = c
			return c, changed, nil
		}
		p.done[c] = out
		return out, true, nil
	case statedict.Tuple:
		var out statedict.Tuple
		for i, it := range c {
			nv, ch, err := p.value(it, statedict.JoinName(name, fmt.Sprint(i)))
			if err != nil {
				return nil, false, err
			}
			if ch && out == nil {
				out = append(make(statedict.Tuple, 0, len(c)), c[:i]...)
			}
			if out != nil {
				out = append(out, nv)
			}
		}
		if out == nil {
			return c, changed, nil
		}
		return out, true, nil
	}
	return v, changed, nil
}

// convert turns one value torch.load(weights_only=True) refuses into the plain data it
// holds; ok is false for values left as they are.
func (p *plainer) convert(v statedict.Value, name string) (statedict.Value, bool, error) {
	switch x := v.(type) {
	case *statedict.NDArray:
		if len(x.DType) < 3 {
			return nil, false, fmt.Errorf("%s: numpy dtype %q", name, x.DType)
		}
		order, code := x.DType[0], x.DType[1:]
		dt, ok := numpyDTypes[code]
		if !ok {
			return nil, false, fmt.Errorf("%s: numpy dtype %q has no torch equivalent", name, x.DType)
		}
		bigEndian := order == '>'
		if x.Scalar {
			if int64(len(x.Data)) != int64(dt.Size()) {
				return nil, false, fmt.Errorf("%s: numpy scalar of %d bytes for dtype %s", name, len(x.Data), x.DType)
			}
			p.rep.Converted = append(p.rep.Converted, fmt.Sprintf("%s: numpy scalar %s → Python number", name, x.DType))
			return scalar(x.Data, dt, bigEndian), true, nil
		}
		n := int64(1)
		for _, d := range x.Shape {
			n *= d
		}
		if n*int64(dt.Size()) != int64(len(x.Data)) {
			return nil, false, fmt.Errorf("%s: numpy array of shape %v holds %d bytes", name, x.Shape, len(x.Data))
		}
		st := statedict.NewMappedStorage("numpy:"+name, "cpu", dt, x.Data)
		st.BigEndian = bigEndian && dt.Size() > 1
		t := &statedict.Tensor{DType: dt, Shape: append([]int64{}, x.Shape...), Storage: st}
		if x.Fortran {
			t.Strides = make([]int64, len(x.Shape))
			acc := int64(1)
			for i := range x.Shape {
				t.Strides[i] = acc
				acc *= x.Shape[i]
			}
		} else {
			t.Strides = statedict.ContiguousStrides(x.Shape)
		}
		p.rep.Converted = append(p.rep.Converted, fmt.Sprintf("%s: numpy array %s%v → tensor", name, x.DType, x.Shape))
		p.rep.Host[t] = true
		p.rep.HostData = append(p.rep.HostData, name)
		return t, true, nil
	case *statedict.Object:
		if sd, ok, err := x.ModuleStateDict(); ok || err != nil {
			if err != nil {
				return nil, false, fmt.Errorf("%s: %w", displayName(name), err)
			}
			p.rep.Converted = append(p.rep.Converted, fmt.Sprintf("%s: pickled nn.Module %s → its state_dict (%d tensors)", displayName(name), x.Class, sd.Len()))
			return sd, true, nil
		}
		d, what, ok, err := x.Data()
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", displayName(name), err)
		}
		if ok {
			p.rep.Converted = append(p.rep.Converted, fmt.Sprintf("%s: %s", displayName(name), what))
			return d, true, nil
		}
	case *statedict.Dict:
		if x.Class == "collections.defaultdict" {
			// Its default factory only matters to code adding keys; the mapping is the data.
			d := &statedict.Dict{Attrs: x.Attrs}
			for _, e := range x.Entries() {
				d.Set(e.Key, e.Value)
			}
			p.rep.Converted = append(p.rep.Converted, fmt.Sprintf("%s: collections.defaultdict → dict", displayName(name)))
			return d, true, nil
		}
	}
	return v, false, nil
}

// scalar decodes one numpy scalar.
func scalar(b []byte, dt statedict.DType, bigEndian bool) statedict.Value {
	var bo binary.ByteOrder = binary.LittleEndian
	if bigEndian {
		bo = binary.BigEndian
	}
	switch dt {
	case statedict.Float64:
		return math.Float64frombits(bo.Uint64(b))
	case statedict.Float32:
		return float64(math.Float32frombits(bo.Uint32(b)))
	case statedict.Float16:
		return float64(codec.F16ToFloat32(bo.Uint16(b)))
	case statedict.Int8:
		return int64(int8(b[0]))
	case statedict.Int16:
		return int64(int16(bo.Uint16(b)))
	case statedict.Int32:
		return int64(int32(bo.Uint32(b)))
	case statedict.Int64:
		return int64(bo.Uint64(b))
	case statedict.Uint8:
		return int64(b[0])
	case statedict.Uint16:
		return int64(bo.Uint16(b))
	case statedict.Uint32:
		return int64(bo.Uint32(b))
	case statedict.Uint64:
		return new(big.Int).SetUint64(bo.Uint64(b))
	case statedict.Bool:
		return b[0] != 0
	case statedict.Complex64:
		return complex(float64(math.Float32frombits(bo.Uint32(b))), float64(math.Float32frombits(bo.Uint32(b[4:]))))
	case statedict.Complex128:
		return complex(math.Float64frombits(bo.Uint64(b)), math.Float64frombits(bo.Uint64(b[8:])))
	}
	return nil
}

// displayName names the checkpoint's root "(root)" in reports.
func displayName(name string) string {
	if name == "" {
		return "(root)"
	}
	return name
}
