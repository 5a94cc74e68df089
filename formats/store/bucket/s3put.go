package bucket

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ckpt-dev/ckpt/statedict"
)

// Uploads to S3 go through the S3 client itself rather than gocloud.dev/blob's writer
// (the SDK's transfer manager), which costs a conversion more than the bytes: it allocates
// its part buffers on the Go heap for every object (concurrency+1 parts, 80 MiB for 16 MiB
// parts and 4 in flight, before the first byte is sent), reads the first part through a
// growing io.ReadAll, copies every byte through a pipe, and over plain HTTP (emulators,
// S3-compatible stores on a private network) hashes every part twice, CRC32 and SHA-256.
// BENCHMARKS.md "Buckets" has the profiles.
//
// Here an object's bytes are copied once, into a part buffer of anonymous memory outside
// the Go heap, reused through the same size-class pool as the read side's blocks (getBuf);
// a full part is sent by a goroutine while the next one fills, at most UploadParallel
// parts in flight in the process. Each part's CRC32 is computed once, as it is sent, and
// sent as the part's checksum, which S3 verifies before accepting the part; the payload is
// not hashed a second time for the request signature (UNSIGNED-PAYLOAD, what the SDK
// sends over HTTPS anyway). The object's composite CRC32, when the service reports it, is
// compared with the parts' after completion. CRC32 (not CRC32C) is the SDK's default, so
// an object's checksum is of one kind whichever client wrote it (gofakes3 keeps an
// object's checksum header when another client overwrites it with another kind's). Every
// request is retried by retry (the client's own retries are off): a part's bytes stay in
// hand until it is stored.
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

// unsigned makes a request's payload unsigned: its integrity is the CRC32 checksum the
// request carries, which the service verifies.
func unsigned(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
}

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
	c      *s3.Client
	bucket string
	key    string
	meta   map[string]string
	ifNone bool // PutObject only if no object has the key

	// bufMu is held by Write and Close while they use the part being filled, and by stop
	// to return it: an Output may be aborted from another goroutine (a signal).
	bufMu sync.Mutex
	buf   []byte // the part being filled, from getBuf
	fill  int
	next  int32 // number of the part being filled

	id *string // the multipart upload, once its first part is full
	wg sync.WaitGroup

	mu        sync.Mutex
	parts     []types.CompletedPart // by part number - 1
	err       error
	completed bool   // the multipart upload was completed
	stored    string // the object's CRC32 as the service reports it
	once      sync.Once
}

func newS3Upload(ctx context.Context, c *s3.Client, bucket, key string, meta map[string]string) *s3Upload {
	u := &s3Upload{c: c, bucket: bucket, key: key, meta: meta, next: 1}
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
	if u.id == nil {
		var out *s3.CreateMultipartUploadOutput
		err := retry(u.ctx, func() error {
			var err error
			out, err = u.c.CreateMultipartUpload(u.ctx, &s3.CreateMultipartUploadInput{
				Bucket: &u.bucket, Key: &u.key, Metadata: u.meta,
				ContentType:       aws.String("application/octet-stream"),
				ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
			})
			return err
		})
		if err != nil {
			u.fail(err)
			return err
		}
		u.id = out.UploadId
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
		var out *s3.UploadPartOutput
		err := retry(u.ctx, func() error {
			var err error
			out, err = u.c.UploadPart(u.ctx, &s3.UploadPartInput{
				Bucket: &u.bucket, Key: &u.key, UploadId: u.id, PartNumber: aws.Int32(num),
				Body: bytes.NewReader(part), ContentLength: aws.Int64(int64(len(part))),
				ChecksumAlgorithm: types.ChecksumAlgorithmCrc32, ChecksumCRC32: &sum,
			}, unsigned)
			return err
		})
		if err != nil {
			u.fail(fmt.Errorf("part %d: %w", num, err))
			return
		}
		u.mu.Lock()
		for int(num) > len(u.parts) {
			u.parts = append(u.parts, types.CompletedPart{})
		}
		u.parts[num-1] = types.CompletedPart{PartNumber: aws.Int32(num), ETag: out.ETag, ChecksumCRC32: &sum}
		u.mu.Unlock()
	}()
	return nil
}

// Close sends what is left and completes the object: one PutObject for an object smaller
// than a part, else the last part and the completion of the multipart upload. A failed
// upload is stopped (its multipart upload aborted) before Close returns.
func (u *s3Upload) Close() error {
	u.bufMu.Lock()
	if u.id == nil && u.failed() == nil {
		data := u.buf[:u.fill]
		sum := crcBase64(crc32.ChecksumIEEE(data))
		in := &s3.PutObjectInput{
			Bucket: &u.bucket, Key: &u.key, Metadata: u.meta,
			ContentType:       aws.String("application/octet-stream"),
			ContentLength:     aws.Int64(int64(len(data))),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32, ChecksumCRC32: &sum,
		}
		if u.ifNone {
			in.IfNoneMatch = aws.String("*")
		}
		err := retry(u.ctx, func() error {
			in.Body = bytes.NewReader(data)
			_, err := u.c.PutObject(u.ctx, in, unsigned)
			return err
		})
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
			out, err := u.c.CompleteMultipartUpload(u.ctx, &s3.CompleteMultipartUploadInput{
				Bucket: &u.bucket, Key: &u.key, UploadId: u.id,
				MultipartUpload: &types.CompletedMultipartUpload{Parts: u.parts},
			})
			if err == nil {
				u.mu.Lock()
				u.completed = true
				u.mu.Unlock()
				u.stored = aws.ToString(out.ChecksumCRC32)
			}
			return err
		})
	}
	u.stop()
	if err != nil {
		return err
	}
	// S3's checksum of a multipart object is the CRC32 of its parts' CRC32s, "-parts".
	var crcs []byte
	for _, p := range u.parts {
		b, _ := base64.StdEncoding.DecodeString(*p.ChecksumCRC32)
		crcs = append(crcs, b...)
	}
	want := fmt.Sprintf("%s-%d", crcBase64(crc32.ChecksumIEEE(crcs)), len(u.parts))
	if u.stored != "" && u.stored != want {
		return fmt.Errorf("%w: the upload was damaged: CRC32 %s stored, %s sent", statedict.ErrCorrupt, u.stored, want)
	}
	return nil
}

// release returns the part being filled to the pool. u.bufMu is held.
func (u *s3Upload) release() {
	if u.buf != nil {
		putBuf(u.buf)
		u.buf, u.fill = nil, 0
	}
}

// stop ends the upload: the parts in flight are cancelled, the part being filled goes
// back to the pool and, unless the object was completed, the multipart upload is
// aborted, so that the service drops the parts it holds. Output.Abort calls it for the
// uploads not closed.
func (u *s3Upload) stop() {
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
	if u.id == nil {
		return
	}
	ctx := context.WithoutCancel(u.ctx)
	retry(ctx, func() error {
		_, err := u.c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &u.bucket, Key: &u.key, UploadId: u.id})
		return err
	})
}
