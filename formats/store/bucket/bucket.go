package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/storage"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"
	"google.golang.org/api/googleapi"

	"github.com/ckpt-dev/ckpt/formats/store"
)

func init() {
	store.Register("gs", Default)
	store.Register("s3", Default)
}

// Default is the backend registered for gs:// and s3://, with the clients the environment
// configures (see Open).
var Default = &FS{}

// FS reads and lists objects of gs:// and s3:// URLs; it implements store.FS. Buckets are
// opened on first use and kept.
type FS struct {
	mu      sync.Mutex
	buckets map[string]*blob.Bucket
}

// Bucket returns the opened bucket of l, opening it on first use: a GCS bucket with
// Application Default Credentials (STORAGE_EMULATOR_HOST=host:port talks to an emulator
// without credentials), an S3 bucket with the AWS SDK's default chain (environment,
// shared config and credentials files, AWS_PROFILE, instance roles; AWS_ENDPOINT_URL_S3 or
// AWS_ENDPOINT_URL names an S3-compatible endpoint, addressed path-style; the region
// defaults to us-east-1 when none is configured).
func (f *FS) Bucket(ctx context.Context, l Location) (*blob.Bucket, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := l.Scheme + "://" + l.Bucket
	if b := f.buckets[id]; b != nil {
		return b, nil
	}
	var b *blob.Bucket
	var err error
	switch l.Scheme {
	case "gs":
		var c *storage.Client
		if c, err = storage.NewClient(ctx); err == nil {
			// retry is the one layer of retries; uploads set their own (writerOptions).
			c.SetRetry(storage.WithPolicy(storage.RetryNever))
			b, err = gcsblob.OpenBucket(ctx, nil, l.Bucket, &gcsblob.Options{Client: c})
		}
	case "s3":
		b, err = openS3(ctx, l.Bucket)
	default:
		err = fmt.Errorf("scheme %q", l.Scheme)
	}
	if err != nil {
		// The clients' errors name what is missing (no credentials found), never secrets.
		return nil, fmt.Errorf("%s: opening the bucket: %w", id, err)
	}
	if f.buckets == nil {
		f.buckets = map[string]*blob.Bucket{}
	}
	f.buckets[id] = b
	return b, nil
}

func openS3(ctx context.Context, name string) (*blob.Bucket, error) {
	// retry is the one layer of retries, around every request (s3put.go's too).
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }))
	if err != nil {
		return nil, err
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	custom := os.Getenv("AWS_ENDPOINT_URL_S3") != "" || os.Getenv("AWS_ENDPOINT_URL") != ""
	c := s3.NewFromConfig(cfg, func(o *s3.Options) {
		// S3-compatible servers (MinIO, emulators) are addressed by path, not by host name.
		o.UsePathStyle = o.UsePathStyle || custom
	})
	return s3blob.OpenBucket(ctx, c, name, nil)
}

// Close closes the opened buckets.
func (f *FS) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for id, b := range f.buckets {
		errs = append(errs, b.Close())
		delete(f.buckets, id)
	}
	return errors.Join(errs...)
}

// pathError names the object URL (which holds no credentials: Parse refuses URLs with
// user information) and maps a missing object to fs.ErrNotExist.
func pathError(op string, l Location, err error) error {
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		err = fs.ErrNotExist
	case gcerrors.PermissionDenied:
		err = fmt.Errorf("%w (permission denied: check the credentials the environment provides)", fs.ErrPermission)
	}
	return &fs.PathError{Op: op, Path: l.String(), Err: err}
}

// Open opens the object name for ranged reads.
func (f *FS) Open(name string) (store.File, error) {
	l, err := Parse(name)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	b, err := f.Bucket(ctx, l)
	if err != nil {
		return nil, err
	}
	attrs, err := attributes(ctx, b, l.Key)
	if err != nil {
		return nil, pathError("open", l, err)
	}
	return newObject(b, l, attrs.Size), nil
}

// Stat describes name: an object, or a folder when objects lie under name + "/".
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	l, err := Parse(name)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	b, err := f.Bucket(ctx, l)
	if err != nil {
		return nil, err
	}
	base := l.Key[strings.LastIndexByte(l.Key, '/')+1:]
	if l.Key != "" {
		attrs, err := attributes(ctx, b, l.Key)
		if err == nil {
			return store.FileInfo(base, attrs.Size, false), nil
		}
		if gcerrors.Code(err) != gcerrors.NotFound {
			return nil, pathError("stat", l, err)
		}
	}
	var found bool
	err = retry(ctx, func() error {
		page, _, err := b.ListPage(ctx, blob.FirstPageToken, 1, &blob.ListOptions{Prefix: prefix(l)})
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
	return store.FileInfo(base, 0, true), nil
}

// prefix is the listing prefix of the folder l.
func prefix(l Location) string {
	if l.Key == "" {
		return ""
	}
	return l.Key + "/"
}

// ReadDir lists the folder name: its objects and subfolders, by name.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	l, err := Parse(name)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	b, err := f.Bucket(ctx, l)
	if err != nil {
		return nil, err
	}
	objs, err := list(ctx, b, prefix(l), "/")
	if err != nil {
		return nil, pathError("readdir", l, err)
	}
	if len(objs) == 0 {
		if _, err := f.Stat(name); err != nil {
			return nil, err
		}
	}
	out := make([]fs.DirEntry, 0, len(objs))
	for _, o := range objs {
		n := strings.TrimPrefix(o.Key, prefix(l))
		n = strings.TrimSuffix(n, "/")
		if n == "" {
			continue // a folder placeholder object ("dir/")
		}
		out = append(out, fs.FileInfoToDirEntry(store.FileInfo(n, o.Size, o.IsDir)))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

// list returns every object (and, with a delimiter, every subfolder) under prefix.
func list(ctx context.Context, b *blob.Bucket, prefix, delim string) ([]*blob.ListObject, error) {
	var out []*blob.ListObject
	token := blob.FirstPageToken
	for {
		var page []*blob.ListObject
		var next []byte
		err := retry(ctx, func() error {
			var err error
			page, next, err = b.ListPage(ctx, token, 1000, &blob.ListOptions{Prefix: prefix, Delimiter: delim})
			return err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(next) == 0 {
			return out, nil
		}
		token = next
	}
}

// transient reports whether err may go away when the request is repeated: server errors,
// throttling, timeouts, connections reset or closed without an answer, bodies cut short.
// A missing object, a refused permission, a failed precondition, any other answer of
// status 4xx or a cancelled context is final. It is the one test of every retry, ours
// (retry) and the GCS client's for uploads (writerOptions).
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if s := httpStatus(err); s != 0 {
		return s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound, gcerrors.PermissionDenied, gcerrors.InvalidArgument,
		gcerrors.FailedPrecondition, gcerrors.Unimplemented, gcerrors.AlreadyExists, gcerrors.Canceled:
		return false
	}
	return true // a network error: refused, reset, EOF, timed out
}

// httpStatus is the status of the HTTP answer err reports (either client's), 0 if none.
func httpStatus(err error) int {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return ge.Code
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// Retries is how many times a request is tried; the waits between tries double from
// 50 ms up to 2 s, so a request that keeps failing is given up after about 5 s of waiting.
const Retries = 8

// backoff is the wait before try i+1 (from 0).
func backoff(i int) time.Duration { return min(50*time.Millisecond<<i, 2*time.Second) }

// retry runs op until it succeeds, fails for good (transient), or has been tried Retries
// times. The clients' own retries are off (Bucket): this is the only layer, so a
// persistent failure is reported within seconds, not after Retries² tries.
func retry(ctx context.Context, op func() error) error {
	var err error
	for i := 0; i < Retries; i++ {
		if err = op(); !transient(err) {
			return err
		}
		if i == Retries-1 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff(i)):
		}
	}
	return err
}

// attributes reads the attributes of the object key, retrying transient failures.
func attributes(ctx context.Context, b *blob.Bucket, key string) (*blob.Attributes, error) {
	var a *blob.Attributes
	err := retry(ctx, func() error {
		var err error
		a, err = b.Attributes(ctx, key)
		return err
	})
	return a, err
}

// readRange reads exactly len(p) bytes of the object at off, retrying transient failures
// (a response cut short is retried too).
func readRange(ctx context.Context, b *blob.Bucket, key string, p []byte, off int64) error {
	return retry(ctx, func() error {
		r, err := b.NewRangeReader(ctx, key, off, int64(len(p)), nil)
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.ReadFull(r, p)
		return err
	})
}
