package convert

import (
	"context"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/internal/fastcopy"
	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// output is one conversion's destination while it is written: a temporary folder or file
// (atomicfile) renamed into place by commit, files written through fastcopy, progress
// reported from the tensor bytes the writers hash, the source's mapped pages released as
// bytes stream through, and cancellation checked at every piece written.
type output struct {
	ctx      context.Context
	dst      string
	folder   bool
	force    bool
	dir      *atomicfile.Dir  // folder outputs
	file     *atomicfile.File // file outputs
	mfile    *atomicfile.File // a file output's manifest, beside it
	created  map[string]bool
	progress func(done, total int64)
	// single is a file output's size and digest once written, for its manifest.
	single *atomicfile.Journaled
	// remote is an output in object storage (storage.Output); last holds its manifests,
	// uploaded by commit after every other file.
	remote storage.Output
	last   []storage.NamedBytes
	// share is a multi-host conversion's share of the output: dir, or remote's
	// storage.SharedOutput.
	share share

	mu    sync.Mutex
	total int64
	done  int64
	// sums holds the xxhash64 digests fed while writing, keyed by the *statedict.Tensor or
	// *statedict.Storage whose bytes they saw, so the manifest reads nothing a second time.
	sums map[any]*xxhash.Digest

	// src is the checkpoint being read, whose pages are released as bytes stream out;
	// sinceRelease counts the bytes since the last release.
	src          *statedict.Checkpoint
	sinceRelease int64
}

// releaseEvery is how many streamed bytes may stay resident from the mapped source before
// they are dropped (they remain in the page cache): it bounds the process's memory.
const releaseEvery = 32 << 20

// newOutput starts a single process's output at opts.Dst, a folder or a file; run is the
// conversion's key (runKey) for a folder in a bucket.
//
// Locally, atomicfile writes a folder under a temporary name beside it, journaled and
// locked, and Resume keeps what a killed run finished. A folder in a bucket prefix is
// written as host 0 of 1 of the multi-host protocol (storage.JoinOutput, run's Hosts), every
// time and not only with Resume: a run killed with SIGKILL runs no cleanup, so only what it
// journaled as it went can be resumed. That protocol was chosen over a journal of its own
// because it already holds every rule a resume needs — the marker and each object carry
// run, so a resume whose source or options differ is refused before anything is touched
// and no object another run uploaded is ever adopted or removed; a file is kept only when
// its object has the journaled size and run, and what this run would write must hash to
// the journal (resumedRemote) — at the cost of a small journal upload before and after
// each file. A bucket has no lock, so a marker of this run is taken over only with Resume
// or Force (storage/bucket's hosts.go, "One host").
//
// A single file in a bucket is not resumed: its object appears only once its upload
// completes, so a killed run left nothing to keep (at most, in the instant between the
// object and its manifest, a whole object, which the manifest would have to hash again);
// its marker is refused unless Force, and with nothing there Resume changes nothing, as
// for a local file.
func newOutput(ctx context.Context, opts Options, folder bool, run string) (*output, error) {
	dst, force := opts.Dst, opts.Force
	o := &output{ctx: ctx, dst: dst, folder: folder, force: force, progress: opts.Progress, created: map[string]bool{}, sums: map[any]*xxhash.Digest{}}
	var err error
	if storage.IsRemote(dst) {
		if folder {
			return o, o.joinRemote(opts, 0, 1, run)
		}
		o.remote, err = storage.CreateOutput(ctx, dst, storage.OutputOptions{Folder: folder, Force: force, Owned: manifest.Owned, Companions: []string{"." + manifest.Name}, Manifest: manifest.Name})
		if err != nil {
			return nil, err
		}
		return o, nil
	}
	if folder {
		o.dir, err = atomicfile.CreateDir(dst, atomicfile.DirOptions{Force: force, Owner: ownerOf(ctx, dst, true), Resume: opts.Resume})
		return o, err
	}
	fo := atomicfile.FileOptions{Force: force, Owner: ownerOf(ctx, dst, false)}
	if o.file, err = atomicfile.Create(dst, fo); err != nil {
		return nil, err
	}
	if o.mfile, err = atomicfile.Create(manifest.PathFor(dst, false), fo); err != nil {
		o.file.Abort()
		return nil, err
	}
	return o, nil
}

// ownerOf proves what an earlier conversion wrote at the local output dst, for --force
// to replace it (atomicfile.Owner): the manifest there (inside a folder, beside a file)
// and each file it records with the size and xxhash64 it had as written (Output.Sums).
// A manifest that records no sums (or is not a ckpt manifest) proves nothing.
func ownerOf(ctx context.Context, dst string, folder bool) atomicfile.Owner {
	return func(string) ([]atomicfile.Journaled, bool) {
		mpath := manifest.PathFor(dst, folder)
		m, err := manifest.ReadEach(ctx, mpath, func(manifest.Tensor) error { return nil })
		if err != nil {
			return nil, false
		}
		claims := []atomicfile.Journaled{{File: filepath.Base(mpath), Size: -1}}
		for name, s := range m.Output.Sums {
			claims = append(claims, atomicfile.Journaled{File: name, Size: s.Size, XXHash64: s.XXHash64})
		}
		return claims, true
	}
}

// fileSums is what a manifest listing files records of each (Output.Sums): the size and
// digest from the folder's journal (every member's, for a multi-host finisher), or the
// single file's. A bucket output records none.
func (o *output) fileSums(files []string) (map[string]manifest.FileSum, error) {
	var sums map[string]atomicfile.Journaled
	switch {
	case o.dir != nil:
		var err error
		if sums, err = o.dir.Sums(); err != nil {
			return nil, err
		}
	case o.file != nil && o.single != nil:
		sums = map[string]atomicfile.Journaled{filepath.Base(o.dst): *o.single}
	default:
		return nil, nil
	}
	out := map[string]manifest.FileSum{}
	for _, name := range files {
		if j, ok := sums[name]; ok {
			out[name] = manifest.FileSum{Size: j.Size, XXHash64: j.XXHash64}
		}
	}
	return out, nil
}

// newMemberOutput is host host's share of a multi-host conversion's folder output, run
// being the conversion's key: on a shared file system (atomicfile.JoinDir) or in a bucket
// prefix (storage.JoinOutput).
func newMemberOutput(ctx context.Context, opts Options, host, hosts int, run string) (*output, error) {
	o := &output{ctx: ctx, dst: opts.Dst, folder: true, force: opts.Force, progress: opts.Progress, created: map[string]bool{}, sums: map[any]*xxhash.Digest{}}
	if storage.IsRemote(opts.Dst) {
		return o, o.joinRemote(opts, host, hosts, run)
	}
	var err error
	o.dir, err = atomicfile.JoinDir(opts.Dst, atomicfile.DirOptions{Force: opts.Force, Owner: ownerOf(ctx, opts.Dst, true), Resume: opts.Resume}, host, hosts)
	o.share = o.dir
	return o, err
}

// finish reports the last progress: done as the total (a writer of some ranks does not
// hash every piece its ranks hold: others may write the replicated ones).
func (o *output) finish() {
	if o.progress == nil {
		return
	}
	o.mu.Lock()
	o.done = o.total
	o.mu.Unlock()
	o.progress(o.total, o.total)
}

// root is the output as a whole.
func (o *output) root() *subOutput { return &subOutput{o: o} }

// commit moves the complete output into place: a folder (manifest inside) at once, a file
// and then the manifest beside it, so the manifest's presence means completeness.
func (o *output) commit() error {
	if err := o.ctx.Err(); err != nil {
		return err
	}
	if o.remote != nil {
		return o.remote.Commit(o.last)
	}
	if o.folder {
		return o.dir.Commit()
	}
	return atomicfile.CommitAll(o.file, o.mfile)
}

// abort removes whatever was written (nothing after commit).
func (o *output) abort() {
	if o.remote != nil {
		o.remote.Abort()
	}
	if o.dir != nil {
		o.dir.Abort()
	}
	if o.file != nil {
		o.file.Abort()
	}
	if o.mfile != nil {
		o.mfile.Abort()
	}
}

// create starts the output file name ("" for a file output's own file).
func (o *output) create(name string) (io.WriteCloser, error) {
	if err := o.ctx.Err(); err != nil {
		return nil, err
	}
	if o.created[name] {
		return nil, fmt.Errorf("%s: %s written twice", o.dst, name)
	}
	o.created[name] = true
	if o.remote != nil {
		if r := o.resumedRemote(name); r != nil {
			return r, nil
		}
		return o.createRemote(name)
	}
	if !o.folder {
		if name != "" {
			return nil, fmt.Errorf("%s: a single-file output cannot hold %s", o.dst, name)
		}
		return o.stream(o.file.File, false, ""), nil
	}
	if !fs.ValidPath(name) || name == "." {
		return nil, fmt.Errorf("%s: %q is not a file name inside the output folder", o.dst, name)
	}
	// Manifests record when they were made: always written anew.
	if j, ok := o.dir.Resumed[name]; ok && path.Base(name) != manifest.Name && !strings.HasSuffix(name, "."+manifest.Name) {
		return o.replay(name, j)
	}
	f, err := o.dir.Create(name)
	if err != nil {
		return nil, err
	}
	return o.stream(f, true, name), nil
}

// stream wraps f for writing through fastcopy; name is the file's name in a folder output,
// whose size and digest the journal records ("" for a single-file output, whose size and
// digest its manifest records).
func (o *output) stream(f *os.File, closeFile bool, name string) *stream {
	return &stream{fc: fastcopy.NewFile(f), f: f, closeFile: closeFile, o: o, name: name, file: xxhash.New()}
}

// replay is the file name of a resumed output, finished by the interrupted run: its bytes
// on disk (opened as the file the journal proves ckpt made, never through a link) are
// checked against the journal, and what this run would write is hashed (feeding the
// manifest's digests) and must be the same, so the output ends byte-identical to an
// uninterrupted run without writing the file again.
func (o *output) replay(name string, j atomicfile.Journaled) (io.WriteCloser, error) {
	f, err := o.dir.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := xxhash.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	if got := fmt.Sprintf("%016x", h.Sum64()); got != j.XXHash64 {
		return nil, fmt.Errorf("%s: %s was damaged after the interrupted run finished it (xxhash64 %s, journal %s); convert again without resuming", o.dst, name, got, j.XXHash64)
	}
	return &replayed{o: o, name: name, want: j, h: xxhash.New()}, nil
}

// replayed hashes the bytes a resumed file would get, without writing them.
type replayed struct {
	o    *output
	name string
	want atomicfile.Journaled
	h    *xxhash.Digest
	n    int64
}

func (r *replayed) Write(p []byte) (int, error) {
	if err := r.o.ctx.Err(); err != nil {
		return 0, err
	}
	r.h.Write(p)
	r.n += int64(len(p))
	r.o.streamed(int64(len(p)))
	return len(p), nil
}

// WriteRange hashes the range's bytes (from memory or read from its reader) and feeds its
// sums (the manifest's digests) as a file writer would.
func (r *replayed) WriteRange(rg statedict.Range) (int64, error) {
	return statedict.WriteRange(struct{ io.Writer }{r}, rg) // Write only: no recursion
}

// Close checks that this run produced exactly the file the interrupted one finished.
func (r *replayed) Close() error {
	if got := fmt.Sprintf("%016x", r.h.Sum64()); r.n != r.want.Size || got != r.want.XXHash64 {
		return fmt.Errorf("%s: %s would differ from the interrupted run's (the source or the options changed since); convert again without resuming", r.o.dst, r.name)
	}
	return nil
}

// sum returns a digest for the bytes of key (a tensor or storage) as they are written; the
// bytes it is fed also count as progress.
func (o *output) sum(key any) hash.Hash {
	d := xxhash.New()
	o.mu.Lock()
	o.sums[key] = d
	o.mu.Unlock()
	return &counted{d: d, o: o}
}

// advance reports n more tensor bytes written, never past the total.
func (o *output) advance(n int64) {
	if o.progress == nil {
		return
	}
	o.mu.Lock()
	o.done = min(o.done+n, o.total)
	done, total := o.done, o.total
	o.mu.Unlock()
	o.progress(done, total)
}

// streamed accounts for n bytes read from the source and written out, releasing the
// source's resident pages every releaseEvery bytes.
func (o *output) streamed(n int64) {
	o.mu.Lock()
	o.sinceRelease += n
	release := o.sinceRelease >= releaseEvery
	if release {
		o.sinceRelease = 0
	}
	src := o.src
	o.mu.Unlock()
	if release && src != nil {
		src.ReleaseMemory()
	}
}

// counted is a digest whose input also counts as progress.
type counted struct {
	d *xxhash.Digest
	o *output
}

func (c *counted) Write(p []byte) (int, error) {
	c.o.advance(int64(len(p)))
	return c.d.Write(p)
}
func (c *counted) Sum(b []byte) []byte { return c.d.Sum(b) }
func (c *counted) Reset()              { c.d.Reset() }
func (c *counted) Size() int           { return c.d.Size() }
func (c *counted) BlockSize() int      { return c.d.BlockSize() }

// stream is one output file being written: bytes go to fastcopy in pieces small enough
// that the source's pages can be released between them, and each piece first checks that
// the conversion was not cancelled.
type stream struct {
	fc        *fastcopy.File
	f         *os.File
	closeFile bool
	o         *output
	closed    bool
	// name is the file's name in a folder output, which is journaled when finished; file
	// is fed every byte, for the journal or a single-file output's manifest.
	name string
	file *xxhash.Digest
	n    int64
}

// Write passes b on in pieces.
func (s *stream) Write(b []byte) (int, error) {
	return s.o.inPieces(b, func(piece []byte) (int, error) {
		n, err := s.fc.Write(piece)
		if s.file != nil {
			s.file.Write(piece[:n])
		}
		s.n += int64(n)
		return n, err
	})
}

// inPieces passes b to write in pieces small enough that the source's pages can be
// released between them (each counted by streamed), checking before each piece that the
// conversion was not cancelled.
func (o *output) inPieces(b []byte, write func([]byte) (int, error)) (int, error) {
	var done int
	for done < len(b) {
		if err := o.ctx.Err(); err != nil {
			return done, err
		}
		n, err := write(b[done:min(len(b), done+releaseEvery/4)])
		done += n
		o.streamed(int64(n))
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// WriteRange passes ranges on, for fastcopy to read them from their file or reader; a
// reader's range in pieces as inPieces does, since it may read through a mapping (a cast of
// a mapped source), whose pages must be released as they go. A file range goes whole:
// fastcopy reads it with pread, and every piece would end in a wait for its checksums.
func (s *stream) WriteRange(r statedict.Range) (int64, error) {
	if s.file != nil {
		r.Sums = append(r.Sums[:len(r.Sums):len(r.Sums)], s.file)
	}
	var done int64
	for total := r.Len(); done < total; {
		if err := s.o.ctx.Err(); err != nil {
			return done, err
		}
		k := total - done
		if r.Src != nil { // a file range is read with pread, never through the mapping
			k = min(k, releaseEvery/4)
		}
		n, err := s.fc.WriteRange(r.Slice(done, done+k))
		done += n
		s.n += n
		s.o.streamed(n)
		if err != nil {
			return done, err
		}
	}
	return done, s.o.ctx.Err()
}

// Close finishes the file (it is fsynced when the output commits).
func (s *stream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.fc.Close()
	sum := atomicfile.Journaled{File: s.name, Size: s.n, XXHash64: fmt.Sprintf("%016x", s.file.Sum64())}
	switch {
	case err != nil:
	case s.name != "":
		// Durable before it is journaled: a resumed run keeps only what is on disk.
		if err = s.f.Sync(); err == nil {
			err = s.o.dir.Finished(sum)
		}
	default:
		s.o.single = &sum
	}
	if s.closeFile {
		if cerr := s.f.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// subOutput is the statedict.Output a writer is given: the output itself, or, for a
// training-state file converted alongside a folder's weights, that one file of the folder.
type subOutput struct {
	o    *output
	file string // "" for the output itself; else the file of the folder this one is
}

// sub is the file name of this folder output, as a single-file output of its own.
func (s *subOutput) sub(name string) *subOutput { return &subOutput{o: s.o, file: name} }

// Create implements statedict.Output.
func (s *subOutput) Create(name string) (io.WriteCloser, error) {
	if s.file != "" {
		if name != "" {
			return nil, fmt.Errorf("%s: a single-file output cannot hold %s", s.Name(), name)
		}
		name = s.file
	}
	return s.o.create(name)
}

// Name implements statedict.Output.
func (s *subOutput) Name() string {
	if s.file != "" {
		return storage.Join(s.o.dst, s.file)
	}
	return s.o.dst
}

// writeManifest writes m where this output's manifest goes — inside a folder output,
// beside a file (or beside a file of a folder) — and returns that final path.
func (s *subOutput) writeManifest(m *manifest.Manifest) (string, error) {
	var w io.WriteCloser
	var err error
	var path string
	switch {
	case s.file != "":
		path = manifest.PathFor(s.Name(), false)
		w, err = s.o.create(storage.Base(path))
	case s.o.folder:
		path = manifest.PathFor(s.o.dst, true)
		w, err = s.o.create(manifest.Name)
	case s.o.remote != nil:
		path = manifest.PathFor(s.o.dst, false)
		w = s.o.lastFile("." + manifest.Name)
	default:
		path = manifest.PathFor(s.o.dst, false)
		w = nopCloser{s.o.mfile}
	}
	if err != nil {
		return "", err
	}
	if m.Output.Sums, err = s.o.fileSums(m.Output.Files); err != nil {
		w.Close()
		return "", err
	}
	err = manifest.Write(w, m)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return path, err
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
