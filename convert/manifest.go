package convert

import (
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/statedict"
)

// buildManifest describes the output of p: every tensor written, with the xxhash64 fed
// while it was written (or, for a view whose storage was written whole, computed by reading
// it again from the page-cache-warm source), or, with hash set, the xxhash64 it gives for
// the tensor's name in the output. names maps written tensors to their names when they
// differ from the tree's.
func buildManifest(o *output, p *planned, opts Options, names map[*statedict.Tensor]string, hash func(name string, t *statedict.Tensor) (uint64, error)) (*manifest.Manifest, error) {
	m := streamManifest(o, p, opts, names, hash)
	m.Tensors = []manifest.Tensor{}
	if err := m.Stream(func(t manifest.Tensor) error {
		m.Tensors = append(m.Tensors, t)
		return nil
	}); err != nil {
		return nil, err
	}
	m.Stream = nil
	return m, nil
}

// streamManifest is buildManifest's manifest with its tensor entries made one at a time
// as manifest.Write writes them (Stream): the entries of hundreds of thousands of tensors
// are never all in memory.
func streamManifest(o *output, p *planned, opts Options, names map[*statedict.Tensor]string, hash func(name string, t *statedict.Tensor) (uint64, error)) *manifest.Manifest {
	m := &manifest.Manifest{
		Tool: manifest.Tool, Version: opts.ToolVersion, Created: time.Now().UTC().Format(time.RFC3339),
		Args:       opts.Args,
		Conversion: p.Options.Record(p.Target),
		Source:     manifest.Source{Path: opts.Src, Format: p.sum.SrcFormat, Metadata: p.Output.Metadata},
		Output:     manifest.Output{Path: opts.Dst, Format: string(opts.Format), Files: p.sum.Files},
		Remap:      p.sum.Remap,
	}
	// The tree is walked as the entries are written: a list of its hundreds of thousands
	// of tensors, made now, would land at the conversion's memory peak.
	m.Stream = func(yield func(manifest.Tensor) error) error {
		return statedict.Walk(p.Output.Root, "", func(tname string, v statedict.Value) error {
			t, ok := v.(*statedict.Tensor)
			if !ok {
				return nil
			}
			name := tname
			if names != nil {
				n, ok := names[t]
				if !ok {
					return nil // not written (e.g. a tied alias recorded in metadata)
				}
				name = n
			}
			var sum uint64
			var err error
			if hash != nil {
				sum, err = hash(name, t)
			} else {
				sum, err = tensorHash(o, t)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", tname, err)
			}
			loc := ""
			if t.Storage != nil {
				loc = t.Storage.Location
			}
			return yield(manifest.Tensor{Name: name, DType: t.DTypeName(),
				Shape: t.Shape, Location: loc, NBytes: t.NBytes(), XXHash64: fmt.Sprintf("%016x", sum)})
		})
	}
	return m
}

// tensorHash is the xxhash64 of t's contiguous bytes: the digest fed while t (or its whole
// storage) was written when there is one, else computed by reading t again.
func tensorHash(o *output, t *statedict.Tensor) (uint64, error) {
	if sum, ok := o.hashes.Sum64(t); ok {
		return sum, nil
	}
	if sum, ok := o.hashes.Sum64(t.Storage); ok && t.IsWholeStorage() {
		return sum, nil
	}
	if err := o.ctx.Err(); err != nil {
		return 0, err
	}
	h := xxhash.New()
	n, err := t.WriteTo(h)
	if err != nil {
		return 0, err
	}
	o.paged.Streamed(n)
	return h.Sum64(), nil
}
