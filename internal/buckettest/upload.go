package buckettest

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/storage/bucket"
)

// PutTree uploads the file or folder at local to the gs:// or s3:// URL dst (a folder's
// files under dst/, keeping their relative paths; links followed).
func PutTree(ctx context.Context, local, dst string) error {
	st, err := os.Stat(local)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return put(ctx, local, dst)
	}
	return filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(local, p)
		return put(ctx, p, dst+"/"+filepath.ToSlash(rel))
	})
}

func put(ctx context.Context, local, dst string) error {
	l, err := bucket.Parse(dst)
	if err != nil {
		return err
	}
	b, err := bucket.Default.Bucket(ctx, l)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(local)
	if err != nil {
		return err
	}
	return b.Put(ctx, l.Key, data, bucket.PutOptions{})
}

// GetTree downloads every object under the gs:// or s3:// prefix src (or the object src)
// into the folder (or file) local, and returns the names relative to src.
func GetTree(ctx context.Context, src, local string) ([]string, error) {
	l, err := bucket.Parse(src)
	if err != nil {
		return nil, err
	}
	b, err := bucket.Default.Bucket(ctx, l)
	if err != nil {
		return nil, err
	}
	if data, err := b.ReadAll(ctx, l.Key, math.MaxInt64); err == nil {
		return []string{""}, os.WriteFile(local, data, 0o644)
	}
	objs, err := b.List(ctx, l.Key+"/", "")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, l.Key+"/")
		if !fs.ValidPath(rel) {
			return nil, fmt.Errorf("%s: the key %q names no file under the prefix", src, o.Key)
		}
		data, err := b.ReadAll(ctx, o.Key, math.MaxInt64)
		if err != nil {
			return nil, err
		}
		p := filepath.Join(local, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return nil, err
		}
		names = append(names, rel)
	}
	return names, nil
}

// Start starts a GCS emulator and an S3 server with the bucket name each, points the
// clients of this process at them (the environment and bucket.Default) for the rest of the
// test, and stops them when it ends.
func Start(t testing.TB, name string) (gcs, s3 *Server) {
	t.Helper()
	var err error
	if gcs, err = GCS(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gcs.Close)
	if s3, err = S3(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s3.Close)
	for _, kv := range Env(gcs, s3) {
		t.Setenv(kv[0], kv[1])
	}
	bucket.Default.Close() // clients made for other servers
	t.Cleanup(func() { bucket.Default.Close() })
	return gcs, s3
}
