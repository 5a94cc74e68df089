package sink

import (
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Replay is an output resuming an interrupted run (storage.Leftovers lists the files that
// run finished and this one keeps): such a file is not written again but what this run
// would write is hashed — feeding the range sums (the manifest's digests) as writing would
// — and must be exactly what the journal recorded, so that the output ends byte-identical
// to an uninterrupted run. Where the output can read the kept file back (storage.Reopener:
// a local folder), its bytes are first checked against the journal too; a bucket's object
// was checked by its size and run when it was kept.
type Replay struct {
	out  storage.Output
	dst  string
	left storage.Leftovers // nil: nothing is kept
	// manifest names the manifests (IsManifest), always written anew: they record when
	// they were made.
	manifest string
}

// NewReplay wraps out, the output at dst, whose manifests are named manifest.
func NewReplay(out storage.Output, dst, manifest string) *Replay {
	r := &Replay{out: out, dst: dst, manifest: manifest}
	r.left, _ = storage.As[storage.Leftovers](out)
	return r
}

// Create starts the file name: a kept one is replayed, any other created. What is kept is
// asked each time: a host's share unsealed to be written anew keeps nothing.
func (r *Replay) Create(name string) (io.WriteCloser, error) {
	var j storage.Finished
	ok := false
	if r.left != nil {
		j, ok = r.left.Resumed()[name]
	}
	if !ok || IsManifest(name, r.manifest) {
		return r.out.Create(name)
	}
	if ro, ok := storage.As[storage.Reopener](r.out); ok {
		if err := r.check(ro, name, j); err != nil {
			return nil, err
		}
	}
	return &replayed{r: r, name: name, want: j, h: xxhash.New()}, nil
}

// check hashes the kept file name as it is, which must match its journal j.
func (r *Replay) check(ro storage.Reopener, name string, j storage.Finished) error {
	f, err := ro.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	h := xxhash.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := fmt.Sprintf("%016x", h.Sum64()); got != j.XXHash64 {
		return fmt.Errorf("%s: %s was damaged after the interrupted run finished it (xxhash64 %s, journal %s); convert again without resuming", r.dst, name, got, j.XXHash64)
	}
	return nil
}

func (r *Replay) Commit(last []storage.NamedBytes) error { return r.out.Commit(last) }
func (r *Replay) Abort()                                 { r.out.Abort() }
func (r *Replay) Unwrap() storage.Output                 { return r.out }

// replayed hashes the bytes a kept file would get, without writing them.
type replayed struct {
	r    *Replay
	name string
	want storage.Finished
	h    *xxhash.Digest
	n    int64
}

func (w *replayed) Write(p []byte) (int, error) {
	w.h.Write(p)
	w.n += int64(len(p))
	return len(p), nil
}

// WriteRange hashes the range's bytes (from memory or read from its reader) and feeds its
// sums as a file writer would.
func (w *replayed) WriteRange(rg statedict.Range) (int64, error) {
	return statedict.WriteRange(struct{ io.Writer }{w}, rg) // Write only: no recursion
}

// Close checks that this run produced exactly the file the interrupted one finished.
func (w *replayed) Close() error {
	if got := fmt.Sprintf("%016x", w.h.Sum64()); w.n != w.want.Size || got != w.want.XXHash64 {
		return fmt.Errorf("%s: %s would differ from the interrupted run's (the source or the options changed since); convert again without resuming", w.r.dst, w.name)
	}
	return nil
}
