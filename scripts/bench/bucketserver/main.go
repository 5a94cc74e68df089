//go:build unix

// Command bucketserver serves a GCS emulator on loopback for scripts/bench/bucket.sh: the
// objects live in a folder, so a 2 GiB source streams from disk. It writes its host:port
// and an S3 server's URL (gofakes3; multipart uploads discarded, see discarding) to -addr, uploads each -put LOCAL=gs://bucket/key first, counts the object bytes it serves
// (SIGUSR2 resets the count, SIGUSR1 writes "bytes requests" to -stats) and runs until
// SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/ckpt-dev/ckpt/internal/buckettest"
	"github.com/ckpt-dev/ckpt/internal/mmap"
	"github.com/ckpt-dev/ckpt/storage/bucket"
)

func main() {
	root := flag.String("root", ".bench/gcs", "folder holding the objects")
	bucket := flag.String("bucket", "bench", "bucket to create")
	addr := flag.String("addr", ".bench/gcs.addr", "file to write host:port to")
	stats := flag.String("stats", ".bench/gcs.stats", "file SIGUSR1 writes the served bytes to")
	keep := flag.Bool("s3-keep", false, "keep the bytes of multipart uploads (gofakes3's in-memory backend) instead of discarding them")
	var puts []string
	flag.Func("put", "LOCAL=gs://bucket/key to upload before serving (repeatable)", func(s string) error {
		puts = append(puts, s)
		return nil
	})
	flag.Parse()
	if err := os.MkdirAll(*root, 0o755); err != nil {
		log.Fatal(err)
	}
	srv, err := buckettest.Serve(func(url string) (http.Handler, error) {
		fake, err := fakestorage.NewServerWithOptions(fakestorage.Options{
			NoListener: true, Scheme: "http", ExternalURL: url, PublicHost: strings.TrimPrefix(url, "http://"), Writer: io.Discard, StorageRoot: *root,
		})
		if err != nil {
			return nil, err
		}
		fake.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: *bucket})
		return fake.HTTPHandler(), nil
	})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	os.Setenv("STORAGE_EMULATOR_HOST", srv.Host)
	for _, put := range puts {
		if local, url, ok := strings.Cut(put, "="); ok {
			if err := upload(local, url); err != nil {
				log.Fatal(err)
			}
		}
	}
	// The emulator holds each uploaded object in memory while it stores it: gigabytes of
	// heap that the runtime would otherwise hand back to the system bit by bit while the
	// benchmark runs. Hand it back now, before anything is measured.
	debug.FreeOSMemory()
	// The upload destination: fake-gcs-server re-hashes the whole object at every chunk
	// of a resumable upload (quadratic in the size), so uploads go to an S3 server, whose
	// multipart uploads are linear; its parts are discarded (discarding) unless -s3-keep.
	var backend gofakes3.Backend = newDiscarding()
	if *keep {
		backend = s3mem.New()
	}
	if err := backend.CreateBucket(*bucket); err != nil {
		log.Fatal(err)
	}
	s3, err := buckettest.Serve(func(string) (http.Handler, error) {
		return gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server(), nil
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s3.Close()
	if err := os.WriteFile(*addr, []byte(srv.Host+" "+s3.URL), 0o644); err != nil {
		log.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM, os.Interrupt)
	for s := range sigs {
		switch s {
		case syscall.SIGUSR1:
			os.WriteFile(*stats, fmt.Appendf(nil, "%d %d\n", srv.Served.Load(), srv.Requests.Load()), 0o644)
		case syscall.SIGUSR2:
			srv.Served.Store(0)
			srv.Requests.Store(0)
		default:
			return
		}
	}
}

// upload sends the file local to url in one request (the emulator rewrites a file for
// every chunk of a resumable upload, which is slow for gigabytes), from its mapping.
func upload(local, url string) error {
	l, err := bucket.Parse(url)
	if err != nil {
		return err
	}
	ctx := context.Background()
	b, err := bucket.Default.Bucket(ctx, l)
	if err != nil {
		return err
	}
	m, err := mmap.Open(local)
	if err != nil {
		return err
	}
	defer m.Close()
	return b.Put(ctx, l.Key, m.Bytes(), bucket.PutOptions{})
}
