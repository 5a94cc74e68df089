package verify

import (
	"context"
	"errors"
	"fmt"
	"github.com/ckpt-dev/ckpt/internal/plural"
	"io"
	"slices"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/manifest"
	"github.com/ckpt-dev/ckpt/statedict"
)

// ErrFailed is matched by errors.Is for the error of a failed verification (CheckReport.Err).
var ErrFailed = errors.New("verification failed")

// Err is nil when the output holds exactly what its manifest records, else an error naming
// the first problem that matches ErrFailed.
func (r *CheckReport) Err() error {
	if r.OK() {
		return nil
	}
	p := r.Problems[0]
	return fmt.Errorf("%s: %s; first: tensor %q: %s: %w", r.Path, plural.Of(len(r.Problems), "problem"), p.Tensor, p.Kind, ErrFailed)
}

// CheckReport is what Check found; it is also `ckpt check --json`'s output.
type CheckReport struct {
	Path     string `json:"path"`
	Manifest string `json:"manifest"`
	// Tensors is how many tensors the manifest lists; Checked how many of them were found
	// and hashed.
	Tensors int `json:"tensors"`
	Checked int `json:"checked"`
	// Replicas counts the further copies of replicated pieces a per-device output holds,
	// each hashed against its box of the reassembled tensor.
	Replicas int `json:"replicas,omitempty"`
	// Bytes is the total size of the tensors (and replicas) hashed.
	Bytes    int64          `json:"bytes"`
	Problems []CheckProblem `json:"problems"`
}

// OK reports whether the output holds exactly what its manifest records.
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 }

// CheckProblem is one way the output differs from its manifest.
type CheckProblem struct {
	// Tensor is the tensor's name ("" for a problem with the output as a whole).
	Tensor string `json:"tensor"`
	// Kind is "missing" (in the manifest, not in the output), "extra" (in the output, not in
	// the manifest), "dtype", "shape", "nbytes", "xxhash64" or "replica" (a rank's copy of a
	// replicated piece differs from the copy the tensor is reassembled from).
	Kind string `json:"kind"`
	// Want and Got are what the manifest records and what the output holds, typed by Kind:
	// a dtype name or xxhash64 hex digest (strings), a shape (a list of ints), a size in
	// bytes (an int); for "replica", a description of the piece and of the rank's copy.
	Want any `json:"want,omitempty"`
	Got  any `json:"got,omitempty"`
}

// Check verifies a converted output against its manifest (mpath "" finds it beside or
// inside path): every tensor the manifest lists must be in the output with the recorded
// dtype, shape, size and xxhash64 of its contiguous bytes, and the output must hold no other
// tensor. It tells whether a checkpoint copied to another machine or bucket is intact. The
// tensors are hashed on every core, streaming from the mapped files.
func Check(path, mpath string) (*CheckReport, error) {
	if mpath == "" {
		var err error
		if mpath, err = manifest.Find(path); err != nil {
			return nil, err
		}
	}
	m, err := manifest.Read(mpath)
	if err != nil {
		return nil, err
	}
	ck, err := openOutput(path)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	tensors, err := ck.Tensors()
	if err != nil {
		return nil, err
	}
	rep := &CheckReport{Path: path, Manifest: mpath, Tensors: len(m.Tensors), Problems: []CheckProblem{}}
	byName := make(map[string]*statedict.Tensor, len(tensors))
	for _, nt := range tensors {
		byName[nt.Name] = nt.Tensor
	}
	type job struct {
		want manifest.Tensor
		t    *statedict.Tensor
		got  string
		err  error
	}
	var jobs []*job
	listed := make(map[string]bool, len(m.Tensors))
	for _, mt := range m.Tensors {
		listed[mt.Name] = true
		t, ok := byName[mt.Name]
		if !ok {
			rep.Problems = append(rep.Problems, CheckProblem{Tensor: mt.Name, Kind: "missing"})
			continue
		}
		if p, ok := describedAs(mt, t); !ok {
			rep.Problems = append(rep.Problems, p)
			continue
		}
		jobs = append(jobs, &job{want: mt, t: t})
	}
	for _, nt := range tensors {
		if !listed[nt.Name] {
			rep.Problems = append(rep.Problems, CheckProblem{Tensor: nt.Name, Kind: "extra"})
		}
	}
	// A per-device output keeps a copy of a replicated piece in every rank's file that holds
	// it; formats.Open reassembles from the first. Every further copy must hash as its box of
	// the reassembled tensor does, which the manifest's hash vouches for.
	reps, closeRanks, err := replicas(path, byName)
	defer closeRanks()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFailed, err)
	}
	// Hash on every core, reading through statedict.ReadTensors: bounded resident memory
	// however large the checkpoint.
	ts := make([]statedict.NamedTensor, len(jobs), len(jobs)+2*len(reps))
	for i, j := range jobs {
		ts[i] = statedict.NamedTensor{Name: j.want.Name, Tensor: j.t}
		rep.Bytes += j.t.NBytes()
	}
	for _, r := range reps {
		ts = append(ts, statedict.NamedTensor{Name: r.name, Tensor: r.e}, statedict.NamedTensor{Name: r.name, Tensor: r.d})
		rep.Bytes += r.d.NBytes()
	}
	sums := make([]*xxhash.Digest, len(ts))
	err = statedict.ReadTensors(context.Background(), ts, func(i int) io.Writer {
		sums[i] = xxhash.New()
		return sums[i]
	}, statedict.ReadOptions{Release: ck.ReleaseMemory})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, j := range jobs {
		j.got = fmt.Sprintf("%016x", sums[i].Sum64())
	}
	for k, r := range reps {
		i := len(jobs) + 2*k
		want, got := sums[i].Sum64(), sums[i+1].Sum64()
		if r.d.DTypeName() != r.e.DTypeName() || !slices.Equal(r.d.Shape, r.e.Shape) || want != got {
			rep.Problems = append(rep.Problems, CheckProblem{Tensor: r.name, Kind: "replica",
				Want: fmt.Sprintf("%s %v xxhash64 %016x (the piece at %v)", r.e.DTypeName(), r.e.Shape, want, r.offsets),
				Got:  fmt.Sprintf("%s %v xxhash64 %016x (rank %d's copy)", r.d.DTypeName(), r.d.Shape, got, r.rank)})
		}
		rep.Replicas++
	}
	for _, j := range jobs {
		switch {
		case j.err != nil:
			return nil, fmt.Errorf("%s: tensor %s: %w", path, j.want.Name, j.err)
		case j.got != j.want.XXHash64:
			rep.Problems = append(rep.Problems, CheckProblem{Tensor: j.want.Name, Kind: "xxhash64", Want: j.want.XXHash64, Got: j.got})
		default:
			rep.Checked++
		}
	}
	return rep, nil
}

// describedAs compares a tensor's dtype, shape and size with its manifest entry.
func describedAs(mt manifest.Tensor, t *statedict.Tensor) (CheckProblem, bool) {
	if dt := t.DTypeName(); dt != mt.DType {
		return CheckProblem{Tensor: mt.Name, Kind: "dtype", Want: mt.DType, Got: dt}, false
	}
	if !slices.Equal(shapeOf(t.Shape), shapeOf(mt.Shape)) {
		return CheckProblem{Tensor: mt.Name, Kind: "shape", Want: shapeOf(mt.Shape), Got: shapeOf(t.Shape)}, false
	}
	if n := t.NBytes(); n != mt.NBytes {
		return CheckProblem{Tensor: mt.Name, Kind: "nbytes", Want: mt.NBytes, Got: n}, false
	}
	return CheckProblem{}, true
}

// shapeOf is a shape as JSON writes it: [] for a 0-d tensor, never null.
func shapeOf(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

// openOutput opens a conversion's output: one too damaged to open (statedict.ErrCorrupt)
// fails verification, as a damaged tensor does.
func openOutput(path string) (*statedict.Checkpoint, error) {
	ck, err := formats.Open(path)
	if errors.Is(err, statedict.ErrCorrupt) {
		return nil, fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return ck, err
}
