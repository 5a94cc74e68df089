package bucket

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
)

// GCS through its JSON API (https://cloud.google.com/storage/docs/json_api/v1) over
// net/http: an object's metadata, ranged media downloads, listings, deletes, multipart
// uploads for objects smaller than UploadBuffer and resumable uploads for the others. The
// requests carry OAuth2 tokens from Application Default Credentials
// (golang.org/x/oauth2/google: GOOGLE_APPLICATION_CREDENTIALS, gcloud's application-default
// file, workload identity federation, the metadata server on Google Cloud); with
// STORAGE_EMULATOR_HOST=host:port they go to that emulator over plain HTTP, unauthenticated.
// The Cloud client library would add its gRPC transport, OpenTelemetry and monitoring to the
// binary for the same five calls (BENCHMARKS.md, "Footprint").

// gcsScope is the OAuth2 scope of the tokens: objects read and written.
const gcsScope = "https://www.googleapis.com/auth/devstorage.read_write"

// UploadBuffer is the size of one request of a GCS resumable upload (a multiple of the
// 256 KiB the service requires); an object smaller than it is sent in one request.
const UploadBuffer = 16 << 20

type gcsAPI struct {
	c      *http.Client
	base   string // scheme://host of the service or the emulator
	bucket string
}

// newGCS is the client of a GCS bucket: the emulator's when STORAGE_EMULATOR_HOST names
// one, else the service's with Application Default Credentials.
func newGCS(ctx context.Context, bucket string) (*gcsAPI, error) {
	tr := newTransport()
	g := &gcsAPI{base: "https://storage.googleapis.com", bucket: bucket}
	// The service answers an unfinished resumable upload with 308 and no Location: an
	// answer, not a redirect to follow.
	g.c = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if h := os.Getenv("STORAGE_EMULATOR_HOST"); h != "" {
		if !strings.Contains(h, "://") {
			h = "http://" + h
		}
		g.base = strings.TrimSuffix(h, "/")
		return g, nil
	}
	// The token source keeps the context for its refreshes: one that outlives this call.
	creds, err := google.FindDefaultCredentials(context.WithoutCancel(ctx), gcsScope)
	if err != nil {
		return nil, err
	}
	g.c.Transport = &oauth2.Transport{Source: creds.TokenSource, Base: tr}
	return g, nil
}

// object is the JSON API URL of the object key.
func (g *gcsAPI) object(key string) string {
	return g.base + "/storage/v1/b/" + url.PathEscape(g.bucket) + "/o/" + url.PathEscape(key)
}

// do sends req and returns its answer when its status is 2xx (or 308, an unfinished
// resumable upload's), else an *HTTPError with the service's message.
func (g *gcsAPI) do(req *http.Request) (*http.Response, error) {
	resp, err := g.c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusPermanentRedirect {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
	}
	return nil, &HTTPError{Status: resp.StatusCode, Message: msg}
}

// request is a request of ctx, with no body but what is given.
func request(ctx context.Context, method, u string, body io.Reader) (*http.Request, error) {
	return http.NewRequestWithContext(ctx, method, u, body)
}

// gcsObject is the part of the JSON API's object resource ckpt reads.
type gcsObject struct {
	Name     string            `json:"name"`
	Size     int64             `json:"size,string"`
	CRC32C   string            `json:"crc32c"`
	Metadata map[string]string `json:"metadata"`
}

func (o *gcsObject) attributes() (Attributes, error) {
	a := Attributes{Size: o.Size, Metadata: o.Metadata}
	if o.CRC32C != "" {
		b, err := base64.StdEncoding.DecodeString(o.CRC32C)
		if err != nil || len(b) != 4 {
			return a, fmt.Errorf("the service reported the CRC32C %q", o.CRC32C)
		}
		a.CRC32C, a.HasCRC32C = binary.BigEndian.Uint32(b), true
	}
	return a, nil
}

// decode reads the object resource of an answer (bounded: it is a few hundred bytes).
func decodeObject(resp *http.Response) (Attributes, error) {
	defer resp.Body.Close()
	var o gcsObject
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&o); err != nil {
		return Attributes{}, fmt.Errorf("the object's description: %w", err)
	}
	return o.attributes()
}

func (g *gcsAPI) stat(ctx context.Context, key string) (Attributes, error) {
	req, err := request(ctx, http.MethodGet, g.object(key)+"?fields=size,crc32c,metadata", nil)
	if err != nil {
		return Attributes{}, err
	}
	resp, err := g.do(req)
	if err != nil {
		return Attributes{}, err
	}
	return decodeObject(resp)
}

// errRangeIgnored is a whole object sent for a ranged read: repeating it will not help.
type errRangeIgnored struct{ status int }

func (e errRangeIgnored) Error() string {
	return fmt.Sprintf("the service answered a ranged read with status %d and not the range", e.status)
}
func (errRangeIgnored) final() bool { return true }

func (g *gcsAPI) readRange(ctx context.Context, key string, p []byte, off int64) error {
	req, err := request(ctx, http.MethodGet, g.object(key)+"?alt=media", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
	resp, err := g.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent && off != 0 {
		return errRangeIgnored{resp.StatusCode}
	}
	_, err = io.ReadFull(resp.Body, p)
	return err
}

func (g *gcsAPI) list(ctx context.Context, prefix, delim, token string) ([]Entry, string, error) {
	q := url.Values{"prefix": {prefix}, "maxResults": {"1000"}, "fields": {"items(name,size),prefixes,nextPageToken"}}
	if delim != "" {
		q.Set("delimiter", delim)
	}
	if token != "" {
		q.Set("pageToken", token)
	}
	req, err := request(ctx, http.MethodGet, g.base+"/storage/v1/b/"+url.PathEscape(g.bucket)+"/o?"+q.Encode(), nil)
	if err != nil {
		return nil, "", err
	}
	resp, err := g.do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	var page struct {
		Items         []gcsObject `json:"items"`
		Prefixes      []string    `json:"prefixes"`
		NextPageToken string      `json:"nextPageToken"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&page); err != nil {
		return nil, "", fmt.Errorf("the listing: %w", err)
	}
	out := make([]Entry, 0, len(page.Items)+len(page.Prefixes))
	for _, o := range page.Items {
		out = append(out, Entry{Key: o.Name, Size: o.Size})
	}
	for _, p := range page.Prefixes {
		out = append(out, Entry{Key: p, IsDir: true})
	}
	sortEntries(out)
	return out, page.NextPageToken, nil
}

func (g *gcsAPI) remove(ctx context.Context, key string) error {
	req, err := request(ctx, http.MethodDelete, g.object(key), nil)
	if err != nil {
		return err
	}
	resp, err := g.do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// uploadURL is the URL starting an upload of the given type.
func (g *gcsAPI) uploadURL(kind string, ifAbsent bool) string {
	u := g.base + "/upload/storage/v1/b/" + url.PathEscape(g.bucket) + "/o?uploadType=" + kind
	if ifAbsent {
		u += "&ifGenerationMatch=0" // no live object of that name
	}
	return u
}

// metadata is the JSON object resource of an upload of key; crc is sent when known, for
// the service to check the bytes against before it makes the object.
func metadataJSON(key string, opts PutOptions, crc *uint32) []byte {
	m := map[string]any{"name": key, "contentType": "application/octet-stream"}
	if len(opts.Metadata) > 0 {
		m["metadata"] = opts.Metadata
	}
	if crc != nil {
		m["crc32c"] = crcBase64(*crc)
	}
	b, _ := json.Marshal(m)
	return b
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// gcsUpload streams one object up: one multipart request at Close for an object smaller
// than UploadBuffer, else a resumable upload whose chunks of UploadBuffer bytes are sent
// one at a time while the next one fills (two buffers from the pool, outside the Go heap).
// A chunk that fails transiently is sent again from where the service says it stopped; the
// failures are counted per chunk (Retries).
type gcsUpload struct {
	g      *gcsAPI
	ctx    context.Context
	cancel context.CancelFunc
	key    string
	opts   PutOptions

	bufMu sync.Mutex // held by Write and Close while they use buf, and by Abort to return it
	buf   []byte     // the chunk being filled, from getBuf
	fill  int
	sent  int64  // bytes handed to chunks sent or being sent
	crc   uint32 // CRC32C of the bytes written, for the single request

	session string        // the resumable upload's URL, once its first chunk is full
	prev    chan struct{} // closed when the chunk in flight is done
	mu      sync.Mutex
	err     error
	stored  bool
	once    sync.Once
}

func (g *gcsAPI) closeIdle() { g.c.CloseIdleConnections() }

func (g *gcsAPI) writer(ctx context.Context, key string, opts PutOptions) Writer {
	u := &gcsUpload{g: g, key: key, opts: opts}
	u.ctx, u.cancel = context.WithCancel(ctx)
	return u
}

func (u *gcsUpload) failed() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.err != nil {
		return u.err
	}
	return u.ctx.Err()
}

func (u *gcsUpload) fail(err error) {
	u.mu.Lock()
	if u.err == nil {
		u.err = err
	}
	u.mu.Unlock()
	u.cancel()
}

// Write copies p into chunks, sending each one as it fills.
func (u *gcsUpload) Write(p []byte) (int, error) {
	u.bufMu.Lock()
	defer u.bufMu.Unlock()
	var done int
	for done < len(p) {
		if err := u.failed(); err != nil {
			return done, err
		}
		if u.buf == nil {
			u.buf, u.fill = getBuf(UploadBuffer), 0
		}
		n := copy(u.buf[u.fill:], p[done:])
		u.crc = crc32.Update(u.crc, castagnoli, u.buf[u.fill:u.fill+n])
		u.fill += n
		done += n
		if u.fill == len(u.buf) {
			if err := u.send(-1); err != nil {
				return done, err
			}
		}
	}
	return done, nil
}

// send starts sending the filled chunk once the one before it is stored; total is the
// object's size on the last chunk, -1 before. u.bufMu is held.
func (u *gcsUpload) send(total int64) error {
	if u.session == "" {
		if err := retry(u.ctx, u.start); err != nil {
			u.fail(err)
			return err
		}
	}
	if u.prev != nil {
		select {
		case <-u.prev:
		case <-u.ctx.Done():
		}
	}
	if err := u.failed(); err != nil {
		return err
	}
	buf, chunk, start := u.buf, u.buf[:u.fill], u.sent
	u.buf, u.fill = nil, 0
	u.sent += int64(len(chunk))
	done := make(chan struct{})
	u.prev = done
	go func() {
		defer close(done)
		if buf != nil {
			defer putBuf(buf)
		}
		if err := u.sendChunk(chunk, start, total); err != nil {
			u.fail(fmt.Errorf("bytes %d to %d: %w", start, start+int64(len(chunk)), err))
		}
	}()
	return nil
}

// start opens the resumable upload.
func (u *gcsUpload) start() error {
	req, err := request(u.ctx, http.MethodPost, u.g.uploadURL("resumable", u.opts.IfAbsent), bytes.NewReader(metadataJSON(u.key, u.opts, nil)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json; charset=UTF-8")
	req.Header.Set("X-Upload-Content-Type", "application/octet-stream")
	resp, err := u.g.do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if loc == "" {
		return fmt.Errorf("the service started a resumable upload without its URL")
	}
	u.session = loc
	return nil
}

// sendChunk sends chunk, the object's bytes from start, to the resumable upload (total is
// the object's size with the last chunk, -1 before): again from where the service says it
// stopped when it kept part of it, again whole when a request failed transiently — at most
// Retries failures in a row.
func (u *gcsUpload) sendChunk(chunk []byte, start, total int64) error {
	end := start + int64(len(chunk))
	failures := 0
	for {
		stored, made, err := u.put(chunk, start, total)
		switch {
		case err != nil:
		case made:
			u.mu.Lock()
			u.stored = true
			u.mu.Unlock()
			return nil
		case total < 0 && stored >= end:
			return nil
		case stored > start: // part of the chunk kept: the rest, from there
			chunk, start, failures = chunk[stored-start:], stored, 0
			continue
		default:
			err = fmt.Errorf("the service kept %d of the object's bytes after %d were sent", stored, end)
		}
		if failures++; !transient(err) || failures >= Retries {
			return err
		}
		select {
		case <-u.ctx.Done():
			return u.ctx.Err()
		case <-time.After(backoff(failures - 1)):
		}
	}
}

// put sends chunk at start (total -1 while the size is unknown) and returns how many of
// the object's bytes the service holds, or made when the service made the object.
func (u *gcsUpload) put(chunk []byte, start, total int64) (stored int64, made bool, err error) {
	req, err := request(u.ctx, http.MethodPut, u.session, bytes.NewReader(chunk))
	if err != nil {
		return 0, false, err
	}
	req.ContentLength = int64(len(chunk))
	size := "*"
	if total >= 0 {
		size = strconv.FormatInt(total, 10)
	}
	if len(chunk) == 0 {
		req.Header.Set("Content-Range", "bytes */"+size)
	} else {
		req.Header.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%s", start, start+int64(len(chunk))-1, size))
	}
	resp, err := u.g.do(req)
	if err != nil {
		return 0, false, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode != http.StatusPermanentRedirect {
		return total, true, nil
	}
	// "Range: bytes=0-N": the service holds N+1 bytes (none without the header).
	r := resp.Header.Get("Range")
	if r == "" {
		return 0, false, nil
	}
	_, last, ok := strings.Cut(strings.TrimPrefix(r, "bytes="), "-")
	n, perr := strconv.ParseInt(last, 10, 64)
	if !ok || perr != nil {
		return 0, false, fmt.Errorf("the service answered the range %q", r)
	}
	return n + 1, false, nil
}

// Close sends what is left and makes the object: one multipart request for an object
// smaller than UploadBuffer, else the last chunk of the resumable upload.
func (u *gcsUpload) Close() error {
	u.bufMu.Lock()
	if u.session == "" && u.failed() == nil {
		var data []byte
		if u.buf != nil {
			data = u.buf[:u.fill]
		}
		err := retry(u.ctx, func() error { return u.g.put(u.ctx, u.key, data, u.opts) })
		u.release()
		u.bufMu.Unlock()
		u.cancel()
		return err
	}
	if u.failed() == nil {
		u.send(u.sent + int64(u.fill))
	}
	u.release()
	prev := u.prev
	u.bufMu.Unlock()
	if prev != nil {
		<-prev
	}
	err := u.failed()
	u.Abort()
	return err
}

// put uploads data as the object key in one multipart request, with its CRC32C for the
// service to check.
func (g *gcsAPI) put(ctx context.Context, key string, data []byte, opts PutOptions) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	pw, _ := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {"application/json; charset=UTF-8"}})
	crc := crc32.Checksum(data, castagnoli)
	pw.Write(metadataJSON(key, opts, &crc))
	mw.CreatePart(textproto.MIMEHeader{"Content-Type": {"application/octet-stream"}})
	head := append([]byte(nil), body.Bytes()...)
	body.Reset()
	mw.Close()
	tail := body.Bytes()
	req, err := request(ctx, http.MethodPost, g.uploadURL("multipart", opts.IfAbsent),
		io.MultiReader(bytes.NewReader(head), bytes.NewReader(data), bytes.NewReader(tail)))
	if err != nil {
		return err
	}
	req.ContentLength = int64(len(head) + len(data) + len(tail))
	req.Header.Set("Content-Type", "multipart/related; boundary="+mw.Boundary())
	resp, err := g.do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return nil
}

// crc32c is the CRC32C of the bytes written (crcWriter).
func (u *gcsUpload) crc32c() uint32 {
	u.bufMu.Lock()
	defer u.bufMu.Unlock()
	return u.crc
}

// release returns the chunk being filled to the pool. u.bufMu is held.
func (u *gcsUpload) release() {
	if u.buf != nil {
		putBuf(u.buf)
		u.buf, u.fill = nil, 0
	}
}

// Abort stops the upload: the chunk in flight is cancelled, the buffers go back to the
// pool and an unfinished resumable upload is cancelled at the service, which discards it.
func (u *gcsUpload) Abort() {
	u.cancel()
	u.bufMu.Lock()
	u.release()
	prev := u.prev
	u.bufMu.Unlock()
	if prev != nil {
		<-prev
	}
	u.once.Do(func() {
		u.mu.Lock()
		stored := u.stored
		u.mu.Unlock()
		if u.session == "" || stored {
			return
		}
		ctx := context.WithoutCancel(u.ctx)
		if req, err := request(ctx, http.MethodDelete, u.session, nil); err == nil {
			if resp, err := u.g.c.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	})
}
