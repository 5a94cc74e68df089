package hf

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/internal/regular"
)

// The local Hugging Face hub cache, as huggingface_hub lays it out:
//
//	<cache>/models--ORG--NAME/refs/<branch or tag>   → a file holding a commit hash
//	<cache>/models--ORG--NAME/snapshots/<commit>/…   → the files, links into ../../blobs/
//
// Only the cache is read: nothing is downloaded.

// CacheDir is the hub cache folder: $HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub.
func CacheDir() string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "~"
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// RepoID is a model repository of the Hub and a revision ("" for main).
type RepoID struct {
	Org, Name, Revision string
}

func (r RepoID) String() string {
	s := r.Org + "/" + r.Name
	if r.Revision != "" {
		s += "@" + r.Revision
	}
	return s
}

// ParseRepoID reads ORG/NAME or ORG/NAME@REVISION (a branch, a tag or a commit hash). It
// is strict — the characters the Hub allows, no "--" or ".." — so that the id maps to
// exactly one cache folder and a revision to a file under refs/.
func ParseRepoID(s string) (RepoID, bool) {
	id, rev, _ := strings.Cut(s, "@")
	org, name, ok := strings.Cut(id, "/")
	if !ok || !repoPart(org) || !repoPart(name) {
		return RepoID{}, false
	}
	if strings.Contains(s, "@") {
		if rev == "" || len(rev) > 256 || strings.HasPrefix(rev, "/") || strings.HasSuffix(rev, "/") || strings.Contains(rev, "..") || strings.Contains(rev, "//") {
			return RepoID{}, false
		}
		for _, c := range rev {
			if !alnum(c) && !strings.ContainsRune("._-/", c) {
				return RepoID{}, false
			}
		}
	}
	return RepoID{Org: org, Name: name, Revision: rev}, true
}

func repoPart(s string) bool {
	if s == "" || len(s) > 96 || strings.Contains(s, "--") || strings.Contains(s, "..") || !alnum(rune(s[0])) {
		return false
	}
	for _, c := range s {
		if !alnum(c) && !strings.ContainsRune("._-", c) {
			return false
		}
	}
	return true
}

func alnum(c rune) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }

// isCommit reports whether s is a full commit hash.
func isCommit(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// ParseRef reads the content of a refs/ file: a commit hash, possibly followed by a
// newline.
func ParseRef(b []byte) (string, bool) {
	s := strings.TrimRight(string(b), "\r\n")
	return s, isCommit(s)
}

// maxRef bounds a refs/ file: a 40-digit commit hash and a newline.
const maxRef = 256

// ErrNotCached is returned for a repository or revision the cache does not hold.
var ErrNotCached = fmt.Errorf("not in the local Hugging Face cache: %w", fs.ErrNotExist)

// Snapshot returns the snapshot folder of id in the hub cache at cache: refs/<revision>
// (main when none is given) names the commit; a commit hash names the snapshot directly.
// When the cache lacks it the error says how to download it.
func Snapshot(cache string, id RepoID) (string, error) {
	repo := filepath.Join(cache, "models--"+id.Org+"--"+id.Name)
	rev := id.Revision
	if rev == "" {
		rev = "main"
	}
	missing := func(what string) error {
		cmd := "hf download " + id.Org + "/" + id.Name
		if id.Revision != "" {
			cmd += " --revision " + id.Revision
		}
		return fmt.Errorf("%s: %w (%s, looked in %s): download it with `%s`, or give a local path", id, ErrNotCached, what, cache, cmd)
	}
	commit := rev
	if !isCommit(rev) {
		ref := filepath.Join(repo, "refs", filepath.FromSlash(rev))
		b, err := regular.ReadFile(ref, maxRef)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", missing("no refs/" + rev)
			}
			return "", err
		}
		var ok bool
		// What the file holds is not repeated: a ref that is not a hash may be anything (a
		// link to a secret).
		if commit, ok = ParseRef(b); !ok {
			return "", fmt.Errorf("%s: %w: it does not hold a commit hash (%d bytes)", ref, ckpterr.ErrCorrupt, len(b))
		}
	}
	dir := filepath.Join(repo, "snapshots", commit)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", missing("no snapshot " + commit)
	}
	return dir, nil
}
