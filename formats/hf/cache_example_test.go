package hf_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/hf"
)

// A repository id resolves to its snapshot in the local hub cache, by branch, tag or
// commit; nothing is downloaded.
func ExampleSnapshot() {
	cache, _ := os.MkdirTemp("", "hub")
	defer os.RemoveAll(cache)
	commit := strings.Repeat("ab", 20)
	repo := filepath.Join(cache, "models--Qwen--Qwen3-0.6B")
	os.MkdirAll(filepath.Join(repo, "snapshots", commit), 0o755)
	os.MkdirAll(filepath.Join(repo, "refs"), 0o755)
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644)

	id, _ := hf.ParseRepoID("Qwen/Qwen3-0.6B")
	dir, err := hf.Snapshot(cache, id)
	fmt.Println(strings.TrimPrefix(dir, cache), err)
	id, _ = hf.ParseRepoID("Qwen/Qwen3-8B@main")
	_, err = hf.Snapshot(cache, id)
	fmt.Println(strings.Contains(err.Error(), "hf download Qwen/Qwen3-8B --revision main"))
	// Output:
	// /models--Qwen--Qwen3-0.6B/snapshots/abababababababababababababababababababab <nil>
	// true
}
