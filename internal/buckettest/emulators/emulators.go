// Package emulators registers the bucket emulators buckettest's servers run —
// fake-gcs-server and gofakes3 — when imported. Test files import it (blank) and nothing
// else does, so that no build of ckpt links the emulators (.ci/run checks it; see
// buckettest.Use).
package emulators

import (
	"io"
	"net/http"
	"strings"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/ckpt-dev/ckpt/internal/buckettest"
)

func init() { buckettest.Use(buckettest.Emulators{GCS: fakeGCS, S3: fakeS3}) }

func fakeGCS(url, root string, buckets []string) (http.Handler, error) {
	fake, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		NoListener: true, Scheme: "http", ExternalURL: url, PublicHost: strings.TrimPrefix(url, "http://"), Writer: io.Discard, StorageRoot: root,
	})
	if err != nil {
		return nil, err
	}
	for _, b := range buckets {
		fake.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: b})
	}
	return fake.HTTPHandler(), nil
}

func fakeS3(buckets []string) (http.Handler, error) {
	backend := s3mem.New()
	for _, b := range buckets {
		if err := backend.CreateBucket(b); err != nil {
			return nil, err
		}
	}
	return gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server(), nil
}
