package bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"sort"
	"time"
)

// The client layer: each cloud's object calls behind one interface (objectAPI), every call
// taking a context, so cancelling a conversion cancels the request in flight. GCS goes
// through its JSON API over net/http with golang.org/x/oauth2/google credentials (gcs.go),
// S3 through its REST API over net/http, signed by the AWS SDK's SigV4 signer with the
// SDK's default credential chain (s3.go, s3put.go). No other cloud library is linked: the
// rest of the package works over Bucket.

// objectAPI is one bucket's object calls. Each is tried once: Bucket retries them.
type objectAPI interface {
	// stat describes the object key.
	stat(ctx context.Context, key string) (Attributes, error)
	// readRange reads exactly len(p) bytes of the object key at off.
	readRange(ctx context.Context, key string, p []byte, off int64) error
	// list returns one page of the objects (and, with a delimiter, the subfolders) under
	// prefix, from the page token ("" first) on, and the next page's token ("" after the
	// last).
	list(ctx context.Context, prefix, delim, token string) (page []Entry, next string, err error)
	// remove deletes the object key; a missing object is not an error.
	remove(ctx context.Context, key string) error
	// put uploads data as the object key in one request, with its checksum for the
	// service to check.
	put(ctx context.Context, key string, data []byte, opts PutOptions) error
	// writer starts the upload of key (see Writer).
	writer(ctx context.Context, key string, opts PutOptions) Writer
	// closeIdle closes the client's idle connections.
	closeIdle()
}

// Attributes describe an object.
type Attributes struct {
	Size     int64
	Metadata map[string]string // user metadata (RunMetadata)
	// CRC32C is the object's CRC32C (Castagnoli) as the service reports it, when HasCRC32C
	// (GCS reports one for every object; S3 none here).
	CRC32C    uint32
	HasCRC32C bool
}

// Entry is an object or, in a listing with a delimiter, a subfolder (Key ends with it).
type Entry struct {
	Key   string
	Size  int64
	IsDir bool
}

// PutOptions are an upload's.
type PutOptions struct {
	Metadata map[string]string
	// IfAbsent refuses to replace an object: the upload fails with a precondition error
	// (Precondition) when the key exists.
	IfAbsent bool
}

// Writer streams one object up. The object appears, whole, when Close succeeds; Abort (or
// a cancelled context) stops the upload, which the service discards, and returns its
// buffers. Every request is retried (Retries) while its bytes are in hand.
type Writer interface {
	io.WriteCloser
	Abort()
}

// Bucket is an opened bucket: its cloud's object calls, each taking a context and retried
// on transient failures (see retry), and erring with an *HTTPError or a network error.
type Bucket struct {
	api objectAPI
}

// Attributes describes the object key.
func (b *Bucket) Attributes(ctx context.Context, key string) (Attributes, error) {
	var a Attributes
	err := retry(ctx, func() error {
		var err error
		a, err = b.api.stat(ctx, key)
		return err
	})
	return a, err
}

// ReadRange reads exactly len(p) bytes of the object key at off (a response cut short is
// retried too).
func (b *Bucket) ReadRange(ctx context.Context, key string, p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	return retry(ctx, func() error { return b.api.readRange(ctx, key, p, off) })
}

// ReadAll reads the object key: its first limit bytes, or all of a smaller one.
func (b *Bucket) ReadAll(ctx context.Context, key string, limit int64) ([]byte, error) {
	a, err := b.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	p := make([]byte, min(a.Size, limit))
	return p, b.ReadRange(ctx, key, p, 0)
}

// List returns every object (and, with a delimiter, every subfolder) under prefix, in the
// order of their keys.
func (b *Bucket) List(ctx context.Context, prefix, delim string) ([]Entry, error) {
	var out []Entry
	token := ""
	for {
		var page []Entry
		var next string
		err := retry(ctx, func() error {
			var err error
			page, next, err = b.api.list(ctx, prefix, delim, token)
			return err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if next == "" || next == token {
			return out, nil
		}
		token = next
	}
}

// Delete removes the object key; a missing object is not an error.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	err := retry(ctx, func() error { return b.api.remove(ctx, key) })
	if NotFound(err) {
		return nil
	}
	return err
}

// NewWriter starts the upload of key.
func (b *Bucket) NewWriter(ctx context.Context, key string, opts PutOptions) Writer {
	return b.api.writer(ctx, key, opts)
}

// Put uploads data as the object key in one request (retried).
func (b *Bucket) Put(ctx context.Context, key string, data []byte, opts PutOptions) error {
	return retry(ctx, func() error { return b.api.put(ctx, key, data, opts) })
}

// sortEntries sorts a listing's page by key.
func sortEntries(es []Entry) {
	sort.Slice(es, func(i, j int) bool { return es[i].Key < es[j].Key })
}

// HTTPError is a service's answer other than success: its status and what it said.
type HTTPError struct {
	Status  int
	Message string
}

func (e *HTTPError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// HTTPStatusCode is the status (the interface the AWS SDK's errors have too).
func (e *HTTPError) HTTPStatusCode() int { return e.Status }

// httpStatus is the status of the HTTP answer err reports (either client's), 0 if none.
func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// NotFound reports whether err says the object (or upload) does not exist.
func NotFound(err error) bool {
	return err != nil && (httpStatus(err) == http.StatusNotFound || errors.Is(err, fs.ErrNotExist))
}

// Precondition reports whether err is a refused precondition: an IfAbsent upload of a key
// that exists.
func Precondition(err error) bool { return httpStatus(err) == http.StatusPreconditionFailed }

// denied reports whether err is a refusal of the credentials.
func denied(err error) bool {
	s := httpStatus(err)
	return s == http.StatusUnauthorized || s == http.StatusForbidden
}

// transient reports whether err may go away when the request is repeated: server errors,
// throttling, timeouts, connections reset or closed without an answer, bodies cut short.
// A missing object, a refused permission, a failed precondition, any other answer of
// status 4xx or a cancelled context is final. It is the one test of every retry.
func transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if s := httpStatus(err); s != 0 {
		return s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500
	}
	var final interface{ final() bool }
	if errors.As(err, &final) && final.final() {
		return false
	}
	return true // a network error: refused, reset, EOF, timed out
}

// credentialsError is a failure to find or refresh credentials: the chain has looked in
// every place it knows, so asking again at once finds nothing more.
type credentialsError struct{ err error }

func (e credentialsError) Error() string { return "credentials: " + e.err.Error() }
func (e credentialsError) Unwrap() error { return e.err }
func (credentialsError) final() bool     { return true }

// Retries is how many times a request is tried; the waits between tries double from
// 50 ms up to 2 s, so a request that keeps failing is given up after about 5 s of waiting.
const Retries = 8

// backoff is the wait before try i+1 (from 0).
func backoff(i int) time.Duration { return min(50*time.Millisecond<<i, 2*time.Second) }

// retry runs op until it succeeds, fails for good (transient), or has been tried Retries
// times. The clients' own retries are off: this is the only layer, so a persistent failure
// is reported within seconds, not after Retries² tries.
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

// newTransport is the HTTP transport of the GCS client: the standard one, keeping enough
// idle connections for the Parallel range requests in flight (the default keeps 2 per
// host, so the others would reconnect for every request).
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 2 * Parallel
	t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.ResponseHeaderTimeout = 2 * time.Minute
	return t
}
