package torchzip

import (
	"os"
	"testing"

	"github.com/ckpt-dev/ckpt/statedict"
)

// TestDecodeFileBacked: an archive decoded from a file's bytes as stored has file-backed
// storages at their offsets in the file (writers may copy them from it), one decoded from
// bytes held in memory (inflated, or read from a bucket) has none: writing them from the
// file would copy other bytes, or open an object name as a path.
func TestDecodeFileBacked(t *testing.T) {
	const file = "../../testdata/torch/training_cuda.pt"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		decode func([]byte, string, int64) (statedict.Value, error)
		backed bool
	}{{"Decode", Decode, true}, {"DecodeBytes", DecodeBytes, false}} {
		v, err := c.decode(data, file, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		statedict.Walk(v, "", func(_ string, leaf statedict.Value) error {
			tt, ok := leaf.(*statedict.Tensor)
			if !ok {
				return nil
			}
			n++
			st := tt.Storage
			if st.FileBacked != c.backed {
				t.Errorf("%s: storage %s FileBacked %v", c.name, st.Key, st.FileBacked)
			}
			if d, _ := st.Mapped(); st.Offset+int64(len(d)) > int64(len(data)) || string(data[st.Offset:st.Offset+int64(len(d))]) != string(d) {
				t.Errorf("%s: storage %s is not the file's bytes at %d", c.name, st.Key, st.Offset)
			}
			return nil
		})
		if n == 0 {
			t.Fatalf("%s: no tensors", c.name)
		}
	}
}
