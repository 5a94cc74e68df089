// Package inspect describes a checkpoint: every tensor as stored (name, dtype, shape,
// location, size, optionally a hash of its bytes), totals by dtype, and the non-tensor
// entries. Its Report is the JSON contract of `ckpt inspect --json`, stable for scripts:
// names and dtypes are torch's, so listings can be compared with what torch reports.
package inspect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"math/big"
	"slices"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/internal/plural"

	"github.com/ckpt-dev/ckpt/formats/hf"
	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Report is the description of one checkpoint.
type Report struct {
	Format     string       `json:"format"`
	Path       string       `json:"path"`
	Tensors    []Tensor     `json:"tensors"`
	Totals     []DTypeTotal `json:"totals"`
	NonTensors []NonTensor  `json:"non_tensors"`
	// TotalBytes sums the tensors' contiguous bytes, counting each once per name.
	TotalBytes int64 `json:"total_bytes"`
	// Training describes the optimizer, scheduler, scaler and RNG states (Options.Training).
	Training *optimizerstate.Analysis `json:"training,omitempty"`
	// Quantized groups quantized tensors with their scales into logical tensors; set when
	// the checkpoint is (or looks) quantized.
	Quantized *Quantized `json:"quantized,omitempty"`
	// Ignored lists files of a folder that hold weights or pickles outside the checkpoint
	// read (another layout's copy of the weights, training-state pickles).
	Ignored []string `json:"ignored,omitempty"`
	// Dangerous lists the globals the checkpoint's pickles reference that are known to run
	// code when Python unpickles them (as `ckpt scan` classifies them): "module.name at
	// FILE: WHERE". ckpt read them as inert records.
	Dangerous []string `json:"dangerous,omitempty"`
}

// Tensor describes one stored tensor.
type Tensor struct {
	Name     string  `json:"name"`
	DType    string  `json:"dtype"`
	Shape    []int64 `json:"shape"`
	Location string  `json:"location"`
	NBytes   int64   `json:"nbytes"`
	// Module is the class of the pickled nn.Module whose state_dict the tensor belongs to
	// (torch.save of a model object); empty for tensors stored as such.
	Module string `json:"module,omitempty"`
	// SHA256 is the hash of the tensor's contiguous little-endian bytes (what
	// tensor.contiguous() holds, lazy conj/neg resolved); set with Options.Hash.
	SHA256 string `json:"sha256,omitempty"`
	// SharesStorageWith names the first tensor viewing the same storage (tied weights).
	SharesStorageWith string `json:"shares_storage_with,omitempty"`
}

// DTypeTotal counts tensors and bytes of one dtype.
type DTypeTotal struct {
	DType   string `json:"dtype"`
	Tensors int    `json:"tensors"`
	NBytes  int64  `json:"nbytes"`
}

// NonTensor is a leaf that is not a tensor: a number, string, flag, or an object ckpt keeps
// as an inert record. Value is set for JSON-representable scalars (HasValue tells a None
// value from no value; JSON writes "value": null for None and omits it otherwise).
type NonTensor struct {
	Name     string
	Type     string
	Value    any
	HasValue bool
}

// MarshalJSON writes {"name", "type"[, "value"]}.
func (n NonTensor) MarshalJSON() ([]byte, error) {
	type plain struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	type withValue struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Value any    `json:"value"`
	}
	if n.HasValue {
		return json.Marshal(withValue{n.Name, n.Type, n.Value})
	}
	return json.Marshal(plain{n.Name, n.Type})
}

// Options select the optional parts of a report.
type Options struct {
	// Hash adds the SHA-256 of every tensor's bytes (reads the whole checkpoint).
	Hash bool
	// Training adds the training-state analysis: each optimizer's parameters mapped onto
	// the model, with any mismatch; schedulers, scalers, counters, RNG states.
	Training bool
	// OptimizerNames are names files for optimizers shapes cannot map (optimizerstate.Find).
	OptimizerNames map[string][]string
}

// Build describes ck.
func Build(ctx context.Context, ck *statedict.Checkpoint, opts Options) (*Report, error) {
	// The rows are allocated at their count (a first walk counts the tensors stored as
	// such): grown by doubling, the 300 000 rows of a large checkpoint (38 MB) needed half
	// as much again while copied, at the peak of the live heap.
	n := 0
	_ = statedict.Walk(ck.Root, "", func(_ string, v statedict.Value) error {
		if _, ok := v.(*statedict.Tensor); ok {
			n++
		}
		return nil
	})
	r := &Report{Format: ck.Format, Path: ck.Path, Tensors: make([]Tensor, 0, n), NonTensors: []NonTensor{}, Totals: []DTypeTotal{}, Ignored: ck.Ignored}
	firstByStorage := make(map[*statedict.Storage]string, n)
	totals := map[string]*DTypeTotal{}
	var hashed []statedict.NamedTensor // the tensors of r.Tensors, in order (Options.Hash)
	add := func(name string, t *statedict.Tensor, module string) error {
		it := Tensor{Name: name, DType: DTypeName(t), Shape: t.Shape, NBytes: t.NBytes(), Module: module}
		if t.Storage != nil {
			it.Location = t.Storage.Location
			if first, ok := firstByStorage[t.Storage]; ok {
				it.SharesStorageWith = first
			} else {
				firstByStorage[t.Storage] = name
			}
		}
		if it.Shape == nil {
			it.Shape = []int64{}
		}
		r.Tensors = append(r.Tensors, it)
		if opts.Hash {
			hashed = append(hashed, statedict.NamedTensor{Name: name, Tensor: t})
		}
		tot := totals[it.DType]
		if tot == nil {
			tot = &DTypeTotal{DType: it.DType}
			totals[it.DType] = tot
		}
		tot.Tensors++
		tot.NBytes += it.NBytes
		r.TotalBytes += it.NBytes
		return nil
	}
	err := statedict.Walk(ck.Root, "", func(name string, v statedict.Value) error {
		t, ok := v.(*statedict.Tensor)
		if !ok {
			r.NonTensors = append(r.NonTensors, describe(name, v))
			// A pickled nn.Module holds its weights in its __dict__: list its state_dict.
			if o, isObj := v.(*statedict.Object); isObj {
				sd, isModule, err := o.ModuleStateDict()
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				if isModule {
					for _, e := range sd.Entries() {
						if err := add(statedict.JoinName(name, statedict.KeyString(e.Key)), e.Value.(*statedict.Tensor), o.Class); err != nil {
							return err
						}
					}
				}
			}
			return nil
		}
		return add(name, t, "")
	})
	if err != nil {
		return nil, err
	}
	if len(r.Tensors) == 0 {
		if h := statedict.HiddenTensors(ck.Root); h.Tensors > 0 {
			return nil, fmt.Errorf("%s: %w: %s inside %s objects, which ckpt does not read as data", ck.Path, ckpterr.ErrUnsupported, plural.Of(h.Tensors, "tensor"), strings.Join(h.Classes, ", "))
		}
	}
	if opts.Hash {
		sums := make([]hash.Hash, len(hashed))
		err := statedict.ReadTensors(ctx, hashed, func(i int) io.Writer {
			sums[i] = sha256.New()
			return sums[i]
		}, statedict.ReadOptions{Release: ck.ReleaseMemory})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ck.Path, err)
		}
		for i, h := range sums {
			r.Tensors[i].SHA256 = hex.EncodeToString(h.Sum(nil))
		}
	}
	for _, t := range totals {
		r.Totals = append(r.Totals, *t)
	}
	if opts.Training {
		// A folder's config.json says in which order its model registers its parameters.
		var cfg []byte
		if slices.Contains(ck.Extras, hf.ConfigFile) {
			if cfg, err = hf.ReadConfig(ck.Files); err != nil {
				return nil, fmt.Errorf("%s: %w", ck.Path, err)
			}
		}
		if r.Training, err = optimizerstate.Analyze(ck.Root, optimizerstate.Options{Names: opts.OptimizerNames, Config: cfg}); err != nil {
			return nil, err
		}
	}
	r.Quantized = quantized(ck)
	sort.Slice(r.Totals, func(i, j int) bool {
		if r.Totals[i].NBytes != r.Totals[j].NBytes {
			return r.Totals[i].NBytes > r.Totals[j].NBytes
		}
		return r.Totals[i].DType < r.Totals[j].DType
	})
	return r, nil
}

// DTypeName is the dtype as listed: torch's name, or the source format's name for dtypes
// torch does not have.
func DTypeName(t *statedict.Tensor) string { return t.DTypeName() }

// describe names the Python type of a non-tensor leaf as type(x) would, qualified for
// library types ("torch.Size", "numpy.float64", "argparse.Namespace").
func describe(name string, v statedict.Value) NonTensor {
	nt := NonTensor{Name: name}
	switch x := v.(type) {
	case nil:
		nt.Type, nt.HasValue = "NoneType", true
	case bool:
		nt.Type, nt.Value, nt.HasValue = "bool", x, true
	case int64:
		nt.Type, nt.Value, nt.HasValue = "int", x, true
	case *big.Int:
		nt.Type, nt.Value, nt.HasValue = "int", x, true
	case float64:
		nt.Type, nt.Value, nt.HasValue = "float", jsonFloat(x), true
	case string:
		nt.Type, nt.Value, nt.HasValue = "str", x, true
	case complex128:
		nt.Type = "complex"
	case []byte:
		nt.Type = "bytes"
	case *statedict.Dict:
		nt.Type = "dict"
		if x.Class != "" {
			nt.Type = x.Class
		}
	case *statedict.List:
		nt.Type = "list"
	case statedict.Tuple:
		nt.Type = "tuple"
	case statedict.DType:
		nt.Type, nt.Value, nt.HasValue = "torch.dtype", "torch."+x.String(), true
	case *statedict.NDArray:
		nt.Type = "numpy.ndarray"
		if x.Scalar {
			nt.Type = "numpy." + numpyScalarName(x.DType)
		}
	case *statedict.Object:
		nt.Type = x.Class
		switch x.Class {
		case "builtins.set":
			nt.Type = "set"
		case "builtins.frozenset":
			nt.Type = "frozenset"
		}
	default:
		nt.Type = fmt.Sprintf("%T", v)
	}
	return nt
}

// jsonFloat keeps non-finite floats representable in JSON, as strings.
func jsonFloat(f float64) any {
	if f != f || f > 1.7976931348623157e308 || f < -1.7976931348623157e308 {
		return statedict.PyFloat(f)
	}
	return f
}

// numpyScalarName maps a numpy dtype string ("<f8") to numpy's scalar type name ("float64").
func numpyScalarName(dt string) string {
	if len(dt) < 2 {
		return dt
	}
	kind, size := dt[len(dt)-2:len(dt)-1], dt[len(dt)-1:]
	if len(dt) >= 3 && (dt[0] == '<' || dt[0] == '>' || dt[0] == '|' || dt[0] == '=') {
		kind, size = dt[1:2], dt[2:]
	}
	bits := map[string]string{"1": "8", "2": "16", "4": "32", "8": "64", "16": "128"}[size]
	switch kind {
	case "f":
		return "float" + bits
	case "i":
		return "int" + bits
	case "u":
		return "uint" + bits
	case "c":
		return "complex" + map[string]string{"8": "64", "16": "128"}[size]
	case "b":
		return "bool"
	}
	return dt
}
