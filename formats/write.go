package formats

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/ckpt-dev/ckpt/statedict"
)

// components makes a folder layout's writer write a checkpoint made of components
// (statedict.Checkpoint.Components: a diffusers pipeline) one component per folder, each
// in the layout with its own weights name and metadata, then the checkpoint's extras (the
// pipeline's index and every component's configuration) at their paths.
func components(write statedict.Writer) statedict.Writer {
	return func(out statedict.Output, ck *statedict.Checkpoint, opts statedict.WriteOptions) (*statedict.Written, error) {
		if len(ck.Components) == 0 {
			return write(out, ck, opts)
		}
		root, ok := ck.Root.(*statedict.Dict)
		if !ok {
			return nil, fmt.Errorf("%s: a checkpoint of components holds a %T, not a dict of them", ck.Path, ck.Root)
		}
		all := &statedict.Written{Names: map[*statedict.Tensor]string{}, Tied: map[string]string{}}
		done := map[string]bool{}
		for _, c := range ck.Components {
			tree, ok := root.Get(c.Name)
			if !ok {
				continue // dropped or not selected
			}
			done[c.Name] = true
			o := opts
			o.Rewrite, o.Metadata = nil, c.Metadata
			part := &statedict.Checkpoint{Format: c.Format, Path: ck.Path, Root: tree, WeightsName: c.WeightsName}
			w, err := write(prefixed{out, c.Name}, part, o)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
			for _, f := range w.Files {
				all.Files = append(all.Files, c.Name+"/"+f)
			}
			all.Bytes += w.Bytes
			names := w.Names
			if names == nil {
				tensors, err := part.Tensors()
				if err != nil {
					return nil, err
				}
				names = map[*statedict.Tensor]string{}
				for _, nt := range tensors {
					names[nt.Tensor] = nt.Name
				}
			}
			for t, n := range names {
				all.Names[t] = statedict.JoinName(c.Name, n)
			}
			for a, b := range w.Tied {
				all.Tied[statedict.JoinName(c.Name, a)] = statedict.JoinName(c.Name, b)
			}
			for _, n := range w.NotWritten {
				all.NotWritten = append(all.NotWritten, statedict.JoinName(c.Name, n))
			}
			for _, n := range w.Kept {
				all.Kept = append(all.Kept, statedict.JoinName(c.Name, n))
			}
		}
		for _, e := range root.Entries() {
			if !done[statedict.KeyString(e.Key)] {
				return nil, fmt.Errorf("%s: %s is not one of the checkpoint's components", ck.Path, statedict.KeyString(e.Key))
			}
		}
		extras, err := statedict.CopyFiles(out, ck, opts.Rewrite)
		if err != nil {
			return nil, err
		}
		all.Files = append(all.Files, extras...)
		return all, nil
	}
}

// prefixed is the folder dir of an output, as an output of its own.
type prefixed struct {
	out statedict.Output
	dir string
}

func (p prefixed) Create(name string) (io.WriteCloser, error) {
	if name == "" {
		return nil, fmt.Errorf("%s: a component is a folder, not a file", p.Name())
	}
	return p.out.Create(p.dir + "/" + name)
}

func (p prefixed) Name() string { return filepath.Join(p.out.Name(), p.dir) }
