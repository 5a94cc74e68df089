package manifest

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestWriteStreams: the streamed manifest is byte for byte what json.Encoder writes.
func TestWriteStreams(t *testing.T) {
	for _, n := range []int{-1, 0, 1, 3} {
		m := &Manifest{Tool: Tool, Version: "v", Args: []string{"convert", "<a&b>"}, Remap: map[string]any{"x": 1}}
		if n == 0 {
			m.Tensors = []Tensor{}
		}
		for i := range max(n, 0) {
			m.Tensors = append(m.Tensors, Tensor{Name: string(rune('a' + i)), DType: "float32", Shape: []int64{2, int64(i)}})
		}
		var want, got bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		if err := enc.Encode(m); err != nil {
			t.Fatal(err)
		}
		if err := Write(&got, m); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("%d tensors:\n got %s\nwant %s", n, got.String(), want.String())
		}
	}
}
