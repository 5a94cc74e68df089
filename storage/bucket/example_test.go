package bucket_test

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/storage/bucket"
)

// A bucket URL names a bucket and a key; endpoints and credentials come from the
// environment, never from the URL.
func ExampleParse() {
	l, err := bucket.Parse("gs://training-runs/llama/step-1000/")
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Scheme, l.Bucket, l.Key)
	fmt.Println(l.Join(".metadata"))
	_, err = bucket.Parse("s3://key:secret@training-runs/ckpt.pt")
	fmt.Println(err)
	// Output:
	// gs training-runs llama/step-1000
	// gs://training-runs/llama/step-1000/.metadata
	// s3://…: a bucket URL takes no user information (credentials come from the environment)
}
