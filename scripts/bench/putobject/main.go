// Command putobject uploads a local file to a gs:// or s3:// URL through the bucket
// package's upload path and nothing else — for S3 one multipart upload of
// bucket.UploadPart parts, bucket.UploadParallel in flight, each with its CRC32 and an
// unsigned payload: the floor an upload by ckpt to that server can reach
// (scripts/bench/bucket.sh runs it paired with the conversions). The file is read from the
// page cache in part-sized reads.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/ckpt-dev/ckpt/storage/bucket"
)

func main() {
	flag.Parse()
	if flag.NArg() != 2 {
		log.Fatal("usage: putobject LOCAL s3://bucket/key")
	}
	f, err := os.Open(flag.Arg(0))
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
	start := time.Now()
	w := b.NewWriter(ctx, l.Key, bucket.PutOptions{})
	n, err := io.CopyBuffer(w, f, make([]byte, bucket.UploadPart))
	if err != nil {
		w.Abort()
		log.Fatal(err)
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}
	s := time.Since(start).Seconds()
	fmt.Printf("%d bytes up in %.2f s: %.2f GB/s\n", n, s, float64(n)/s/1e9)
}
