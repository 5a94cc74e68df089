package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hubCache lays the folder src out as huggingface_hub caches a download of org/name at
// commit: blobs named by content hash, a snapshot of links to them, refs/main and
// refs/<tag> naming the commit.
func hubCache(t *testing.T, src, org, name, commit, tag string) string {
	t.Helper()
	cache := t.TempDir()
	repo := filepath.Join(cache, "models--"+org+"--"+name)
	snap := filepath.Join(repo, "snapshots", commit)
	for _, d := range []string{filepath.Join(repo, "blobs"), filepath.Join(repo, "refs"), snap} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		blob := fmt.Sprintf("%x", sha256.Sum256(b))
		os.WriteFile(filepath.Join(repo, "blobs", blob), b, 0o644)
		if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(snap, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	for _, ref := range []string{"main", tag} {
		os.WriteFile(filepath.Join(repo, "refs", ref), []byte(commit), 0o644)
	}
	return cache
}

// TestHubCacheRepoID: ORG/NAME[@REVISION] reads the snapshot of the local Hugging Face
// cache — by refs/main, a tag or a commit hash — as the folder itself reads; a repository
// or revision not cached is a not-found error that says how to download it.
func TestHubCacheRepoID(t *testing.T) {
	src := "../../testdata/hf/mistral_sharded"
	commit := strings.Repeat("0123456789", 4)
	cache := hubCache(t, src, "mistral-org", "Tiny-Mistral", commit, "v1.0")
	t.Setenv("HF_HUB_CACHE", cache)
	want, err := run(t, "inspect", "--json", src)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"mistral-org/Tiny-Mistral", "mistral-org/Tiny-Mistral@v1.0", "mistral-org/Tiny-Mistral@" + commit} {
		got, err := run(t, "inspect", "--json", id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if !sameJSON(want, got) {
			t.Errorf("%s reads differently from the folder", id)
		}
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := run(t, "convert", "--to", "tpu", "mistral-org/Tiny-Mistral", out); err != nil {
		t.Errorf("convert from the cache: %v", err)
	}
	if _, err := run(t, "verify", "mistral-org/Tiny-Mistral", out); err != nil {
		t.Errorf("verify from the cache: %v", err)
	}
	// verify's DST is a conversion's output, never looked up in the hub cache.
	if _, err := run(t, "verify", out, "mistral-org/Tiny-Mistral"); err == nil || strings.Contains(err.Error(), "hf download") || strings.Contains(err.Error(), "snapshot") {
		t.Errorf("verify into a repository id: %v, want the path mistral-org/Tiny-Mistral not found", err)
	}
	for id, hint := range map[string]string{
		"mistral-org/Other":                                   "hf download mistral-org/Other",
		"mistral-org/Tiny-Mistral@v2.0":                       "hf download mistral-org/Tiny-Mistral --revision v2.0",
		"mistral-org/Tiny-Mistral@" + strings.Repeat("f", 40): "no snapshot",
	} {
		_, err := run(t, "inspect", "--json", id)
		if err == nil || !strings.Contains(err.Error(), hint) || errorKind(err) != "not_found" {
			t.Errorf("%s: %v, want a not-found error saying %q", id, err, hint)
		}
	}
	// HF_HOME/hub is the cache when HF_HUB_CACHE is not set.
	t.Setenv("HF_HUB_CACHE", "")
	home := t.TempDir()
	os.Symlink(cache, filepath.Join(home, "hub"))
	t.Setenv("HF_HOME", home)
	if _, err := run(t, "inspect", "mistral-org/Tiny-Mistral"); err != nil {
		t.Errorf("HF_HOME/hub: %v", err)
	}
}
