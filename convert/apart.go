package convert

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ckpt-dev/ckpt/manifest"
	"github.com/ckpt-dev/ckpt/storage"
)

// checkApart refuses a destination that is the source, contains it or lies inside it:
// writing there could replace or delete the input, which ckpt never modifies whatever the
// flags. Paths are compared after resolving symbolic links (the destination, which may not
// exist yet, through its parent folder), and the same file reached by two names counts too.
func checkApart(src, dst string) error {
	if storage.IsRemote(src) || storage.IsRemote(dst) {
		s, d := strings.TrimSuffix(src, "/"), strings.TrimSuffix(dst, "/")
		switch {
		case s == d || s == d+"."+manifest.Name:
			return fmt.Errorf("%s: the destination is the source itself; ckpt never overwrites its input", dst)
		case strings.HasPrefix(s, d+"/"):
			return fmt.Errorf("%s: the destination contains the source %s; ckpt never overwrites its input", dst, src)
		case strings.HasPrefix(d, s+"/"):
			return fmt.Errorf("%s: the destination is inside the source folder %s; write it elsewhere", dst, src)
		}
		return nil
	}
	s, err := resolve(src)
	if err != nil {
		return err
	}
	d, err := resolve(dst)
	if err != nil {
		return err
	}
	switch {
	case s == d || sameFile(src, dst) || sameFile(src, manifest.PathFor(dst, false)):
		return fmt.Errorf("%s: the destination is the source itself; ckpt never overwrites its input", dst)
	case within(s, d):
		return fmt.Errorf("%s: the destination contains the source %s; ckpt never overwrites its input", dst, src)
	case within(d, s):
		return fmt.Errorf("%s: the destination is inside the source folder %s; write it elsewhere", dst, src)
	}
	return nil
}

// resolve returns the absolute path of p with symbolic links resolved; for a path that does
// not exist yet, its parent's resolved path joined with its name.
func resolve(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r, nil
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return abs, nil // the missing parent is reported when the output is created
	}
	return filepath.Join(parent, filepath.Base(abs)), nil
}

// within reports whether path p lies strictly inside folder dir.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

func sameFile(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}
