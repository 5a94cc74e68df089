package bucket_test

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/buckettest"
	"github.com/ckpt-dev/ckpt/scan"
	"github.com/ckpt-dev/ckpt/storage"
)

// TestKeysThatAreNoPaths (issue 29, class 7): an object whose key has an empty, "." or ".."
// element under a checkpoint folder — planted by anyone who can write to the bucket — is
// refused by name wherever the folder is listed: scan's walk and the folder readers end
// with an error naming the key instead of recursing forever (the folder joined with "."
// is the folder again) or climbing out of the prefix (".."). Run on GCS and S3.
func TestKeysThatAreNoPaths(t *testing.T) {
	buckettest.Start(t, "ckpt")
	ctx := context.Background()
	planted := []string{"./x", "../x", "/x", "sub/./y", "sub/../../z", "sub//y", ".", "..", "sub/."}
	for _, scheme := range []string{"gs", "s3"} {
		for i, bad := range planted {
			dir := "loops/" + strconv.Itoa(i) + "/hf"
			url := scheme + "://ckpt/" + dir
			if err := buckettest.PutTree(ctx, filepath.Join("../../testdata", "hf/mistral_sharded"), url); err != nil {
				t.Fatal(err)
			}
			key := dir + "/" + bad
			putObject(t, scheme, key, "planted")
			// The error names the key through its first bad element: the planted object,
			// or the subfolder a listing shows for it.
			els := strings.Split(bad, "/")
			first := 0
			for els[first] != "" && els[first] != "." && els[first] != ".." {
				first++
			}
			named := dir + "/" + strings.Join(els[:first+1], "/")
			if first < len(els)-1 {
				named += "/"
			}
			for _, op := range []struct {
				name string
				run  func() error
			}{
				{"scan", func() error { _, err := scan.Scan(context.Background(), url); return err }},
				{"open", func() error {
					ck, err := formats.Open(context.Background(), url)
					if err == nil {
						ck.Close()
					}
					return err
				}},
				{"walk", func() error {
					return storage.WalkDir(context.Background(), url, func(_ string, _ fs.DirEntry, err error) error { return err })
				}},
			} {
				done := make(chan error, 1)
				go func() { done <- op.run() }()
				select {
				case err := <-done:
					if op.name == "open" && err == nil {
						continue // the reader never listed the planted key's folder
					}
					if !errors.Is(err, ckpterr.ErrUnsupported) || !strings.Contains(err.Error(), strconv.Quote(named)) {
						t.Errorf("%s %s with %q planted: %v, want an error naming %q", op.name, url, key, err, named)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("%s %s with %q planted: still running after 30 s", op.name, url, key)
				}
			}
		}
	}
}
