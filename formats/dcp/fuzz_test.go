package dcp

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/statedict"
)

// FuzzMetadata feeds arbitrary bytes to ReadMetadata and Nest. They must never panic and
// must fail only with a *ckpterr.FormatError; metadata they accept must keep ReadMetadata's promises
// (chunks tile their tensors, every chunk and bytes item has its storage entry, file names
// stay local), and every small accepted tensor must assemble, from chunks cut to the
// accepted geometry, into exactly the bytes it was cut from. Seeds: the fixtures'
// .metadata files and the mutated ones.
func FuzzMetadata(f *testing.F) {
	addMetadataSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		md, err := ReadMetadata(data, MetadataFile)
		var de *ckpterr.FormatError
		if err != nil {
			if !errors.As(err, &de) {
				t.Fatalf("error %v is a %T, not a *ckpterr.FormatError", err, err)
			}
			return
		}
		entries := 0
		values := make([]statedict.Value, len(md.Items))
		for i, it := range md.Items {
			values[i] = it.FQN
			if it.Tensor == nil {
				if _, ok := md.Lookup(it.FQN, nil); !ok {
					t.Fatalf("%s: accepted without a storage entry", it.FQN)
				}
				entries++
				continue
			}
			tm := it.Tensor
			if _, err := checkTiling(tm.DType, tm.Size, tm.Chunks); err != nil {
				t.Fatalf("%s: accepted chunks that do not tile: %v", it.FQN, err)
			}
			for _, c := range tm.Chunks {
				if _, ok := md.Lookup(it.FQN, c.Offsets); !ok {
					t.Fatalf("%s: chunk %v accepted without a storage entry", it.FQN, c.Offsets)
				}
				entries++
			}
			assemble(t, it.FQN, tm)
		}
		if entries != len(md.Storage) {
			t.Fatalf("%d storage entries for %d chunks and bytes items", len(md.Storage), entries)
		}
		for _, e := range md.Storage {
			if checkRelative(e.RelativePath) != nil {
				t.Fatalf("accepted data file %q", e.RelativePath)
			}
		}
		if _, err := Nest(md, values, MetadataFile); err != nil && !errors.As(err, &de) {
			t.Fatalf("Nest error %v is a %T, not a *ckpterr.FormatError", err, err)
		}
	})
}

// assemble cuts a tensor of the accepted geometry into its chunks and checks that the
// assembly reads back the original bytes. Large tensors are skipped.
func assemble(t *testing.T, fqn string, tm *TensorMeta) {
	n, _ := numel(tm.Size, 4)
	if n > 1<<12 || len(tm.Chunks) > 64 {
		return
	}
	whole := wholeTensor(tm.Size)
	var chunks []Chunk
	for _, c := range tm.Chunks {
		chunks = append(chunks, makeChunk(whole, tm.Size, box{c.Offsets, c.Sizes, "rowmajor"}))
	}
	c, err := NewChunked(statedict.Int32, tm.Size, chunks)
	if err != nil {
		t.Fatalf("%s: accepted geometry refused by NewChunked: %v", fqn, err)
	}
	var got bytes.Buffer
	if _, err := c.Tensor(fqn).WriteTo(&got); err != nil {
		t.Fatalf("%s: %v", fqn, err)
	}
	if !bytes.Equal(got.Bytes(), whole) {
		t.Fatalf("%s: chunks %v assemble to the wrong bytes", fqn, tm.Chunks)
	}
}

// addMetadataSeeds seeds f with the fixtures' .metadata files and the mutated ones.
func addMetadataSeeds(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join(fixtures, "*", MetadataFile))
	mutated, _ := filepath.Glob(filepath.Join(fixtures, "mutated", "*.metadata"))
	for _, p := range append(seeds, mutated...) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzMetadataStreamed: the streaming decode (completed records reduced as they are stored, the
// memo holding only what is fetched again, the file read a window at a time) reads what
// the general value tree reads: the same Metadata, or the same error.
func FuzzMetadataStreamed(f *testing.F) {
	addMetadataSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		tree, err1 := readMetadata(bytes.NewReader(data), int64(len(data)), MetadataFile, false)
		streamed, err2 := readMetadata(bytes.NewReader(data), int64(len(data)), MetadataFile, true)
		if fmt.Sprint(err1) != fmt.Sprint(err2) {
			t.Fatalf("errors differ:\ntree:     %v\nstreamed: %v", err1, err2)
		}
		if err1 != nil {
			return
		}
		a := fmt.Sprintf("%#v %#v %#v %#v %d", tree.PlannerData, tree.Storage, tree.StorageMeta, tree.Version, len(tree.Items))
		b := fmt.Sprintf("%#v %#v %#v %#v %d", streamed.PlannerData, streamed.Storage, streamed.StorageMeta, streamed.Version, len(streamed.Items))
		if a != b {
			t.Fatalf("metadata differ:\ntree:     %.3000s\nstreamed: %.3000s", a, b)
		}
		for i, it := range tree.Items {
			if it.FQN != streamed.Items[i].FQN || !reflect.DeepEqual(it.Tensor, streamed.Items[i].Tensor) {
				t.Fatalf("%s: tensor %+v, streamed %+v", it.FQN, it.Tensor, streamed.Items[i].Tensor)
			}
		}
	})
}
