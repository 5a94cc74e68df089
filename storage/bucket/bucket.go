package bucket

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/storage"
)

func init() {
	storage.Register("gs", Default)
	storage.Register("s3", Default)
}

// Default is the backend registered for gs:// and s3://, with the clients the environment
// configures (see Bucket).
var Default = &FS{}

// FS reads and lists objects of gs:// and s3:// URLs; it implements storage.FS. Buckets are
// opened on first use and kept.
type FS struct {
	mu      sync.Mutex
	buckets map[string]*Bucket
}

// Bucket returns the opened bucket of l, opening it on first use: a GCS bucket with
// Application Default Credentials (STORAGE_EMULATOR_HOST=host:port talks to an emulator
// without credentials), an S3 bucket with the AWS SDK's default chain (environment,
// shared config and credentials files, AWS_PROFILE, instance roles; AWS_ENDPOINT_URL_S3 or
// AWS_ENDPOINT_URL names an S3-compatible endpoint, addressed path-style; the region
// defaults to us-east-1 when none is configured).
func (f *FS) Bucket(ctx context.Context, l Location) (*Bucket, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := l.Scheme + "://" + l.Bucket
	if b := f.buckets[id]; b != nil {
		return b, nil
	}
	var api objectAPI
	var err error
	switch l.Scheme {
	case "gs":
		api, err = newGCS(ctx, l.Bucket)
	case "s3":
		api, err = newS3(ctx, l.Bucket)
	default:
		err = fmt.Errorf("scheme %q", l.Scheme)
	}
	if err != nil {
		// The clients' errors name what is missing (no credentials found), never secrets.
		return nil, fmt.Errorf("%s: opening the bucket: %w", id, err)
	}
	if f.buckets == nil {
		f.buckets = map[string]*Bucket{}
	}
	b := &Bucket{api: api}
	f.buckets[id] = b
	return b, nil
}

// Close closes the opened buckets' idle connections and forgets them: the next use opens
// them again, with the environment then in force.
func (f *FS) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range f.buckets {
		b.api.closeIdle()
	}
	clear(f.buckets)
	return nil
}

// pathError names the object URL (which holds no credentials: Parse refuses URLs with
// user information) and maps a missing object to fs.ErrNotExist.
func pathError(op string, l Location, err error) error {
	switch {
	case NotFound(err):
		err = fs.ErrNotExist
	case denied(err):
		err = fmt.Errorf("%w (permission denied: check the credentials the environment provides)", fs.ErrPermission)
	}
	return &fs.PathError{Op: op, Path: l.String(), Err: err}
}

// Open opens the object name for ranged reads.
func (f *FS) Open(ctx context.Context, name string) (storage.File, error) {
	l, err := Parse(name)
	if err != nil {
		return nil, err
	}
	b, err := f.Bucket(ctx, l)
	if err != nil {
		return nil, err
	}
	attrs, err := b.Attributes(ctx, l.Key)
	if err != nil {
		return nil, pathError("open", l, err)
	}
	return newObject(ctx, b, l, attrs.Size), nil
}

// Stat describes name: an object, or a folder when objects lie under name + "/".
func (f *FS) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	l, err := Parse(name)
	if err != nil {
		return nil, err
	}
	b, err := f.Bucket(ctx, l)
	if err != nil {
		return nil, err
	}
	base := l.Key[strings.LastIndexByte(l.Key, '/')+1:]
	if l.Key != "" {
		attrs, err := b.Attributes(ctx, l.Key)
		if err == nil {
			return storage.FileInfo(base, attrs.Size, false), nil
		}
		if !NotFound(err) {
			return nil, pathError("stat", l, err)
		}
	}
	var found bool
	err = retry(ctx, func() error {
		page, _, err := b.api.list(ctx, prefix(l), "", "")
		found = len(page) > 0
		return err
	})
	if err != nil {
		return nil, pathError("stat", l, err)
	}
	if !found {
		return nil, pathError("stat", l, fs.ErrNotExist)
	}
	if base == "" {
		base = l.Bucket
	}
	return storage.FileInfo(base, 0, true), nil
}

// prefix is the listing prefix of the folder l.
func prefix(l Location) string {
	if l.Key == "" {
		return ""
	}
	return l.Key + "/"
}

// ReadDir lists the folder name: its objects and subfolders, by name. A key that is no
// path element under the folder is refused (entryName).
func (f *FS) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	l, err := Parse(name)
	if err != nil {
		return nil, err
	}
	b, err := f.Bucket(ctx, l)
	if err != nil {
		return nil, err
	}
	objs, err := b.List(ctx, prefix(l), "/")
	if err != nil {
		return nil, pathError("readdir", l, err)
	}
	if len(objs) == 0 {
		if _, err := f.Stat(ctx, name); err != nil {
			return nil, err
		}
	}
	out := make([]fs.DirEntry, 0, len(objs))
	for _, o := range objs {
		n, ok, err := entryName(prefix(l), o.Key, o.IsDir)
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: l.String(), Err: err}
		}
		if ok {
			out = append(out, fs.FileInfoToDirEntry(storage.FileInfo(n, o.Size, o.IsDir)))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

// errKeyPath is a listed key that names no file or folder of the listed folder.
var errKeyPath = errors.New("a key with an empty, . or .. path element")

// entryName is the name, in the folder listed by prefix ("" or ending in "/"), of a key
// that listing returned: an object's key, or a subfolder's (dir, ending in "/"). It is one
// path element. A key with an empty, "." or ".." element there ("run//x", "run/./x",
// "run/../x") is refused: joined to the folder's path it would name the folder itself or
// its parent, and a walk through it would never end or would leave the prefix — and no
// path can name the object. The folder's placeholder object (the key prefix itself) has
// no name (ok false).
func entryName(prefix, key string, dir bool) (name string, ok bool, err error) {
	rest, found := strings.CutPrefix(key, prefix)
	if !found {
		return "", false, fmt.Errorf("%w: the listing of %q returned %q, outside it", ckpterr.ErrUnsupported, prefix, key)
	}
	if dir {
		var slash bool
		if rest, slash = strings.CutSuffix(rest, "/"); !slash {
			return "", false, fmt.Errorf("%w: the listing of %q returned the folder %q, which does not end in /", ckpterr.ErrUnsupported, prefix, key)
		}
	} else if rest == "" {
		return "", false, nil // a folder placeholder object ("dir/")
	}
	if rest == "" || rest == "." || rest == ".." || strings.Contains(rest, "/") {
		return "", false, fmt.Errorf("%w: %q: %w: refused (a path cannot name it, and following it would loop or leave the folder)", ckpterr.ErrUnsupported, key, errKeyPath)
	}
	return rest, true, nil
}
