package storage_test

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/storage"
)

// Paths with a scheme go to the backend registered for it; others are local files.
func ExampleJoin() {
	fmt.Println(storage.IsRemote("gs://runs/step-1000"), storage.IsRemote("runs/step-1000"))
	fmt.Println(storage.Join("gs://runs/step-1000", "__0_0.distcp"))
	fmt.Println(storage.Dir("s3://runs/llama/model.safetensors"), storage.Base("s3://runs/llama/model.safetensors"))
	// Output:
	// true false
	// gs://runs/step-1000/__0_0.distcp
	// s3://runs/llama model.safetensors
}

// ReadRange slices a mapped file without copying and reads any other File's range.
func ExampleReadRange() {
	f := storage.FromBytes([]byte("PK\x03\x04 archive bytes"))
	head, err := storage.ReadRange(f, 0, 4)
	fmt.Printf("%q %v\n", head, err)
	_, err = storage.ReadRange(f, 10, 100)
	fmt.Println(err)
	// Output:
	// "PK\x03\x04" <nil>
	// unexpected EOF
}
