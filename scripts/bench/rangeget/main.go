// Command rangeget reads an object of gs:// or s3:// in ranged GETs of -block bytes, -p
// at a time, through the same client ckpt uses, and discards the bytes: the floor a
// conversion from that server can reach (scripts/bench/bucket.sh compares with it).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/ckpt-dev/ckpt/storage/bucket"
)

func main() {
	block := flag.Int64("block", bucket.BlockSize, "bytes per request")
	par := flag.Int("p", 4, "requests in flight")
	flag.Parse()
	if flag.NArg() != 1 {
		log.Fatal("usage: rangeget [-block N] [-p N] gs://bucket/key")
	}
	l, err := bucket.Parse(flag.Arg(0))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	b, err := bucket.Default.Bucket(ctx, l)
	if err != nil {
		log.Fatal(err)
	}
	attrs, err := b.Attributes(ctx, l.Key)
	if err != nil {
		log.Fatal(err)
	}
	size := attrs.Size
	offs := make(chan int64)
	go func() {
		for off := int64(0); off < size; off += *block {
			offs <- off
		}
		close(offs)
	}()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range *par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, *block)
			for off := range offs {
				if err := b.ReadRange(ctx, l.Key, buf[:min(*block, size-off)], off); err != nil {
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
	s := time.Since(start).Seconds()
	fmt.Fprintf(os.Stdout, "%d bytes in %.2f s: %.2f GB/s (%d-byte requests, %d in flight)\n", size, s, float64(size)/s/1e9, *block, *par)
}
