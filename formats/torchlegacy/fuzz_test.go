package torchlegacy

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// FuzzDecode feeds arbitrary legacy streams to the reader: a value or an error, never a
// panic, and tensors readable within their storages.
func FuzzDecode(f *testing.F) {
	seeds, _ := filepath.Glob("../../testdata/torch/legacy*.pt")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		root, err := Decode(data, "fuzz.pt")
		if err != nil {
			return
		}
		ck := &statedict.Checkpoint{Root: root}
		tensors, err := ck.Tensors()
		if err != nil {
			return
		}
		for _, nt := range tensors {
			var buf bytes.Buffer
			if _, err := nt.Tensor.WriteTo(&buf); err != nil {
				continue
			}
			if int64(buf.Len()) != nt.Tensor.NBytes() {
				t.Fatalf("%s: wrote %d bytes, NBytes %d", nt.Name, buf.Len(), nt.Tensor.NBytes())
			}
		}
	})
}
