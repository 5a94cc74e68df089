// Command putobject uploads a local file to an s3:// URL as one multipart upload — parts
// of bucket.UploadPart bytes, -p at a time, each with its CRC32 and an unsigned payload —
// through the S3 client ckpt uses, and nothing else: the floor an upload by ckpt to that
// server can reach (scripts/bench/bucket.sh runs it paired with the conversions). The
// file is read into reused part buffers from the page cache.
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"log"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ckpt-dev/ckpt/formats/store/bucket"
)

func main() {
	part := flag.Int64("part", bucket.UploadPart, "bytes per part")
	par := flag.Int("p", bucket.UploadParallel, "parts in flight")
	flag.Parse()
	if flag.NArg() != 2 {
		log.Fatal("usage: putobject [-part N] [-p N] LOCAL s3://bucket/key")
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		log.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		log.Fatal(err)
	}
	l, err := bucket.Parse(flag.Arg(1))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	b, err := bucket.Default.Bucket(ctx, l)
	if err != nil {
		log.Fatal(err)
	}
	var c *s3.Client
	if !b.As(&c) {
		log.Fatal("not an S3 bucket")
	}
	unsigned := func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
	}
	start := time.Now()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &l.Bucket, Key: &l.Key, ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
	if err != nil {
		log.Fatal(err)
	}
	size := st.Size()
	nparts := int((size + *part - 1) / *part)
	parts := make([]types.CompletedPart, nparts)
	nums := make(chan int)
	go func() {
		for i := range nparts {
			nums <- i
		}
		close(nums)
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range *par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, *part)
			for i := range nums {
				off := int64(i) * *part
				p := buf[:min(*part, size-off)]
				_, err := f.ReadAt(p, off)
				if err == nil || err == io.EOF {
					sum := base64.StdEncoding.EncodeToString(binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE(p)))
					var out *s3.UploadPartOutput
					out, err = c.UploadPart(ctx, &s3.UploadPartInput{
						Bucket: &l.Bucket, Key: &l.Key, UploadId: up.UploadId, PartNumber: aws.Int32(int32(i + 1)),
						Body: bytes.NewReader(p), ContentLength: aws.Int64(int64(len(p))),
						ChecksumAlgorithm: types.ChecksumAlgorithmCrc32, ChecksumCRC32: &sum,
					}, unsigned)
					if err == nil {
						parts[i] = types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.ETag, ChecksumCRC32: &sum}
					}
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		log.Fatal(firstErr)
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &l.Bucket, Key: &l.Key, UploadId: up.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}); err != nil {
		log.Fatal(err)
	}
	s := time.Since(start).Seconds()
	fmt.Printf("%d bytes up in %.2f s: %.2f GB/s (%d-byte parts, %d in flight)\n", size, s, float64(size)/s/1e9, *part, *par)
}
