package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/storage"
	"github.com/ckpt-dev/ckpt/storage/multihost"
)

// A shared output (JoinOutput) is a folder output in a bucket prefix written by the hosts
// of a multi-host conversion, which share no file system: the prefix itself plays the part
// of the partial folder of a shared file-system output (internal/atomicfile's JoinDir).
//
// The run. Every host derives the same run from what it alone can see and every host
// shares — the source's structure and size, the options, the host count, ckpt's version
// (SharedOptions.Run) — so no host has to learn it from another. The run is in the
// PartialMarker and in the RunMetadata of every object the hosts upload. The first host
// to find the prefix empty creates the marker (IfNotExist: two hosts racing both end up
// with the one marker, which names the same run). A prefix holding anything else — a
// finished output, another conversion's unfinished one (a marker naming another run),
// objects ckpt did not write — is cleared only by host 0 with Force, under the rules of
// CreateOutput (everything there proven ckpt's); the other hosts wait, up to
// SharedOptions.Wait, for the marker to name their run. A host thus never adopts an object
// of another conversion: one whose options, source structure or host count differ has
// another run, and its objects are neither resumed nor counted in a share. (What no host
// can tell apart without a channel between them are two sources of identical structure
// and size — two steps of one training run — converted with the same options: into one
// prefix, the second continues the first. Give each conversion its own prefix.)
//
// The shares. The protocol is storage/multihost's, of which the prefix is a carrier
// (sharedPrefix: an object is a host's when it carries the run; it removes only objects
// carrying the run, and puts a part in one upload). What stays here is the prefix's own:
// joining (the marker, host 0 clearing the prefix while the others wait, a single
// process's rules), the journal's rewriting and the publication (the manifest, then the
// marker). Each host keeps two
// control objects beside the files, named .ckpt-host-N.journal and .ckpt-host-N.part. The
// journal (multihost's List encoding) lists the files the host started and, once each
// upload is complete and verified, its size and xxhash64; it is rewritten whole (objects
// cannot be appended to) before each upload starts and after it finishes. A host run again
// after being killed removes the objects it started — only those carrying the run — or,
// with Resume, keeps those it finished whose object still has the journaled size and the
// run (their bytes are then checked against what the run would write: see convert). When
// all its uploads are complete the host seals its share with its part, the caller's record
// of what it wrote; a sealed host run again has nothing to do.
//
// The finish. Host 0, having sealed its own share, polls for every part (Parts), writes
// the layout's index and then Commit (multihost.Verify): every host's part must carry the
// run, every file a journal says finished must be there with its size and the run, and the
// prefix must hold nothing else (an object put there by anyone else is refused by name).
// The manifest is uploaded then, the control objects removed and the marker last. Until
// the manifest is there nothing passes `ckpt check`; a finisher killed after it leaves
// control objects carrying the run, which a later --force removes.
//
// A bucket has no lock: run each host index once at a time (a Job controller does).
//
// One host. A single process writing a folder output into a bucket joins as host 0 of 1
// (convert does, for every such output, so that a run killed by SIGKILL — which runs no
// cleanup — can be resumed): the protocol is the same, with no part to seal (Commit, on
// the host that wrote them, needs none). It differs where no other host exists to explain
// a marker (alone): a marker naming this run is an interrupted run's, taken over only with
// Resume (its finished files kept) or Force (removed), never by a plain rerun, since the
// run that left it may still be going; a marker naming another run is refused with Resume
// — the source or options differ, so nothing could be kept — before anything is touched.
// Abort removes the marker too, and a manifest an interrupted run uploaded in Commit is
// removed before anything else it left.

// errOwnRun is what clearing the prefix finds when this run's marker appeared meanwhile:
// nothing is removed.
var errOwnRun = errors.New("the prefix's marker names this run")

// member is one host's share of a shared output.
type member struct {
	*output
	opts storage.SharedOptions

	jmu     sync.Mutex
	journal []storage.Finished // in the order started; Size multihost.StartedSize until finished
	resumed map[string]storage.Finished
	cleaned bool
	sealed  []byte
}

// JoinOutput starts host opts.Host's share of the multi-host folder output at url (see
// above).
func (f *FS) JoinOutput(ctx context.Context, url string, opts storage.SharedOptions) (storage.SharedOutput, error) {
	if opts.Hosts < 1 || opts.Host < 0 || opts.Host >= opts.Hosts {
		return nil, fmt.Errorf("%s: host %d of %d", url, opts.Host, opts.Hosts)
	}
	if !opts.Folder || opts.Run == "" || strings.ContainsAny(opts.Run, " \t\r\n") {
		return nil, fmt.Errorf("%s: a shared output is a folder with a run of one word", url)
	}
	o, err := f.newOutput(ctx, url, opts.OutputOptions, opts.Run)
	if err != nil {
		return nil, err
	}
	m := &member{output: o, opts: opts}
	if err := m.join(); err != nil {
		o.cancel()
		return nil, err
	}
	if err := m.leftovers(); err != nil {
		o.cancel()
		return nil, err
	}
	return m, nil
}

// control is the key of host's control object of the given kind (journal, part).
func (m *member) control(host int, kind string) string {
	return m.key(multihost.Control(host, kind))
}

// loc is the URL of key, for messages.
func (m *member) loc(key string) Location { return Location{m.l.Scheme, m.l.Bucket, key} }

// join waits until the prefix's marker names this run, creating it on an empty prefix and,
// on host 0, clearing what is there first as CreateOutput does.
func (m *member) join() error {
	wait := m.opts.Wait
	if wait <= 0 {
		wait = time.Hour
	}
	deadline := time.Now().Add(wait)
	for {
		run, found, err := m.markerRun(m.ctx)
		if err != nil {
			return err
		}
		if err := m.alone(run, found); err != nil {
			return err
		}
		if found && run == m.run {
			return nil
		}
		if !found || m.opts.Host == 0 {
			objs, err := m.b.List(m.ctx, m.l.Key+"/", "")
			if err != nil {
				return pathError("list", m.l, err)
			}
			switch {
			case m.opts.Host == 0:
				if err := m.clear(m.opts.OutputOptions); err != nil {
					// Another host may have made the marker since it was read.
					if run, found, rerr := m.markerRun(m.ctx); rerr == nil && found && run == m.run {
						return nil
					}
					return err
				}
				fallthrough
			case len(objs) == 0:
				if _, err := m.b.Attributes(m.ctx, m.l.Key); err == nil {
					return fmt.Errorf("%s: %w: an object of that name exists; a folder output needs a free prefix", m.l, storage.ErrForeign)
				}
				// Put only if absent: hosts racing on an empty prefix make one marker.
				err := m.put(m.key(PartialMarker), multihost.MarkerContent(m.run), true)
				if err == nil {
					return nil
				}
				if !Precondition(err) {
					return pathError("create", m.l, err)
				}
				continue // another host's marker appeared: read it
			}
			// Objects but no marker when it was read: another host may have made it since.
			if run, found, err = m.markerRun(m.ctx); err != nil {
				return err
			}
			if found && run == m.run {
				return nil
			}
		}
		if !m.opts.Force {
			what := "objects"
			if found {
				what = "the unfinished output of another conversion (run " + run + ")"
			}
			return fmt.Errorf("%s: %w: holds %s; host 0 replaces it when every host is asked to replace an earlier output", m.l, storage.ErrExists, what)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: waited %s for host 0 to replace what the prefix holds", m.l, wait)
		}
		select {
		case <-m.ctx.Done():
			return m.ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// foreignBeside returns clear's ErrForeign refusal of an object beside another run's
// marker that the run did not upload (nil when every object is the marker's run's).
func (m *member) foreignBeside() error {
	objs, err := m.b.List(m.ctx, m.l.Key+"/", "")
	if err != nil {
		return pathError("list", m.l, err)
	}
	there := make([]string, len(objs))
	for i, ob := range objs {
		there[i] = ob.Key
	}
	if err := m.unfinished(there); errors.Is(err, storage.ErrForeign) {
		return err
	}
	return nil
}

// alone applies a single process's rules (Hosts 1) to the marker it found naming run:
// no other host makes a marker, so one naming this run was left by an interrupted run of
// this conversion — or made by one still going, which a bucket, having no lock, cannot
// tell apart — and is taken over only with Resume (keeping what it finished) or Force
// (starting over); one naming another run is another conversion's, which only Force
// replaces (clear's rules), so a resume whose source or options differ is refused before
// anything is touched.
func (m *member) alone(run string, found bool) error {
	if m.opts.Hosts != 1 || !found || m.opts.Force {
		return nil
	}
	if run != m.run {
		// What Force would refuse too is refused for that reason first.
		if err := m.foreignBeside(); err != nil {
			return err
		}
	}
	switch {
	case run == m.run && !m.opts.Resume:
		return fmt.Errorf("%s: %w: %w: it is this conversion's, interrupted; resuming it keeps the files it finished (make sure that run is not still going)", m.l, storage.ErrExists, multihost.ErrUnfinished)
	case run != m.run && m.opts.Resume:
		return fmt.Errorf("%s: %w: cannot resume: it holds the unfinished output of another conversion (run %s, this one's is %s): the source or the options differ from the interrupted run's; resume with the same ones", m.l, storage.ErrExists, run, m.run)
	case run != m.run:
		return fmt.Errorf("%s: %w: holds the unfinished output of another conversion (run %s)", m.l, storage.ErrExists, run)
	}
	return nil
}

// markerRun reads the run the prefix's marker names; found is false without a marker.
func (m *member) markerRun(ctx context.Context) (run string, found bool, err error) {
	b, err := m.read(ctx, m.key(PartialMarker), 4096)
	if err != nil || b == nil {
		return "", false, err
	}
	return multihost.ParseMarker(b), true, nil
}

// read returns the object key whole (up to limit bytes), nil if there is none.
func (m *member) read(ctx context.Context, key string, limit int64) ([]byte, error) {
	b, err := m.b.ReadAll(ctx, key, limit)
	if NotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, pathError("read", m.loc(key), err)
	}
	return b, nil
}

// ours reads the run of the object key: exists is false when there is none.
func (m *member) ours(ctx context.Context, key string) (mine, exists bool, size int64, err error) {
	a, err := m.b.Attributes(ctx, key)
	if NotFound(err) {
		return false, false, 0, nil
	}
	if err != nil {
		return false, false, 0, pathError("stat", m.loc(key), err)
	}
	return a.Metadata[RunMetadata] == m.run, true, a.Size, nil
}

// readJournal reads host's journal (multihost's List encoding), nil when there is none; a
// journal another run uploaded is refused.
func (m *member) readJournal(ctx context.Context, host int) (*multihost.Journal, error) {
	key := m.control(host, multihost.KindJournal)
	b, err := m.read(ctx, key, multihost.MaxJournal)
	if err != nil || b == nil {
		return nil, err
	}
	if mine, _, _, err := m.ours(ctx, key); err != nil || !mine {
		if err == nil {
			err = fmt.Errorf("%s: %w: not uploaded by this conversion", m.loc(key), storage.ErrForeign)
		}
		return nil, err
	}
	j, err := multihost.ParseList(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.loc(key), err) // ckpterr.ErrCorrupt
	}
	return j, nil
}

// validName reports whether name is a file name a host may write inside the folder (not
// a control object's).
func validName(name string) bool {
	return len(name) <= 1024 && multihost.ValidName(name) && !multihost.IsControl(name)
}

// sharedPrefix is the output's prefix as the multi-host protocol reads it (multihost.Carrier):
// an object is a host's when it carries the run.
type sharedPrefix struct{ m *member }

func (p sharedPrefix) List(ctx context.Context) (map[string]multihost.Object, error) {
	m := p.m
	objs, err := m.b.List(ctx, m.l.Key+"/", "")
	if err != nil {
		return nil, pathError("list", m.l, err)
	}
	out := make(map[string]multihost.Object, len(objs))
	for _, ob := range objs {
		name := strings.TrimPrefix(ob.Key, m.l.Key+"/")
		if name != PartialMarker {
			out[name] = multihost.Object{Size: ob.Size}
		}
	}
	return out, nil
}

func (p sharedPrefix) Stat(ctx context.Context, name string) (multihost.Object, bool, error) {
	m := p.m
	a, err := m.b.Attributes(ctx, m.key(name))
	if NotFound(err) {
		return multihost.Object{}, false, nil
	}
	if err != nil {
		return multihost.Object{}, false, pathError("stat", m.loc(m.key(name)), err)
	}
	return multihost.Object{Size: a.Size, Ref: a.Metadata[RunMetadata]}, true, nil
}

func (p sharedPrefix) Journal(ctx context.Context, host int) (*multihost.Journal, error) {
	return p.m.readJournal(ctx, host)
}

func (p sharedPrefix) Part(ctx context.Context, host int) ([]byte, error) {
	return p.m.readPart(ctx, host)
}

// Owns: an object is a host's when it carries the run (the one Stat read, or read now);
// a bucket host has no lock, nor any control object but its journal and part.
func (p sharedPrefix) Owns(ctx context.Context, host int, j *multihost.Journal, name string, o multihost.Object) (bool, error) {
	if multihost.IsControl(name) && name != multihost.Control(host, multihost.KindPart) {
		return false, nil
	}
	if run, ok := o.Ref.(string); ok {
		return run == p.m.run, nil
	}
	mine, _, _, err := p.m.ours(ctx, p.m.key(name))
	return mine, err
}

// Remove deletes the object name, found as o, only while it carries the run: the run Stat
// read, or read now for an object List found.
func (p sharedPrefix) Remove(ctx context.Context, name string, o multihost.Object) error {
	m := p.m
	run, ok := o.Ref.(string)
	if !ok {
		mine, exists, _, err := m.ours(ctx, m.key(name))
		if err != nil || !exists {
			return err
		}
		run = m.run
		if !mine {
			run = ""
		}
	}
	if run != m.run {
		return fmt.Errorf("%s: %w: not uploaded by this conversion; left as it is", m.loc(m.key(name)), storage.ErrForeign)
	}
	return m.remove(ctx, m.key(name))
}

// Put uploads name whole, carrying the run (a put is atomic).
func (p sharedPrefix) Put(_ context.Context, _ int, name string, data []byte) error {
	key := p.m.key(name)
	if err := p.m.put(key, data, false); err != nil {
		return pathError("upload", p.m.loc(key), err)
	}
	return nil
}

// ResetJournal removes host's journal: a journal of nothing is none.
func (p sharedPrefix) ResetJournal(ctx context.Context, host int) error {
	return p.RemoveJournal(ctx, host)
}

// RemoveJournal removes host's journal, which this host uploaded (read and proven by the
// protocol before).
func (p sharedPrefix) RemoveJournal(ctx context.Context, host int) error {
	return p.m.remove(ctx, p.m.control(host, multihost.KindJournal))
}

// leftovers finds this host's part when its share is sealed; otherwise deals with what an
// interrupted run of it left: with Resume the files it finished are kept when their
// objects still have the journaled size and the run, and every other file it started is
// removed (when it carries the run).
func (m *member) leftovers() error {
	j, err := m.readJournal(m.ctx, m.opts.Host)
	if err != nil {
		return err
	}
	// Every object the journal names, and the part, must be this run's, sealed or not.
	plan, err := multihost.Leftovers(m.ctx, sharedPrefix{m}, m.opts.Host, j, m.opts.Resume)
	if err != nil {
		return m.refused(err)
	}
	part, err := m.readPart(m.ctx, m.opts.Host)
	if err != nil {
		return err
	}
	if part != nil {
		m.sealed = part
		if j != nil {
			m.journal = j.Entries()
		}
		return nil
	}
	if m.opts.Resume {
		m.resumed = map[string]storage.Finished{}
	}
	if m.opts.Hosts == 1 && m.manifest != "" {
		// A single process killed in Commit, after its manifest: the manifest goes first,
		// so that nothing removed below leaves a complete-looking output behind.
		key := m.key(m.manifest)
		if mine, _, _, err := m.ours(m.ctx, key); err != nil {
			return err
		} else if mine {
			if err := m.remove(m.ctx, key); err != nil {
				return err
			}
		}
	}
	if err := multihost.Apply(m.ctx, sharedPrefix{m}, plan); err != nil {
		return err
	}
	m.cleaned = plan.Cleaned
	for _, e := range plan.Keep {
		m.resumed[e.File] = e
	}
	m.journal = plan.Keep
	if len(m.journal) > 0 {
		return m.writeJournal()
	}
	return m.remove(m.ctx, m.control(m.opts.Host, multihost.KindJournal))
}

// readPart reads host's part, nil when it has not sealed its share; a part another run
// uploaded is refused.
func (m *member) readPart(ctx context.Context, host int) ([]byte, error) {
	key := m.control(host, multihost.KindPart)
	b, err := m.read(ctx, key, multihost.MaxPart)
	if err != nil || b == nil {
		return nil, err
	}
	if mine, _, _, err := m.ours(ctx, key); err != nil || !mine {
		if err == nil {
			err = fmt.Errorf("%s: %w: host %d's share belongs to another conversion", m.loc(key), storage.ErrForeign, host)
		}
		return nil, err
	}
	return b, nil
}

// remove deletes key (nothing when it is gone).
func (m *member) remove(ctx context.Context, key string) error {
	if err := m.b.Delete(ctx, key); err != nil {
		return pathError("remove", m.loc(key), err)
	}
	return nil
}

// writeJournal uploads the journal whole; the caller holds jmu or is alone.
func (m *member) writeJournal() error {
	b, err := multihost.MarshalList(m.journal)
	if err != nil {
		return err
	}
	return m.put(m.control(m.opts.Host, multihost.KindJournal), b, false)
}

// record journals e, replacing the entry of the same file.
func (m *member) record(e storage.Finished) error {
	m.jmu.Lock()
	defer m.jmu.Unlock()
	i := 0
	for i < len(m.journal) && m.journal[i].File != e.File {
		i++
	}
	if i == len(m.journal) {
		m.journal = append(m.journal, e)
	} else {
		m.journal[i] = e
	}
	if err := m.writeJournal(); err != nil {
		return fmt.Errorf("%s: journaling %s: %w", m.l, e.File, err)
	}
	return nil
}

// Sealed implements storage.SharedOutput.
func (m *member) Sealed() ([]byte, bool) { return m.sealed, m.sealed != nil }

// Resumed implements storage.SharedOutput.
func (m *member) Resumed() map[string]storage.Finished { return m.resumed }

// CleanedUp implements storage.SharedOutput.
func (m *member) CleanedUp() bool { return m.cleaned }

// Create journals name as started, then uploads it; Close journals its size and xxhash64
// once the upload is complete and verified.
func (m *member) Create(name string) (io.WriteCloser, error) {
	if !validName(name) {
		return nil, fmt.Errorf("%s: %q is not a file name inside the output folder", m.l, name)
	}
	if m.sealed != nil && m.opts.Host != 0 {
		return nil, fmt.Errorf("%s: host %d's share is sealed", m.l, m.opts.Host)
	}
	if err := m.record(storage.Finished{File: name, Size: multihost.StartedSize}); err != nil {
		return nil, err
	}
	w, err := m.output.Create(name)
	if err != nil {
		return nil, err
	}
	return &journaled{m: m, name: name, w: w, h: xxhash.New()}, nil
}

// journaled is an upload journaled when complete.
type journaled struct {
	m    *member
	name string
	w    io.WriteCloser
	h    *xxhash.Digest
	n    int64
	done bool
}

func (j *journaled) Write(p []byte) (int, error) {
	n, err := j.w.Write(p)
	j.h.Write(p[:n])
	j.n += int64(n)
	return n, err
}

func (j *journaled) Close() error {
	if j.done {
		return nil
	}
	j.done = true
	if err := j.w.Close(); err != nil {
		return err
	}
	return j.m.record(storage.Finished{File: j.name, Size: j.n, XXHash64: fmt.Sprintf("%016x", j.h.Sum64())})
}

// Seal uploads part as this host's share: its files are all complete and journaled.
func (m *member) Seal(part []byte) error {
	m.mu.Lock()
	open := m.open
	m.mu.Unlock()
	if m.sealed != nil || open > 0 {
		return fmt.Errorf("%s: host %d cannot seal its share (sealed already, or %d file(s) still being written)", m.l, m.opts.Host, open)
	}
	if err := multihost.Seal(m.ctx, sharedPrefix{m}, m.opts.Host, part); err != nil {
		return err
	}
	m.sealed = part
	return nil
}

// Unseal removes this host's sealed share — its files, journal and part — to write it anew.
func (m *member) Unseal() error {
	if m.sealed == nil {
		return nil
	}
	m.jmu.Lock()
	defer m.jmu.Unlock()
	if err := multihost.Unseal(m.ctx, sharedPrefix{m}, m.opts.Host); err != nil {
		return m.refused(err)
	}
	m.journal, m.sealed, m.resumed, m.cleaned = nil, nil, nil, true
	return nil
}

// Parts implements storage.SharedOutput.
func (m *member) Parts() ([][]byte, error) {
	return multihost.Parts(m.ctx, sharedPrefix{m}, m.opts.Hosts)
}

// Commit finishes the output on host 0 (multihost.Commit): every host's share is checked — sealed, each file
// its journal finished there whole and carrying the run, nothing else in the prefix — then
// last (the manifest) is uploaded, the control objects removed and the marker last.
func (m *member) Commit(last []storage.NamedBytes) error {
	if m.opts.Host != 0 {
		return fmt.Errorf("%s: host %d cannot finish the output; host 0 does", m.l, m.opts.Host)
	}
	m.mu.Lock()
	open := m.open
	m.mu.Unlock()
	if open > 0 {
		return fmt.Errorf("%s: %d file(s) still being written at commit", m.l, open)
	}
	if err := m.ctx.Err(); err != nil {
		return err
	}
	// This host's own files are all closed (open is 0): its share needs no part, which a
	// single process (Hosts 1) never writes.
	if err := multihost.Commit(m.ctx, publication{sharedPrefix{m}, last}, m.opts.Host, m.opts.Hosts); err != nil {
		return m.refused(err)
	}
	m.mu.Lock()
	m.done = nil
	m.mu.Unlock()
	m.sealed = nil
	m.journal = nil
	m.cancel()
	return nil
}

// publication is the prefix as its finisher publishes it (multihost.Publisher).
type publication struct {
	sharedPrefix
	// last is the manifest.
	last []storage.NamedBytes
}

// Hold holds nothing: a bucket has no lock (each host runs once at a time).
func (publication) Hold(context.Context) error { return nil }

// Publish uploads the manifest: from then on the prefix is a complete output.
func (p publication) Publish(ctx context.Context) error {
	m := p.m
	for _, f := range p.last {
		key := m.key(f.Name)
		m.mu.Lock()
		m.done[key] = true
		m.mu.Unlock()
		if err := m.put(key, f.Data, false); err != nil {
			return pathError("upload", m.loc(key), err)
		}
	}
	return nil
}

// Finish removes the marker, last.
func (p publication) Finish(ctx context.Context) error {
	return p.m.remove(ctx, p.m.key(PartialMarker))
}

// refused says where the protocol refused (the prefix), and what kind of error it is:
// what a host did not write is storage.ErrForeign, a finished file not there whole
// ckpterr.ErrCorrupt.
func (m *member) refused(err error) error {
	var r *multihost.Refusal
	switch {
	case !errors.As(err, &r):
		return err
	case r.IsForeign():
		return fmt.Errorf("%s: %w: %w", m.l, storage.ErrForeign, err)
	case r.Problem == multihost.Unfinished:
		return fmt.Errorf("%s: %w: %w", m.l, ckpterr.ErrCorrupt, err)
	}
	return fmt.Errorf("%s: %w", m.l, err)
}

// Abort stops this host's uploads; unless its share is sealed (kept for the finisher) it
// removes the files it started that carry the run, and its journal. The marker stays for
// the other hosts; a single process (Hosts 1) removes it last, as CreateOutput's Abort
// does, when everything else went.
func (m *member) Abort() {
	m.cancel()
	m.mu.Lock()
	committed := m.done == nil
	m.done = nil
	m.mu.Unlock()
	if committed || m.sealed != nil {
		return
	}
	ctx := context.WithoutCancel(m.ctx)
	m.jmu.Lock()
	defer m.jmu.Unlock()
	// What could not be removed stays with the journal: a later run removes the rest.
	if multihost.Abort(ctx, sharedPrefix{m}, m.opts.Host) != nil || m.opts.Hosts != 1 {
		return
	}
	if mine, _, _, err := m.ours(ctx, m.key(PartialMarker)); err == nil && mine {
		m.remove(ctx, m.key(PartialMarker))
	}
}
