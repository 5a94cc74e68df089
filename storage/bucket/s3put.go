package bucket

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/xml"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// An S3 object's bytes are copied once, into a part buffer of anonymous memory outside the
// Go heap, reused through the same size-class pool as the read side's blocks (getBuf); a
// full part is sent by a goroutine while the next one fills, at most UploadParallel parts
// in flight in the process. Each part's CRC32 is computed once, as it is sent, and sent as
// the part's checksum, which S3 verifies before accepting the part; the payload is not
// hashed a second time for the request signature (UNSIGNED-PAYLOAD). The object's
// composite CRC32, when the service reports it, is compared with the parts' after
// completion. CRC32 (not CRC32C) is the AWS SDK's default, so an object's checksum is of
// one kind whichever client wrote it (gofakes3 keeps an object's checksum header when
// another client overwrites it with another kind's). Every request is retried by retry: a
// part's bytes stay in hand until it is stored. An object smaller than a part is one
// PutObject when it is closed.
const (
	// UploadPart is the size of an S3 part while an object has fewer than partsPerSize
	// parts; each further partsPerSize parts double it, so the 10 000 parts S3 allows
	// hold 8 TB, and objects up to 8 GB (a safetensors shard is at most a few) need no
	// more than UploadParallel+1 parts of memory.
	UploadPart = 8 << 20
	// UploadParallel bounds the parts being sent in the process.
	UploadParallel = 3

	partsPerSize = 1000
)

// uploadSlots holds a token for each part being sent.
var uploadSlots = make(chan struct{}, UploadParallel)

// partSize is the size of part n (from 1).
func partSize(n int32) int64 {
	return int64(UploadPart) << min((n-1)/partsPerSize, 9)
}

// crcBase64 is a CRC32 as S3 writes it: base64 of its 4 big-endian bytes.
func crcBase64(c uint32) string {
	return base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, c))
}

// s3Upload streams one object up: parts of a multipart upload, or — for an object smaller
// than a part — one PutObject when it is closed.
type s3Upload struct {
	ctx    context.Context
	cancel context.CancelFunc // stops the parts in flight when one fails for good
	a      *s3API
	key    string
	meta   map[string]string
	ifNone bool // PutObject only if no object has the key

	// bufMu is held by Write and Close while they use the part being filled, and by stop
	// to return it: an Output may be aborted from another goroutine (a signal).
	bufMu sync.Mutex
	buf   []byte // the part being filled, from getBuf
	fill  int
	next  int32 // number of the part being filled

	id string // the multipart upload, once its first part is full
	wg sync.WaitGroup

	mu        sync.Mutex
	parts     []completedPart // by part number - 1
	err       error
	completed bool   // the multipart upload was completed
	stored    string // the object's CRC32 as the service reports it
	once      sync.Once
}

// completedPart is a part of a multipart upload as CompleteMultipartUpload lists it.
type completedPart struct {
	Number int    `xml:"PartNumber"`
	ETag   string `xml:"ETag"`
	CRC32  string `xml:"ChecksumCRC32"`
}

func newS3Upload(ctx context.Context, a *s3API, key string, opts PutOptions) *s3Upload {
	u := &s3Upload{a: a, key: key, meta: opts.Metadata, ifNone: opts.IfAbsent, next: 1}
	u.ctx, u.cancel = context.WithCancel(ctx)
	return u
}

// Write copies p into parts, sending each one as it fills.
func (u *s3Upload) Write(p []byte) (int, error) {
	u.bufMu.Lock()
	defer u.bufMu.Unlock()
	var done int
	for done < len(p) {
		if err := u.failed(); err != nil {
			return done, err
		}
		if u.buf == nil {
			u.buf = getBuf(partSize(u.next))
			u.fill = 0
		}
		n := copy(u.buf[u.fill:], p[done:])
		u.fill += n
		done += n
		if u.fill == len(u.buf) {
			if err := u.send(); err != nil {
				return done, err
			}
		}
	}
	return done, nil
}

// failed is the error that ended the upload, if any.
func (u *s3Upload) failed() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.err != nil {
		return u.err
	}
	return u.ctx.Err()
}

func (u *s3Upload) fail(err error) {
	u.mu.Lock()
	if u.err == nil {
		u.err = err
	}
	u.mu.Unlock()
	u.cancel()
}

// send starts sending the filled part, waiting for a slot; the multipart upload is
// created with the first part.
func (u *s3Upload) send() error {
	if u.id == "" {
		err := retry(u.ctx, func() error {
			var err error
			u.id, err = u.a.createMultipart(u.ctx, u.key, u.meta)
			return err
		})
		if err != nil {
			u.fail(err)
			return err
		}
	}
	select {
	case uploadSlots <- struct{}{}:
	case <-u.ctx.Done():
		return u.failed()
	}
	if err := u.failed(); err != nil {
		<-uploadSlots
		return err
	}
	part, num := u.buf[:u.fill], u.next
	u.buf, u.fill = nil, 0
	u.next++
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		defer func() { <-uploadSlots }()
		defer putBuf(part)
		sum := crcBase64(crc32.ChecksumIEEE(part))
		var etag string
		err := retry(u.ctx, func() error {
			var err error
			etag, err = u.a.uploadPart(u.ctx, u.key, u.id, num, part, sum)
			return err
		})
		if err != nil {
			u.fail(fmt.Errorf("part %d: %w", num, err))
			return
		}
		u.mu.Lock()
		for int(num) > len(u.parts) {
			u.parts = append(u.parts, completedPart{})
		}
		u.parts[num-1] = completedPart{Number: int(num), ETag: etag, CRC32: sum}
		u.mu.Unlock()
	}()
	return nil
}

// Close sends what is left and completes the object: one PutObject for an object smaller
// than a part, else the last part and the completion of the multipart upload. A failed
// upload is stopped (its multipart upload aborted) before Close returns.
func (u *s3Upload) Close() error {
	u.bufMu.Lock()
	if u.id == "" && u.failed() == nil {
		data := u.buf[:u.fill]
		opts := PutOptions{Metadata: u.meta, IfAbsent: u.ifNone}
		err := retry(u.ctx, func() error { return u.a.putObject(u.ctx, u.key, data, opts) })
		u.release()
		u.bufMu.Unlock()
		u.cancel()
		return err
	}
	if u.fill > 0 && u.failed() == nil {
		u.send()
	}
	u.release()
	u.bufMu.Unlock()
	u.wg.Wait()
	err := u.failed()
	if err == nil {
		err = retry(u.ctx, func() error {
			stored, err := u.a.completeMultipart(u.ctx, u.key, u.id, u.parts)
			if err == nil {
				u.mu.Lock()
				u.completed = true
				u.mu.Unlock()
				u.stored = stored
			}
			return err
		})
	}
	u.Abort()
	if err != nil {
		return err
	}
	// S3's checksum of a multipart object is the CRC32 of its parts' CRC32s, "-parts".
	var crcs []byte
	for _, p := range u.parts {
		b, _ := base64.StdEncoding.DecodeString(p.CRC32)
		crcs = append(crcs, b...)
	}
	want := fmt.Sprintf("%s-%d", crcBase64(crc32.ChecksumIEEE(crcs)), len(u.parts))
	if u.stored != "" && u.stored != want {
		return fmt.Errorf("%w: the upload was damaged: CRC32 %s stored, %s sent", ckpterr.ErrCorrupt, u.stored, want)
	}
	return nil
}

// putObject uploads data as the object key in one PutObject, with its CRC32 for the
// service to check (tried once).
func (a *s3API) putObject(ctx context.Context, key string, data []byte, opts PutOptions) error {
	hdr := a.objectHeader(opts.Metadata)
	hdr.Set("X-Amz-Sdk-Checksum-Algorithm", "CRC32")
	hdr.Set("X-Amz-Checksum-Crc32", crcBase64(crc32.ChecksumIEEE(data)))
	if opts.IfAbsent {
		hdr.Set("If-None-Match", "*")
	}
	if data == nil {
		data = []byte{}
	}
	resp, err := a.do(ctx, http.MethodPut, a.url(key, nil), data, hdr)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// objectHeader are the headers of an object's creation: its type and metadata.
func (a *s3API) objectHeader(meta map[string]string) http.Header {
	hdr := http.Header{"Content-Type": {"application/octet-stream"}}
	for k, v := range meta {
		hdr.Set("X-Amz-Meta-"+k, v)
	}
	return hdr
}

// createMultipart starts a multipart upload of key whose parts carry CRC32s.
func (a *s3API) createMultipart(ctx context.Context, key string, meta map[string]string) (string, error) {
	hdr := a.objectHeader(meta)
	hdr.Set("X-Amz-Checksum-Algorithm", "CRC32")
	resp, err := a.do(ctx, http.MethodPost, a.url(key, url.Values{"uploads": {""}}), nil, hdr)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		UploadID string `xml:"UploadId"`
	}
	if err := xml.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil || out.UploadID == "" {
		return "", fmt.Errorf("the service started a multipart upload without its id (%v)", err)
	}
	return out.UploadID, nil
}

// uploadPart sends part number num of the upload id, with its CRC32 sum (base64), and
// returns its ETag.
func (a *s3API) uploadPart(ctx context.Context, key, id string, num int32, part []byte, sum string) (string, error) {
	hdr := http.Header{"X-Amz-Sdk-Checksum-Algorithm": {"CRC32"}, "X-Amz-Checksum-Crc32": {sum}}
	q := url.Values{"partNumber": {strconv.Itoa(int(num))}, "uploadId": {id}}
	resp, err := a.do(ctx, http.MethodPut, a.url(key, q), part, hdr)
	if err != nil {
		return "", err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.Header.Get("ETag"), nil
}

// completeMultipart makes the object of the upload id from its parts, and returns the
// object's CRC32 as the service reports it ("" when it does not).
func (a *s3API) completeMultipart(ctx context.Context, key, id string, parts []completedPart) (string, error) {
	body, err := xml.Marshal(struct {
		XMLName xml.Name        `xml:"CompleteMultipartUpload"`
		Parts   []completedPart `xml:"Part"`
	}{Parts: parts})
	if err != nil {
		return "", err
	}
	resp, err := a.do(ctx, http.MethodPost, a.url(key, url.Values{"uploadId": {id}}), body, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	// The service may answer 200 and report an error in the body.
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	var out struct {
		XMLName xml.Name
		CRC32   string `xml:"ChecksumCRC32"`
	}
	if err := xml.Unmarshal(b, &out); err != nil {
		return "", fmt.Errorf("the completion's answer: %w", err)
	}
	if out.XMLName.Local == "Error" {
		return "", s3Error(http.StatusInternalServerError, bytes.NewReader(b))
	}
	return out.CRC32, nil
}

// release returns the part being filled to the pool. u.bufMu is held.
func (u *s3Upload) release() {
	if u.buf != nil {
		putBuf(u.buf)
		u.buf, u.fill = nil, 0
	}
}

// Abort ends the upload: the parts in flight are cancelled, the part being filled goes
// back to the pool and, unless the object was completed, the multipart upload is
// aborted, so that the service drops the parts it holds. Output.Abort calls it for the
// uploads not closed.
func (u *s3Upload) Abort() {
	u.cancel() // a Write or Close waiting to send returns, and lets go of bufMu
	u.bufMu.Lock()
	u.release()
	u.bufMu.Unlock()
	u.wg.Wait()
	u.once.Do(func() {
		u.mu.Lock()
		completed := u.completed
		u.mu.Unlock()
		if !completed {
			u.abort()
		}
	})
}

// abort drops the multipart upload and the parts the service holds for it.
func (u *s3Upload) abort() {
	if u.id == "" {
		return
	}
	ctx := context.WithoutCancel(u.ctx)
	retry(ctx, func() error {
		resp, err := u.a.do(ctx, http.MethodDelete, u.a.url(u.key, url.Values{"uploadId": {u.id}}), nil, nil)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
}
