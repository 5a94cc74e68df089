package buckettest

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ckpt-dev/ckpt/formats/store/bucket"
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
	return b.WriteAll(ctx, l.Key, data, nil)
}
