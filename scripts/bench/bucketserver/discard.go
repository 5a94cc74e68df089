//go:build unix

package main

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"sync"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// discarding is the benchmark's S3 backend: gofakes3's in-memory backend for objects put
// whole (markers, manifests), and multipart uploads whose parts are read, tagged and
// dropped. gofakes3's own multipart uploads keep every part in memory, copy them all into
// one buffer at completion and hash them twice with MD5 — for a 2 GiB object, seconds of
// the 2 cores ckpt shares with the server, and gigabytes of server memory: the emulator's
// cost, not ckpt's. Here the protocol is the same (requests, headers, ETags, sizes,
// metadata, aborts) and a completed object has its size and metadata, but not its bytes:
// reading it back is refused. Each part's ETag is its CRC32 (S3 computes MD5 on its own
// machines; this server shares the client's).
type discarding struct {
	*s3mem.Backend

	mu      sync.Mutex
	n       int
	uploads map[gofakes3.UploadID]*mpUpload
	sizes   map[string]int64 // bucket + "/" + key → size of a completed multipart object
}

type mpUpload struct {
	bucket, key string
	meta        map[string]string
	parts       map[int]part
}

type part struct {
	size int64
	etag string
}

func newDiscarding() *discarding {
	return &discarding{Backend: s3mem.New(), uploads: map[gofakes3.UploadID]*mpUpload{}, sizes: map[string]int64{}}
}

var errDiscarded = gofakes3.ErrorMessage(gofakes3.ErrNotImplemented, "the benchmark server keeps no bytes of multipart objects")

func (d *discarding) CreateMultipartUpload(bucket, key string, meta map[string]string) (gofakes3.UploadID, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	id := gofakes3.UploadID(fmt.Sprint(d.n))
	d.uploads[id] = &mpUpload{bucket: bucket, key: key, meta: meta, parts: map[int]part{}}
	return id, nil
}

func (d *discarding) UploadPart(bucket, key string, id gofakes3.UploadID, num int, size int64, r io.Reader) (string, error) {
	h := crc32.NewIEEE()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", err
	}
	if n != size {
		return "", gofakes3.ErrIncompleteBody
	}
	etag := fmt.Sprintf(`"%08x%016x"`, h.Sum32(), n)
	d.mu.Lock()
	defer d.mu.Unlock()
	u := d.uploads[id]
	if u == nil {
		return "", gofakes3.ErrNoSuchUpload
	}
	u.parts[num] = part{n, etag}
	return etag, nil
}

func (d *discarding) CompleteMultipartUpload(bucket, key string, id gofakes3.UploadID, in *gofakes3.CompleteMultipartUploadRequest) (gofakes3.VersionID, string, error) {
	d.mu.Lock()
	u := d.uploads[id]
	delete(d.uploads, id)
	d.mu.Unlock()
	if u == nil {
		return "", "", gofakes3.ErrNoSuchUpload
	}
	var size int64
	for _, p := range in.Parts {
		got, ok := u.parts[p.PartNumber]
		if !ok || strings.Trim(got.etag, `"`) != strings.Trim(p.ETag, `"`) {
			return "", "", gofakes3.ErrInvalidPart
		}
		size += got.size
	}
	if _, err := d.Backend.PutObject(bucket, key, u.meta, bytes.NewReader(nil), 0, nil); err != nil {
		return "", "", err
	}
	d.mu.Lock()
	d.sizes[bucket+"/"+key] = size
	d.mu.Unlock()
	return "", fmt.Sprintf(`"%d-%d"`, size, len(in.Parts)), nil
}

func (d *discarding) AbortMultipartUpload(bucket, key string, id gofakes3.UploadID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.uploads[id] == nil {
		return gofakes3.ErrNoSuchUpload
	}
	delete(d.uploads, id)
	return nil
}

func (d *discarding) ListMultipartUploads(bucket string, _ *gofakes3.UploadListMarker, _ gofakes3.Prefix, _ int64) (*gofakes3.ListMultipartUploadsResult, error) {
	return &gofakes3.ListMultipartUploadsResult{Bucket: bucket}, nil
}

func (d *discarding) ListParts(bucket, key string, id gofakes3.UploadID, _ int, _ int64) (*gofakes3.ListMultipartUploadPartsResult, error) {
	return nil, gofakes3.ErrNotImplemented
}

// size is the size of a completed multipart object, if key is one.
func (d *discarding) size(bucket, key string) (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, ok := d.sizes[bucket+"/"+key]
	return n, ok
}

func (d *discarding) forget(bucket string, keys ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range keys {
		delete(d.sizes, bucket+"/"+k)
	}
}

func (d *discarding) HeadObject(bucket, key string) (*gofakes3.Object, error) {
	o, err := d.Backend.HeadObject(bucket, key)
	if n, ok := d.size(bucket, key); ok && err == nil {
		o.Size = n
	}
	return o, err
}

func (d *discarding) GetObject(bucket, key string, rng *gofakes3.ObjectRangeRequest) (*gofakes3.Object, error) {
	if _, ok := d.size(bucket, key); ok {
		return nil, errDiscarded
	}
	return d.Backend.GetObject(bucket, key, rng)
}

func (d *discarding) PutObject(bucket, key string, meta map[string]string, r io.Reader, size int64, c *gofakes3.PutConditions) (gofakes3.PutObjectResult, error) {
	res, err := d.Backend.PutObject(bucket, key, meta, r, size, c)
	if err == nil {
		d.forget(bucket, key)
	}
	return res, err
}

func (d *discarding) DeleteObject(bucket, key string) (gofakes3.ObjectDeleteResult, error) {
	d.forget(bucket, key)
	return d.Backend.DeleteObject(bucket, key)
}

func (d *discarding) DeleteMulti(bucket string, keys ...string) (gofakes3.MultiDeleteResult, error) {
	d.forget(bucket, keys...)
	return d.Backend.DeleteMulti(bucket, keys...)
}
