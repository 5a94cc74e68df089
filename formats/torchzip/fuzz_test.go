package torchzip

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// FuzzDecode feeds arbitrary archives to the reader: it must return a value or an error,
// never panic, and every tensor it returns must be readable within its storage.
func FuzzDecode(f *testing.F) {
	seeds, _ := filepath.Glob("../../testdata/torch/*.pt")
	dtensors, _ := filepath.Glob("../../testdata/dtensor/*/*.pt") // FSDP2 rank files
	seeds = append(seeds, dtensors...)
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		if bytes.HasPrefix(b, Magic) && len(b) < 64<<10 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		root, err := Decode(data, "fuzz.pt", 0)
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
