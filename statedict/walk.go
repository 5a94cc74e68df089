package statedict

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// Leaf is a non-container value of a checkpoint tree with its flattened name.
type Leaf struct {
	Name  string
	Value Value
}

// Walk visits the leaves of v depth-first in container order. Names join dict keys
// (KeyString) and list/tuple indices with ".", as torch.distributed.checkpoint flattens state
// dicts; prefix is the name of v itself ("" at the root). Tensors are leaves; so are objects,
// numpy arrays and empty containers (reported with the container as value). A container
// that contains itself is an error rather than an endless walk.
func Walk(v Value, prefix string, fn func(name string, v Value) error) error {
	w := walker{fn: fn, open: map[any]bool{}}
	return w.walk(v, prefix)
}

type walker struct {
	fn    func(string, Value) error
	open  map[any]bool // containers on the current path
	depth int
}

// JoinName appends key k to the flattened name prefix with ".", the one naming rule of
// flattened names ("" is the root).
func JoinName(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

func (w *walker) enter(c any, name string) error {
	if w.open[c] {
		return fmt.Errorf("%s: container contains itself", name)
	}
	w.open[c] = true
	return nil
}

func (w *walker) walk(v Value, name string) error {
	w.depth++
	defer func() { w.depth-- }()
	if w.depth > maxValueDepth {
		return fmt.Errorf("%s: %w: values nested deeper than %d levels", name, ckpterr.ErrUnsupported, maxValueDepth)
	}
	switch c := v.(type) {
	case *Dict:
		if c.Len() == 0 {
			return w.fn(name, v)
		}
		if err := w.enter(c, name); err != nil {
			return err
		}
		for _, e := range c.entries {
			if err := w.walk(e.Value, JoinName(name, KeyString(e.Key))); err != nil {
				return err
			}
		}
		delete(w.open, c)
	case *List:
		if len(c.Items) == 0 {
			return w.fn(name, v)
		}
		if err := w.enter(c, name); err != nil {
			return err
		}
		for i, x := range c.Items {
			if err := w.walk(x, JoinName(name, fmt.Sprint(i))); err != nil {
				return err
			}
		}
		delete(w.open, c)
	case Tuple:
		if len(c) == 0 {
			return w.fn(name, v)
		}
		for i, x := range c {
			if err := w.walk(x, JoinName(name, fmt.Sprint(i))); err != nil {
				return err
			}
		}
	default:
		return w.fn(name, v)
	}
	return nil
}

// Flatten returns the leaves of v in Walk order.
func Flatten(v Value) ([]Leaf, error) {
	var out []Leaf
	err := Walk(v, "", func(name string, v Value) error {
		out = append(out, Leaf{name, v})
		return nil
	})
	return out, err
}

// NamedTensor is a tensor with its flattened name.
type NamedTensor struct {
	Name   string
	Tensor *Tensor
}

// Checkpoint is a checkpoint opened by a format reader: a tree of values whose tensors read
// their bytes lazily from the source files, which stay open (mapped) until Close.
type Checkpoint struct {
	// Format names the on-disk format ("torch-zip", "torch-legacy", "safetensors", ...).
	Format string
	// Path is the file or folder it was read from.
	Path string
	// Root is the top-level value (usually a *Dict).
	Root Value
	// Extras are files that travel with the checkpoint (config.json, tokenizer files),
	// relative to Path when it is a folder.
	Extras []string
	// Ignored are files of the folder that hold weights or pickles outside the layout that
	// was read (another format's copy of the weights, consolidated or training-state files):
	// neither read nor carried along, so a converter can say it left them out.
	Ignored []string
	// Outside are links of the folder that lead outside the checkpoint's tree, and entries
	// that are not regular files (FIFOs, devices): never read,
	// never carried along.
	Outside []string
	// Files reads the folder's files by relative name (Extras among them), confined to the
	// checkpoint's tree; nil for a single-file checkpoint.
	Files fs.FS
	// Metadata is the free-form string metadata the source holds besides its tensors
	// (safetensors' __metadata__: kohya and modelspec fields, "format"); writers of layouts
	// that hold metadata keep it. nil when there is none.
	Metadata map[string]string
	// WeightsName is the base name a folder layout gives its weights files: "model"
	// (model.safetensors), diffusers' "diffusion_pytorch_model", PEFT's "adapter_model";
	// "" means "model".
	WeightsName string
	// Components are the parts of a checkpoint made of several, each an entry of Root
	// holding its tree and a folder of its own (a diffusers pipeline's unet, vae,
	// text_encoder); folder layouts write each into its folder. nil for one checkpoint.
	Components []Component
	// Shards are, for a per-device checkpoint (a multi-rank DCP folder, a per-device
	// safetensors folder), the stored pieces each tensor of Root is reassembled from, keyed by
	// that tensor: what each device holds, so a consumer can compute from the pieces as the
	// devices do. nil for other checkpoints.
	Shards map[*Tensor][]Shard
	// Closers release the mapped files; Close calls them.
	Closers []io.Closer
}

// Component is one part of a checkpoint made of several: the key of Root holding its tree,
// which is also its folder's name, and what its folder held.
type Component struct {
	Name string
	// Format is the layout its folder was read as ("hf-safetensors", "dcp", …).
	Format      string
	WeightsName string
	Metadata    map[string]string
}

// ReadFile reads the file name of the checkpoint's folder (one of its Extras) through Files.
func (c *Checkpoint) ReadFile(name string) ([]byte, error) {
	if c.Files == nil {
		return nil, fmt.Errorf("%s: no file %s: not a folder", c.Path, name)
	}
	return fs.ReadFile(c.Files, name)
}

// Tensors returns every tensor of the tree with its flattened name, in Walk order. They
// are counted first, so that a tree of hundreds of thousands of tensors costs one slice of
// them rather than the doublings of a growing one.
func (c *Checkpoint) Tensors() ([]NamedTensor, error) {
	n := 0
	if err := Walk(c.Root, "", func(_ string, v Value) error {
		if _, ok := v.(*Tensor); ok {
			n++
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]NamedTensor, 0, n)
	err := Walk(c.Root, "", func(name string, v Value) error {
		if t, ok := v.(*Tensor); ok {
			out = append(out, NamedTensor{name, t})
		}
		return nil
	})
	return out, err
}

// ReleaseMemory drops the resident pages of the checkpoint's mapped files from the process
// (they stay in the page cache and are faulted back in if read again). Writers call it as
// they stream, so memory use does not grow with the checkpoint.
func (c *Checkpoint) ReleaseMemory() {
	for _, cl := range c.Closers {
		if r, ok := cl.(interface{ DontNeed() }); ok {
			r.DontNeed()
		}
	}
}

// Close releases the files the checkpoint reads from. Tensors must not be read afterwards.
func (c *Checkpoint) Close() error {
	var first error
	for _, cl := range c.Closers {
		if err := cl.Close(); err != nil && first == nil {
			first = err
		}
	}
	c.Closers = nil
	return first
}

// Tensor returns the tensor of the tree under the flattened name (as Tensors names them).
// A missing name is an error listing a few of the names there are.
func (c *Checkpoint) Tensor(name string) (*Tensor, error) {
	var found *Tensor
	var names []string
	err := Walk(c.Root, "", func(n string, v Value) error {
		if t, ok := v.(*Tensor); ok {
			if n == name {
				found = t
				return errStop
			}
			if len(names) < 5 {
				names = append(names, n)
			}
		}
		return nil
	})
	if found != nil {
		return found, nil
	}
	if err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s: no tensor %q (tensors: %s…)", c.Path, name, strings.Join(names, ", "))
}

// errStop ends a walk early.
var errStop = errors.New("stop")
