package convert

import (
	"context"
	"hash"

	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
	_ "github.com/ckpt-dev/ckpt/storage/local" // local outputs (storage.RegisterLocal)
	"github.com/ckpt-dev/ckpt/storage/sink"
)

// output is one conversion's destination while it is written: one storage.Output, whatever
// the destination (a local folder or file, a bucket prefix or object, a host's share of
// either), under storage/sink's decorators — a resumed run's kept files replayed, the
// manifests held for Commit where files appear as they are written, every file written in
// pieces that check for cancellation and release the source's pages — with the tensors'
// digests (for the manifest) and progress fed by the writers.
type output struct {
	ctx    context.Context
	dst    string
	folder bool
	out    storage.Output // decorated
	paged  *sink.Paged
	// share is a multi-host conversion's share of the output.
	share    storage.SharedOutput
	hashes   *sink.Hashes
	progress *sink.Progress

	// target is the output as a statedict.Output; sum is the writers' WriteOptions.Sum.
	target *sink.Target
	sum    func(key any) hash.Hash
}

// newOutput starts the output at opts.Dst: a folder or a file, as host of hosts (a single
// process is host 0 of 1); run is the conversion's key (runKey) for a folder in a bucket.
//
// A folder is written as a share of a shared output (storage.JoinOutput): locally a
// partial folder, journaled and locked, whose killed run's files Resume keeps; as host 0
// of 1 a single process's. A folder in a bucket prefix is written as host 0 of 1 of the
// multi-host protocol every time and not only with Resume: a run killed with SIGKILL runs
// no cleanup, so only what it journaled as it went can be resumed. That protocol was
// chosen over a journal of its own because it already holds every rule a resume needs —
// the marker and each object carry run, so a resume whose source or options differ is
// refused before anything is touched and no object another run uploaded is ever adopted
// or removed; a file is kept only when its object has the journaled size and run, and
// what this run would write must hash to the journal (sink.Replay) — at the cost of a
// small journal upload before and after each file. A bucket has no lock, so a marker of
// this run is taken over only with Resume or Force (storage/bucket's hosts.go, "One
// host").
//
// A single file is not resumed: in a bucket its object appears only once its upload
// completes, so a killed run left nothing to keep (at most, in the instant between the
// object and its manifest, a whole object, which the manifest would have to hash again);
// its marker is refused unless Force, and with nothing there Resume changes nothing, as
// for a local file.
func newOutput(ctx context.Context, opts Options, folder bool, host, hosts int, run string) (*output, error) {
	so := storage.OutputOptions{Folder: folder, Force: opts.Force, Owned: manifest.Owned, Manifest: manifest.Name, Proof: proofOf(folder)}
	var out storage.Output
	var err error
	if folder {
		out, err = storage.JoinOutput(ctx, opts.Dst, storage.SharedOptions{OutputOptions: so,
			Host: host, Hosts: max(hosts, 1), Run: run, Resume: opts.Resume, Wait: opts.Hosts.Wait})
	} else {
		so.Companions = []string{"." + manifest.Name}
		out, err = storage.CreateOutput(ctx, opts.Dst, so)
	}
	if err != nil {
		return nil, err
	}
	o := &output{ctx: ctx, dst: opts.Dst, folder: folder, hashes: sink.NewHashes(), progress: sink.NewProgress(opts.Progress)}
	if hosts > 1 {
		o.share, _ = storage.As[storage.SharedOutput](out)
	}
	o.paged = sink.NewPaged(ctx, sink.NewReplay(sink.NewHold(out, manifest.Name), opts.Dst, manifest.Name))
	o.out = o.paged
	o.target = sink.NewTarget(o.out, opts.Dst)
	o.sum = o.progress.Summing(o.hashes)
	return o, nil
}

// proofOf proves what an earlier conversion wrote at the local output dst, for --force
// to replace it (storage.OutputOptions.Proof): the manifest there (inside a folder, beside
// a file) and each file it records with the size and xxhash64 it had as written
// (Output.Sums). A manifest that records no sums (or is not a ckpt manifest) proves
// nothing.
func proofOf(folder bool) func(ctx context.Context, dst string) ([]storage.Finished, bool) {
	return func(ctx context.Context, dst string) ([]storage.Finished, bool) {
		mpath := manifest.PathFor(dst, folder)
		m, err := manifest.ReadEach(ctx, mpath, func(manifest.Tensor) error { return nil })
		if err != nil {
			return nil, false
		}
		claims := []storage.Finished{{File: storage.Base(mpath), Size: -1}}
		for name, s := range m.Output.Sums {
			claims = append(claims, storage.Finished{File: name, Size: s.Size, XXHash64: s.XXHash64})
		}
		return claims, true
	}
}

// leftovers reports what the output found of its own interrupted run: removed (cleaned)
// or kept (resumed: nil without Resume).
func (o *output) leftovers() (cleaned bool, resumed map[string]storage.Finished) {
	if l, ok := storage.As[storage.Leftovers](o.out); ok {
		return l.CleanedUp(), l.Resumed()
	}
	return false, nil
}

// fileSums is what a manifest listing files records of each (Output.Sums): the size and
// digest the output recorded as it wrote them (storage.FileSums: a local folder's journal,
// every member's for a multi-host finisher, or a single file's). A bucket output records
// none.
func (o *output) fileSums(files []string) (map[string]manifest.FileSum, error) {
	fs, ok := storage.As[storage.FileSums](o.out)
	if !ok {
		return nil, nil
	}
	sums, err := fs.Sums()
	if err != nil || sums == nil {
		return nil, err
	}
	out := map[string]manifest.FileSum{}
	for _, name := range files {
		if j, ok := sums[name]; ok {
			out[name] = manifest.FileSum{Size: j.Size, XXHash64: j.XXHash64}
		}
	}
	return out, nil
}

// written is where host 0 reads back what the hosts wrote, to hash the manifest's tensors,
// once every entry there is proven a host's: the partial folder, or the bucket prefix
// itself (its objects are at their final names).
func (o *output) written() (string, error) {
	if s, ok := storage.As[storage.Staged](o.out); ok {
		return s.Staged()
	}
	return o.dst, nil
}

// reading makes src the checkpoint whose pages are released as bytes stream out, until
// the returned func restores the previous one.
func (o *output) reading(src *statedict.Checkpoint) (restore func()) {
	return o.paged.Releasing(src.ReleaseMemory)
}

// root is the output as a whole, as a layout's writer writes it.
func (o *output) root() *sink.Target { return o.target }

// commit moves the complete output into place: a folder (manifest inside) at once, a file
// and then the manifest beside it, so the manifest's presence means completeness.
func (o *output) commit() error { return o.out.Commit(nil) }

// abort removes whatever was written (nothing after commit).
func (o *output) abort() { o.out.Abort() }

// writeManifest writes m where the manifest of t goes — inside a folder output, beside a
// file (or beside a file of a folder) — and returns that final path.
func (o *output) writeManifest(t *sink.Target, m *manifest.Manifest) (string, error) {
	path, name := manifest.PathFor(t.Name(), false), "."+manifest.Name
	switch {
	case t.File() != "":
		name = storage.Base(path)
	case o.folder:
		path, name = manifest.PathFor(o.dst, true), manifest.Name
	}
	w, err := t.CreateFile(name)
	if err != nil {
		return "", err
	}
	if m.Output.Sums, err = o.fileSums(m.Output.Files); err != nil {
		w.Close()
		return "", err
	}
	err = manifest.Write(w, m)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return path, err
}
