package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sparseSafetensors writes a safetensors file of n float32 tensors of size bytes each,
// sparse (no disk used): reading it faults in or reads size·n bytes all the same.
func sparseF32(t *testing.T, path string, n int, size int64) []string {
	t.Helper()
	var hdr strings.Builder
	var names []string
	hdr.WriteString("{")
	for i := range n {
		if i > 0 {
			hdr.WriteString(",")
		}
		name := fmt.Sprintf("w%02d", i)
		names = append(names, name)
		fmt.Fprintf(&hdr, `%q:{"dtype":"F32","shape":[%d],"data_offsets":[%d,%d]}`, name, size/4, int64(i)*size, int64(i+1)*size)
	}
	hdr.WriteString("}")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	binary.Write(f, binary.LittleEndian, uint64(hdr.Len()))
	f.WriteString(hdr.String())
	if err := f.Truncate(int64(8+hdr.Len()) + int64(n)*size); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestFullReadsStayBounded runs every command that reads whole tensors over a 2 GiB
// checkpoint — eight times the window any of them may keep resident — and checks the
// process's peak RSS (issue 17): inspect --hash, check.
func TestFullReadsStayBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 2 GiB")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "big.safetensors")
	names := sparseF32(t, src, 16, 128<<20)
	// A manifest listing the tensors (with hashes that will not match): check reads them all.
	type mt struct {
		Name     string  `json:"name"`
		DType    string  `json:"dtype"`
		Shape    []int64 `json:"shape"`
		NBytes   int64   `json:"nbytes"`
		XXHash64 string  `json:"xxhash64"`
	}
	var tensors []mt
	for _, n := range names {
		tensors = append(tensors, mt{n, "float32", []int64{32 << 20}, 128 << 20, "0000000000000000"})
	}
	m, _ := json.Marshal(map[string]any{"tool": "ckpt", "tensors": tensors})
	os.WriteFile(src+".ckpt-manifest.json", m, 0o644)
	const window = 128 << 20 // bytes
	for _, args := range [][]string{
		{"inspect", "--hash", "--json", src},
		{"check", src},
	} {
		t.Run(args[0], func(t *testing.T) {
			cmd := ckptCmd(args...)
			peakRSS := measured(t, cmd)
			out, err := cmd.CombinedOutput()
			if args[0] == "inspect" && err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if args[0] == "check" && !strings.Contains(string(out), "xxhash64") {
				t.Fatalf("check did not hash the tensors: %v\n%s", err, out)
			}
			peak := peakRSS()
			t.Logf("%s: peak RSS %d MiB over a %d MiB checkpoint", args[0], peak>>20, (16*128<<20)>>20)
			if peak > window {
				t.Errorf("%s kept %d MiB resident reading 2048 MiB; the bound is %d MiB", args[0], peak>>20, window>>20)
			}
		})
	}
}
