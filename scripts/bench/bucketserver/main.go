//go:build unix

// Command bucketserver serves a GCS emulator on loopback for scripts/bench/bucket.sh: the
// objects live in a folder, so a 2 GiB source streams from disk. It writes its host:port
// to -addr, uploads -put LOCAL=gs://bucket/key first, counts the object bytes it serves
// (SIGUSR2 resets the count, SIGUSR1 writes "bytes requests" to -stats) and runs until
// SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/ckpt-dev/ckpt/internal/buckettest"
)

func main() {
	root := flag.String("root", ".bench/gcs", "folder holding the objects")
	bucket := flag.String("bucket", "bench", "bucket to create")
	addr := flag.String("addr", ".bench/gcs.addr", "file to write host:port to")
	stats := flag.String("stats", ".bench/gcs.stats", "file SIGUSR1 writes the served bytes to")
	put := flag.String("put", "", "LOCAL=gs://bucket/key to upload before serving")
	flag.Parse()
	if err := os.MkdirAll(*root, 0o755); err != nil {
		log.Fatal(err)
	}
	srv, err := buckettest.GCSIn(*root, *bucket)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	os.Setenv("STORAGE_EMULATOR_HOST", srv.Host)
	if local, url, ok := strings.Cut(*put, "="); ok {
		if err := buckettest.PutTree(context.Background(), local, url); err != nil {
			log.Fatal(err)
		}
	}
	if err := os.WriteFile(*addr, []byte(srv.Host), 0o644); err != nil {
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
