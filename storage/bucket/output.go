package bucket

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/storage"
	"github.com/ckpt-dev/ckpt/storage/multihost"
)

// PartialMarker is the object an output in progress keeps beside its files (inside a
// folder output; "NAME" + PartialMarker beside a file output) from its first upload until
// its manifest is written. It names the output's run ("run " + RunMetadata's value), and
// every object the output uploads carries that run in its metadata: a later conversion with
// --force removes an unfinished output's objects only when each one proves it is that
// run's — never an object someone else put beside a stale marker.
const PartialMarker = multihost.Marker

// RunMetadata is the object metadata key holding the run that uploaded an object: a random
// 128-bit identifier drawn when the output is created.
const RunMetadata = multihost.RunMetadata

// CreateOutput starts an output at url (see storage.Output). What is already there is
// refused unless opts.Force and ckpt wrote all of it: an earlier output whose manifest
// lists every object, or an unfinished one that left its PartialMarker and whose objects
// all carry the run the marker names. That earlier output
// is removed first, its manifest before anything else, so no mix of old and new ever looks
// complete.
func (f *FS) CreateOutput(ctx context.Context, url string, opts storage.OutputOptions) (storage.Output, error) {
	var id [16]byte
	rand.Read(id[:])
	o, err := f.newOutput(ctx, url, opts, hex.EncodeToString(id[:]))
	if err != nil {
		return nil, err
	}
	if err := o.clear(opts); err != nil {
		o.cancel()
		return nil, err
	}
	// The marker goes first: from now on every object here carrying its run is this output's.
	// A second conversion claiming the prefix at once is refused (put only if absent).
	err = o.put(o.key(PartialMarker), multihost.MarkerContent(o.run), true)
	if Precondition(err) {
		o.cancel()
		return nil, fmt.Errorf("%s: %w: another conversion is writing here (its %s appeared meanwhile)", o.l, storage.ErrForeign, PartialMarker)
	}
	if err != nil {
		o.cancel()
		return nil, pathError("create", o.l, err)
	}
	return o, nil
}

// newOutput is the output of run at url, not yet started: the checks every bucket output
// makes (a prefix inside the bucket, no control characters) and the options it keeps (folder, the manifest's name, which clearing an
// earlier output removes first). CreateOutput and JoinOutput both start from it.
func (f *FS) newOutput(ctx context.Context, url string, opts storage.OutputOptions, run string) (*output, error) {
	l, err := Parse(url)
	if err != nil {
		return nil, err
	}
	if l.Key == "" {
		return nil, fmt.Errorf("%s: %w: an output needs a prefix inside the bucket (gs://bucket/run/out)", url, ckpterr.ErrUnsupported)
	}
	if strings.ContainsFunc(l.Key, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return nil, fmt.Errorf("%s: %w: an output's name may not hold control characters", l, ckpterr.ErrUnsupported)
	}
	b, err := f.Bucket(ctx, l)
	if err != nil {
		return nil, err
	}
	o := &output{b: b, l: l, folder: opts.Folder, manifest: opts.Manifest, run: run, done: map[string]bool{}}
	o.ctx, o.cancel = context.WithCancel(ctx)
	return o, nil
}

type output struct {
	ctx      context.Context
	cancel   context.CancelFunc
	b        *Bucket
	l        Location
	folder   bool
	manifest string // the manifest's file name (storage.OutputOptions.Manifest)
	run      string // this output's run: in the marker and on every object uploaded

	mu      sync.Mutex
	done    map[string]bool // names completed (or started) by this output
	open    int
	uploads []Writer // uploads started, stopped by Abort
}

// key is the object key of name: under the folder, or for a file output "" is the file
// and ".x" is NAME.x beside it.
func (o *output) key(name string) string {
	switch {
	case o.folder:
		return o.l.Key + "/" + name
	case name == "":
		return o.l.Key
	case strings.HasPrefix(name, "."):
		return o.l.Key + name
	}
	return o.l.Key + "/" + name
}

// clear checks what is at the destination and removes an earlier output ckpt wrote.
func (o *output) clear(opts storage.OutputOptions) error {
	var there []string // keys
	if o.folder {
		if _, err := o.b.Attributes(o.ctx, o.l.Key); err == nil {
			return fmt.Errorf("%s: %w: an object of that name exists; a folder output needs a free prefix", o.l, storage.ErrForeign)
		} else if !NotFound(err) {
			return pathError("stat", o.l, err)
		}
		objs, err := o.b.List(o.ctx, o.l.Key+"/", "")
		if err != nil {
			return pathError("list", o.l, err)
		}
		for _, ob := range objs {
			there = append(there, ob.Key)
		}
	} else {
		for _, k := range append([]string{o.l.Key, o.l.Key + PartialMarker}, companions(o.l.Key, opts.Companions)...) {
			if _, err := o.b.Attributes(o.ctx, k); err == nil {
				there = append(there, k)
			} else if !NotFound(err) {
				return pathError("stat", Location{o.l.Scheme, o.l.Bucket, k}, err)
			}
		}
		objs, err := o.b.List(o.ctx, o.l.Key+"/", "")
		if err != nil {
			return pathError("list", o.l, err)
		}
		if len(objs) > 0 {
			return fmt.Errorf("%s: %w: objects lie under this name as a folder; a file output needs a free name", o.l, storage.ErrForeign)
		}
	}
	if len(there) == 0 {
		return nil
	}
	partial := slices.Contains(there, o.key(PartialMarker))
	// What is there is proven ckpt's (or not) before Force is looked at, so that a
	// destination Force could never replace is refused for that reason the first time.
	if partial {
		// This run's own marker is taken over only with Force (a plain rerun is told the
		// destination exists).
		if err := o.unfinished(there); err != nil && (opts.Force || !errors.Is(err, errOwnRun)) {
			return err
		}
	} else if err := o.owned(there, opts); err != nil {
		return err
	}
	if !opts.Force && partial && !o.folder {
		return fmt.Errorf("%s: %w: holds what an interrupted conversion left (%s); it cannot be resumed: the object appears only once its upload completes, so an interrupted single-file upload leaves nothing to keep", o.l, storage.ErrExists, Location{o.l.Scheme, o.l.Bucket, o.key(PartialMarker)})
	}
	if !opts.Force {
		return fmt.Errorf("%s: %w: holds %d object(s) (%s…)", o.l, storage.ErrExists, len(there), Location{o.l.Scheme, o.l.Bucket, there[0]})
	}
	// Manifests first (nothing complete-looking), then the rest, the marker last.
	slices.SortStableFunc(there, func(a, b string) int {
		rank := func(k string) int {
			switch {
			case o.manifest != "" && strings.HasSuffix(k, o.manifest):
				return 0
			case strings.HasSuffix(k, PartialMarker):
				return 2
			}
			return 1
		}
		return rank(a) - rank(b)
	})
	for _, k := range there {
		if err := o.b.Delete(o.ctx, k); err != nil {
			return pathError("remove", Location{o.l.Scheme, o.l.Bucket, k}, err)
		}
	}
	return nil
}

// owned checks that every key in there (no marker among them) is an earlier output's that
// Force may replace: listed by the ckpt manifest there (a folder), or a file output's
// object with its manifest beside it.
func (o *output) owned(there []string, opts storage.OutputOptions) error {
	rel := func(k string) string {
		if o.folder {
			return strings.TrimPrefix(k, o.l.Key+"/")
		}
		return strings.TrimPrefix(k, o.l.Key)
	}
	var owned []string
	ok := false
	if o.folder && opts.Owned != nil {
		owned, ok = opts.Owned(o.ctx, o.l.String())
	} else if !o.folder {
		// A file output's earlier copy is ckpt's when its manifest lies beside it.
		owned = []string{""}
		for _, c := range companions(o.l.Key, opts.Companions) {
			ok = ok || slices.Contains(there, c)
			owned = append(owned, rel(c))
		}
	}
	if !ok {
		return fmt.Errorf("%s: %w: holds %d object(s) no ckpt manifest there lists (%s…); ckpt never replaces what it did not write", o.l, storage.ErrForeign, len(there), Location{o.l.Scheme, o.l.Bucket, there[0]})
	}
	for _, k := range there {
		if !slices.Contains(owned, rel(k)) {
			return fmt.Errorf("%s: %w: %s is not listed by the ckpt manifest there; ckpt never replaces what it did not write", o.l, storage.ErrForeign, Location{o.l.Scheme, o.l.Bucket, k})
		}
	}
	return nil
}

// unfinished checks that every key in there, beside the marker, was uploaded by the run
// the marker names: an unfinished output's objects, which --force may remove.
func (o *output) unfinished(there []string) error {
	mk := o.key(PartialMarker)
	mloc := Location{o.l.Scheme, o.l.Bucket, mk}
	text, err := o.b.ReadAll(o.ctx, mk, 4096)
	if err != nil {
		return pathError("read", mloc, err)
	}
	run := multihost.ParseMarker(text)
	if run == "" {
		return fmt.Errorf("%s: %w: the marker of an unfinished output names no run, so nothing beside it can be proven ckpt's; remove the objects yourself", mloc, storage.ErrForeign)
	}
	if run == o.run {
		return errOwnRun // a host of this multi-host output made it meanwhile (hosts.go)
	}
	for _, k := range there {
		if k == mk {
			continue
		}
		a, err := o.b.Attributes(o.ctx, k)
		if NotFound(err) {
			continue
		}
		if err != nil {
			return pathError("stat", Location{o.l.Scheme, o.l.Bucket, k}, err)
		}
		if a.Metadata[RunMetadata] != run {
			return fmt.Errorf("%s: %w: lies beside the marker of an unfinished ckpt output (%s) but was not uploaded by it; ckpt never replaces what it did not write", Location{o.l.Scheme, o.l.Bucket, k}, storage.ErrForeign, mloc)
		}
	}
	return nil
}

// companions are the keys beside a file output that belong to it.
func companions(key string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = key + n
	}
	return out
}

// put uploads a small object whole; ifAbsent refuses to replace an object.
func (o *output) put(key string, data []byte, ifAbsent bool) error {
	w := o.writer(key, ifAbsent)
	_, err := w.Write(data)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// writer starts the upload of key, carrying this output's run.
func (o *output) writer(key string, ifAbsent bool) Writer {
	w := o.b.NewWriter(o.ctx, key, PutOptions{Metadata: map[string]string{RunMetadata: o.run}, IfAbsent: ifAbsent})
	o.mu.Lock()
	o.uploads = append(o.uploads, w)
	o.mu.Unlock()
	return w
}

// Create starts the upload of name; the object appears when Close succeeds.
func (o *output) Create(name string) (io.WriteCloser, error) {
	key := o.key(name)
	o.mu.Lock()
	// Checked under the lock Abort and Commit take: a Create racing either fails here
	// rather than start an upload neither would see.
	if err := o.ctx.Err(); err != nil {
		o.mu.Unlock()
		return nil, err
	}
	if o.done == nil {
		o.mu.Unlock()
		return nil, fmt.Errorf("%s: %s created after the output was committed or aborted", o.l, name)
	}
	if o.done[key] {
		o.mu.Unlock()
		return nil, fmt.Errorf("%s: %s written twice", o.l, name)
	}
	o.done[key] = true
	o.open++
	o.mu.Unlock()
	return &upload{o: o, key: key, w: o.writer(key, false)}, nil
}

// upload is one object being streamed up.
type upload struct {
	o      *output
	key    string
	w      Writer
	n      int64
	closed bool
}

// crcWriter is a Writer that knows the CRC32C of what it was given (a GCS upload): the
// stored object's is compared with it. An S3 upload's parts carry their CRC32s, which the
// service checks (s3put.go).
type crcWriter interface{ crc32c() uint32 }

func (u *upload) Write(p []byte) (int, error) {
	n, err := u.w.Write(p)
	u.n += int64(n)
	if err != nil {
		err = fmt.Errorf("%s: uploading at byte %d: %w", Location{u.o.l.Scheme, u.o.l.Bucket, u.key}, u.n, err)
	}
	return n, err
}

// Close finishes the upload and checks what the service stored against what was sent:
// the size, and the CRC32C of a GCS object (an S3 object's parts were checked by the
// service as they arrived, and its CRC32C by s3Upload.Close).
func (u *upload) Close() error {
	if u.closed {
		return nil
	}
	u.closed = true
	defer func() {
		u.o.mu.Lock()
		u.o.open--
		u.o.mu.Unlock()
	}()
	loc := Location{u.o.l.Scheme, u.o.l.Bucket, u.key}
	if err := u.w.Close(); err != nil {
		return pathError("upload", loc, err)
	}
	attrs, err := u.o.b.Attributes(u.o.ctx, u.key)
	if err != nil {
		return pathError("upload", loc, err)
	}
	var bad string
	c, hasCRC := u.w.(crcWriter)
	switch {
	case attrs.Size != u.n:
		bad = fmt.Sprintf("%d bytes stored, %d sent", attrs.Size, u.n)
	case hasCRC && attrs.HasCRC32C && attrs.CRC32C != c.crc32c():
		bad = fmt.Sprintf("CRC32C %08x stored, %08x sent", attrs.CRC32C, c.crc32c())
	}
	if bad != "" {
		return fmt.Errorf("%s: %w: the upload was damaged: %s", loc, ckpterr.ErrCorrupt, bad)
	}
	return nil
}

// Commit writes last after every upload finished, then removes the marker.
func (o *output) Commit(last []storage.NamedBytes) error {
	o.mu.Lock()
	open := o.open
	o.mu.Unlock()
	if open > 0 {
		return fmt.Errorf("%s: %d file(s) still being written at commit", o.l, open)
	}
	if err := o.ctx.Err(); err != nil {
		return err
	}
	for _, f := range last {
		key := o.key(f.Name)
		o.mu.Lock()
		o.done[key] = true
		o.mu.Unlock()
		if err := o.put(key, f.Data, false); err != nil {
			return pathError("upload", Location{o.l.Scheme, o.l.Bucket, key}, err)
		}
	}
	if err := o.b.Delete(o.ctx, o.key(PartialMarker)); err != nil {
		return pathError("remove", o.l, err)
	}
	o.mu.Lock()
	o.done = nil // committed: Abort removes nothing
	o.mu.Unlock()
	o.cancel()
	return nil
}

// Abort cancels the uploads in flight (GCS drops an unfinished resumable upload, the S3
// uploader aborts its multipart upload: neither leaves an object) and removes the objects
// this output completed, then its marker — each only if it carries this run's metadata, so
// nothing it removes was written by anyone else.
func (o *output) Abort() {
	o.cancel()
	o.mu.Lock()
	done, uploads := o.done, o.uploads
	o.done, o.uploads = nil, nil
	o.mu.Unlock()
	for _, u := range uploads {
		u.Abort()
	}
	if done == nil {
		return
	}
	ctx := context.WithoutCancel(o.ctx)
	var keys []string
	for k := range done {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range append(keys, o.key(PartialMarker)) {
		// Only an object this run uploaded goes: a name it started may hold another's.
		a, err := o.b.Attributes(ctx, k)
		if NotFound(err) {
			continue
		}
		if err == nil && a.Metadata[RunMetadata] != o.run {
			continue
		}
		if err == nil {
			err = o.b.Delete(ctx, k)
		}
		if err != nil {
			// The marker stays when something could not be removed: a later --force
			// conversion removes the rest.
			return
		}
	}
}
