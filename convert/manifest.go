package convert

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/inspect"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/internal/fastcopy"
	"github.com/ckpt-dev/ckpt/statedict"
)

// ManifestName is the manifest's file name inside a folder output; a file output FILE gets
// FILE.ckpt-manifest.json beside it.
const ManifestName = "ckpt-manifest.json"

// Manifest records how an output was produced and what it holds, so a later check can tell
// whether it is intact and where it came from.
type Manifest struct {
	Tool    string           `json:"tool"`
	Version string           `json:"version"`
	Created string           `json:"created"`
	Args    []string         `json:"args,omitempty"`
	Source  ManifestSource   `json:"source"`
	Output  ManifestOutput   `json:"output"`
	Remap   any              `json:"remap"`
	Tensors []ManifestTensor `json:"tensors"`
}

// ManifestSource names the input.
type ManifestSource struct {
	Path   string `json:"path"`
	Format string `json:"format"`
}

// ManifestOutput names the output and its files.
type ManifestOutput struct {
	Path   string   `json:"path"`
	Format string   `json:"format"`
	Files  []string `json:"files"`
}

// ManifestTensor describes one written tensor; XXHash64 is the xxhash64 of its contiguous
// little-endian bytes as written.
type ManifestTensor struct {
	Name     string  `json:"name"`
	DType    string  `json:"dtype"`
	Shape    []int64 `json:"shape"`
	Location string  `json:"location"`
	NBytes   int64   `json:"nbytes"`
	XXHash64 string  `json:"xxhash64"`
}

// manifestPath is where the manifest of the output at dst goes.
func manifestPath(dst string, folder bool) string {
	if folder {
		return filepath.Join(dst, ManifestName)
	}
	return dst + "." + ManifestName
}

// buildManifest hashes every tensor of the converted tree (reading it again from the
// page-cache-warm source) and describes the output.
func (j *writeJob) buildManifest(names map[*statedict.Tensor]string) (*Manifest, error) {
	m := &Manifest{
		Tool: "ckpt", Version: j.opts.ToolVersion, Created: time.Now().UTC().Format(time.RFC3339),
		Args:   j.opts.Args,
		Source: ManifestSource{Path: j.opts.Src, Format: j.sum.SrcFormat},
		Output: ManifestOutput{Path: j.opts.Dst, Format: j.opts.Format, Files: j.sum.Files},
		Remap:  j.sum.Remap, Tensors: []ManifestTensor{},
	}
	tensors, err := j.src.Tensors()
	if err != nil {
		return nil, err
	}
	for _, nt := range tensors {
		name := nt.Name
		if names != nil {
			n, ok := names[nt.Tensor]
			if !ok {
				continue // not written (e.g. a tied alias recorded in metadata)
			}
			name = n
		}
		sum, err := j.tensorHash(nt.Tensor)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", nt.Name, err)
		}
		loc := ""
		if nt.Tensor.Storage != nil {
			loc = nt.Tensor.Storage.Location
		}
		m.Tensors = append(m.Tensors, ManifestTensor{Name: name, DType: inspect.DTypeName(nt.Tensor),
			Shape: nt.Tensor.Shape, Location: loc, NBytes: nt.Tensor.NBytes(), XXHash64: fmt.Sprintf("%016x", sum)})
	}
	return m, nil
}

// tensorHash is the xxhash64 of t's contiguous bytes: the digest fed while t (or its whole
// storage) was written when there is one, else computed by reading t again.
func (j *writeJob) tensorHash(t *statedict.Tensor) (uint64, error) {
	if d, ok := j.sums[t]; ok {
		return d.Sum64(), nil
	}
	if d, ok := j.sums[t.Storage]; ok && t.IsWholeStorage() {
		return d.Sum64(), nil
	}
	h := xxhash.New()
	n, err := t.WriteTo(h)
	if err != nil {
		return 0, err
	}
	j.streamed(n)
	return h.Sum64(), nil
}

// ownedFiles is the atomicfile.Owner of folder outputs: the files a ckpt manifest inside
// dir lists (and the manifest itself), which a forced conversion may replace. A folder
// without a manifest ckpt wrote claims nothing.
func ownedFiles(dir string) ([]string, bool) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, false
	}
	var m Manifest
	if json.Unmarshal(b, &m) != nil || m.Tool != "ckpt" {
		return nil, false
	}
	return append(m.Output.Files, ManifestName), true
}

// writeManifestFile writes the manifest of a file output atomically beside it.
func writeManifestFile(path string, m *Manifest, force bool) (*atomicfile.File, error) {
	f, err := atomicfile.Create(path, force)
	if err != nil {
		return nil, err
	}
	enc := json.NewEncoder(f)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		f.Abort()
		return nil, err
	}
	return f, nil
}

// commitFile finishes a single-file output written to f: it writes the manifest beside it
// (names maps written tensors to their names when they differ from the tree's), then moves
// both into place.
func (j *writeJob) commitFile(f *atomicfile.File, names map[*statedict.Tensor]string) error {
	dst := j.opts.Dst
	j.sum.Files = []string{filepath.Base(dst)}
	m, err := j.buildManifest(names)
	if err != nil {
		return err
	}
	mf, err := writeManifestFile(manifestPath(dst, false), m, j.opts.Force)
	if err != nil {
		return err
	}
	defer mf.Abort()
	if err := f.Commit(); err != nil {
		return err
	}
	j.sum.Manifest = manifestPath(dst, false)
	return mf.Commit()
}

// commitDir finishes a folder output being built in d: it writes the manifest inside (names
// maps written tensors to their names when they differ from the tree's), then moves the
// folder into place.
func (j *writeJob) commitDir(d *atomicfile.Dir, names map[*statedict.Tensor]string) error {
	m, err := j.buildManifest(names)
	if err != nil {
		return err
	}
	if err := writeManifestInto(d.Path, m); err != nil {
		return err
	}
	if err := d.Commit(); err != nil {
		return err
	}
	j.sum.Manifest = manifestPath(j.opts.Dst, true)
	return nil
}

// writeOut streams what write produces into the output file f through fastcopy (aligned
// chunks, direct I/O) and returns the bytes written.
func writeOut(f *os.File, write func(io.Writer) (int64, error)) (int64, error) {
	out := fastcopy.NewFile(f)
	n, err := write(out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// writeManifestInto writes the manifest inside a folder output being built.
func writeManifestInto(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ManifestName), append(b, '\n'), 0o644)
}
