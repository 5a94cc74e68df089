package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/internal/plural"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/manifest"
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
//
// The manifest is read entry by entry (manifest.ReadEach) and compared as it is read: what
// Check keeps per tensor is the output's own tensor list, an index by name, and for each
// tensor to hash its position and expected digest — tens of bytes, not a record.
func Check(ctx context.Context, path, mpath string) (*CheckReport, error) {
	if mpath == "" {
		var err error
		if mpath, err = manifest.Find(ctx, path); err != nil {
			return nil, err
		}
	}
	ck, err := openOutput(ctx, path)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	tensors, err := ck.Tensors()
	if err != nil {
		return nil, err
	}
	rep := &CheckReport{Path: path, Manifest: mpath, Problems: []CheckProblem{}}
	byName := make(map[string]int32, len(tensors))
	for i, nt := range tensors {
		byName[nt.Name] = int32(i)
	}
	// A job is a tensor to hash: its index in tensors and the digest the manifest records
	// (odd holds the recorded strings that are not 16 lower-case hex digits, by job).
	type job struct {
		t    int32
		want uint64
	}
	var jobs []job
	odd := map[int]string{}
	listed := make([]bool, len(tensors))
	_, err = manifest.ReadEach(ctx, mpath, func(mt manifest.Tensor) error {
		rep.Tensors++
		i, ok := byName[mt.Name]
		if !ok {
			rep.Problems = append(rep.Problems, CheckProblem{Tensor: mt.Name, Kind: "missing"})
			return nil
		}
		listed[i] = true
		t := tensors[i].Tensor
		if p, ok := describedAs(mt, t); !ok {
			rep.Problems = append(rep.Problems, p)
			return nil
		}
		want, err := strconv.ParseUint(mt.XXHash64, 16, 64)
		if err != nil || fmt.Sprintf("%016x", want) != mt.XXHash64 {
			odd[len(jobs)] = mt.XXHash64
		}
		jobs = append(jobs, job{t: i, want: want})
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, nt := range tensors {
		if !listed[i] {
			rep.Problems = append(rep.Problems, CheckProblem{Tensor: nt.Name, Kind: "extra"})
		}
	}
	listed = nil
	// A per-device output keeps a copy of a replicated piece in every rank's file that holds
	// it; formats.Open reassembles from the first. Every further copy must hash as its box of
	// the reassembled tensor does, which the manifest's hash vouches for.
	reps, closeRanks, err := replicas(ctx, path, func(name string) *statedict.Tensor {
		if i, ok := byName[name]; ok {
			return tensors[i].Tensor
		}
		return nil
	})
	defer closeRanks()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFailed, err)
	}
	byName = nil
	// Hash on every core, reading through statedict.ReadTensors: bounded resident memory
	// however large the checkpoint.
	ts := make([]statedict.NamedTensor, len(jobs), len(jobs)+2*len(reps))
	for i, j := range jobs {
		ts[i] = tensors[j.t]
		rep.Bytes += ts[i].Tensor.NBytes()
	}
	for _, r := range reps {
		ts = append(ts, statedict.NamedTensor{Name: r.name, Tensor: r.e}, statedict.NamedTensor{Name: r.name, Tensor: r.d})
		rep.Bytes += r.d.NBytes()
	}
	sums, err := hashAll(ctx, ts, ck.ReleaseMemory)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for k, r := range reps {
		i := len(jobs) + 2*k
		want, got := sums[i], sums[i+1]
		if r.d.DTypeName() != r.e.DTypeName() || !slices.Equal(r.d.Shape, r.e.Shape) || want != got {
			rep.Problems = append(rep.Problems, CheckProblem{Tensor: r.name, Kind: "replica",
				Want: fmt.Sprintf("%s %v xxhash64 %016x (the piece at %v)", r.e.DTypeName(), r.e.Shape, want, r.offsets),
				Got:  fmt.Sprintf("%s %v xxhash64 %016x (rank %d's copy)", r.d.DTypeName(), r.d.Shape, got, r.rank)})
		}
		rep.Replicas++
	}
	for i, j := range jobs {
		want, isOdd := odd[i]
		if !isOdd && sums[i] == j.want {
			rep.Checked++
			continue
		}
		if !isOdd {
			want = fmt.Sprintf("%016x", j.want)
		}
		rep.Problems = append(rep.Problems, CheckProblem{Tensor: ts[i].Name, Kind: "xxhash64", Want: want, Got: fmt.Sprintf("%016x", sums[i])})
	}
	return rep, nil
}

// hashAll returns the xxhash64 of each tensor's contiguous bytes, hashing on every core.
// A tensor's digest lives only while its bytes stream: it is summed when the last byte
// arrives (an empty tensor's at once).
func hashAll(ctx context.Context, ts []statedict.NamedTensor, release func()) ([]uint64, error) {
	sums := make([]uint64, len(ts))
	open := make([]*sizedDigest, len(ts))
	empty := xxhash.Sum64(nil)
	err := statedict.ReadTensors(ctx, ts, func(i int) io.Writer {
		n := ts[i].Tensor.NBytes()
		if n == 0 {
			sums[i] = empty
			return io.Discard
		}
		open[i] = &sizedDigest{Digest: xxhash.New(), left: n, sum: &sums[i], open: &open[i]}
		return open[i]
	}, statedict.ReadOptions{Release: release})
	if err != nil {
		return nil, err
	}
	for i, d := range open {
		if d != nil { // fewer bytes than the tensor holds: the sum of what came
			sums[i] = d.Sum64()
		}
	}
	return sums, nil
}

// sizedDigest hashes a stream of a known length; when the stream is complete it stores the
// sum and forgets itself (*open = nil).
type sizedDigest struct {
	*xxhash.Digest
	left int64
	sum  *uint64
	open **sizedDigest
}

func (d *sizedDigest) Write(p []byte) (int, error) {
	if int64(len(p)) > d.left {
		return 0, fmt.Errorf("more bytes than the tensor holds")
	}
	n, _ := d.Digest.Write(p)
	d.left -= int64(n)
	if d.left == 0 {
		*d.sum = d.Digest.Sum64()
		*d.open = nil
	}
	return n, nil
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

// openOutput opens a conversion's output: one too damaged to open (ckpterr.ErrCorrupt)
// fails verification, as a damaged tensor does.
func openOutput(ctx context.Context, path string) (*statedict.Checkpoint, error) {
	ck, err := formats.Open(ctx, path)
	if errors.Is(err, ckpterr.ErrCorrupt) {
		return nil, fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return ck, err
}
