package hf

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/internal/regular"
	"github.com/ckpt-dev/ckpt/storage"
)

// Folder gives read access to the files of a checkpoint folder, confined to it: a file, or
// a symbolic link that resolves inside the folder — or, for a snapshot of the Hugging Face
// hub cache (…/models--org--name/snapshots/<rev>/, whose files are links to ../../blobs/),
// inside that repository's blobs/ folder. A link leading anywhere else (a
// tokenizer_config.json pointing at /home/user/secret.txt) is refused, so its target is
// never read or copied into an output. It implements fs.FS.
type Folder struct {
	dir   string   // the folder as given
	real  string   // its resolved path
	blobs string   // the hub cache blobs/ folder links may lead into, or ""
	root  *os.Root // the folder (or, for a hub snapshot, its repository) opened confined
	sub   string   // the folder's path inside root ("" or "snapshots/<rev>")
	// remote is the folder of a gs:// or s3:// path: objects have no links, so every
	// object under the prefix is confined.
	remote fs.FS
	// ctx cancels the remote folder's reads (fs.FS methods take none).
	ctx context.Context
}

// OpenFolder opens dir for confined reading; ctx cancels a remote folder's reads. Close
// releases it.
func OpenFolder(ctx context.Context, dir string) (*Folder, error) {
	if storage.IsRemote(dir) {
		return &Folder{ctx: ctx, dir: dir, real: dir, remote: storage.Sub(ctx, dir)}, nil
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	f := &Folder{dir: dir, real: real}
	rootDir := real
	if parent := filepath.Dir(real); filepath.Base(parent) == "snapshots" {
		repo := filepath.Dir(parent)
		if st, err := os.Stat(filepath.Join(repo, "blobs")); err == nil && st.IsDir() {
			f.blobs = filepath.Join(repo, "blobs")
			rootDir = repo
			f.sub = path.Join("snapshots", filepath.Base(real))
		}
	}
	if f.root, err = os.OpenRoot(rootDir); err != nil {
		return nil, err
	}
	return f, nil
}

// Close releases the folder.
func (f *Folder) Close() error {
	if f.root == nil {
		return nil
	}
	return f.root.Close()
}

// Confined reports whether name (a path relative to the folder: a file or a subfolder)
// resolves to a place the folder may be read from; a missing one is not confined.
func (f *Folder) Confined(name string) bool {
	if f.remote != nil { // objects have no links: what exists under the prefix is confined
		if !fs.ValidPath(name) {
			return false
		}
		_, err := storage.Stat(f.ctx, storage.Join(f.dir, name))
		return err == nil
	}
	real, err := filepath.EvalSymlinks(filepath.Join(f.real, filepath.FromSlash(name)))
	if err != nil {
		return false
	}
	return inside(real, f.real) || f.blobs != "" && inside(real, f.blobs)
}

// Open opens name (slash-separated, relative to the folder) if it is confined and a
// regular file (package regular: a FIFO or device is refused, never waited on).
func (f *Folder) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if f.remote != nil { // objects have no links; a missing one is fs.ErrNotExist
		return f.remote.Open(name)
	}
	if !f.Confined(name) {
		return nil, &fs.PathError{Op: "open", Path: storage.Join(f.dir, name), Err: ErrOutside}
	}
	file, _, err := regular.OpenIn(f.root, path.Join(f.sub, name))
	if err != nil {
		return nil, err
	}
	return file, nil
}

// ErrOutside is returned for a file whose link leads outside the checkpoint folder.
var ErrOutside = fmt.Errorf("a link leading outside the checkpoint folder (not read)")

// inside reports whether p is dir or lies inside it.
func inside(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// FilesUnder lists the regular files under the subfolder name of dir (local or in a
// bucket), by their slash-separated paths relative to dir, sorted.
func FilesUnder(ctx context.Context, dir, name string) ([]string, error) {
	var out []string
	err := storage.WalkDir(ctx, storage.Join(dir, name), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}
