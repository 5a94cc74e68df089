package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

// TestInspectDTensorRanks: `ckpt inspect --json --hash` of a rank file of an FSDP2 over
// tensor parallelism save (testdata/dtensor/fsdp_tp) lists its folder's whole checkpoint,
// every tensor hashing as torch's full_tensor() does; one rank file without the others is
// refused naming the ranks missing.
func TestInspectDTensorRanks(t *testing.T) {
	var want struct {
		Tensors map[string]struct {
			Shape  []int64 `json:"shape"`
			SHA256 string  `json:"sha256"`
		} `json:"tensors"`
	}
	b, err := os.ReadFile("../../testdata/dtensor/fsdp_tp.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "inspect", "--json", "--hash", "../../testdata/dtensor/fsdp_tp/rank2.pt")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Format  string `json:"format"`
		Tensors []struct {
			Name   string `json:"name"`
			SHA256 string `json:"sha256"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Format != "dtensor-ranks" || len(got.Tensors) != len(want.Tensors) {
		t.Fatalf("format %q, %d tensors; want dtensor-ranks, %d", got.Format, len(got.Tensors), len(want.Tensors))
	}
	for _, x := range got.Tensors {
		if w := want.Tensors[x.Name]; x.SHA256 != w.SHA256 {
			t.Errorf("%s: sha256 %s, torch's full_tensor() %q", x.Name, x.SHA256, w.SHA256)
		}
	}

	dir := t.TempDir()
	src, err := os.ReadFile("../../testdata/dtensor/fsdp_tp/rank2.pt")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rank2.pt"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = run(t, "inspect", filepath.Join(dir, "rank2.pt"))
	if !errors.Is(err, ckpterr.ErrCorrupt) || !strings.Contains(err.Error(), "the files of rank 0, 1, 3 are missing") {
		t.Fatalf("a lone rank file: %v", err)
	}
}
