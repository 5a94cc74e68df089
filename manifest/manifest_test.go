package manifest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
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

// TestReadersAgree: ReadEach and json.Unmarshal of a Manifest accept the same documents
// and read the same from them. A duplicated key is refused by both: ReadEach once refused
// a second tensor list while encoding/json took the last one.
func TestReadersAgree(t *testing.T) {
	const t1 = `{"name":"a","dtype":"float32","shape":[2],"location":"cpu","nbytes":8,"xxhash64":"0000000000000001"}`
	const t2 = `{"name":"b","dtype":"int8","shape":[],"location":"cpu","nbytes":1,"xxhash64":"0000000000000002"}`
	for _, tc := range []struct {
		name, doc string
		ok        bool
	}{
		{"plain", `{"tool":"ckpt","version":"v","tensors":[` + t1 + `,` + t2 + `]}`, true},
		{"tensors first", `{"tensors":[` + t1 + `],"tool":"ckpt","output":{"files":["x"]}}`, true},
		{"empty list", `{"tool":"ckpt","tensors":[]}`, true},
		{"null list", `{"tool":"ckpt","tensors":null}`, true},
		{"no list", `{"tool":"ckpt"}`, true},
		{"unknown key twice", `{"tool":"ckpt","x":1,"x":2,"tensors":[]}`, true},
		{"tensors twice", `{"tool":"ckpt","tensors":[` + t1 + `],"tensors":[` + t2 + `]}`, false},
		{"tensors twice, one null", `{"tool":"ckpt","tensors":null,"tensors":[` + t2 + `]}`, false},
		{"tensors in two cases", `{"tool":"ckpt","Tensors":[` + t1 + `],"tensors":[]}`, false},
		{"tool twice", `{"tool":"other","tool":"ckpt","tensors":[]}`, false},
		{"output in two cases", `{"tool":"ckpt","output":{"files":["a"]},"OUTPUT":{"files":["b"]}}`, false},
		{"not an object", `[1]`, false},
		{"trailing data", `{"tool":"ckpt"} {}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), Name)
			if err := os.WriteFile(path, []byte(tc.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			read, err1 := Read(context.Background(), path)
			var un Manifest
			err2 := json.Unmarshal([]byte(tc.doc), &un)
			if (err1 == nil) != tc.ok || (err2 == nil) != tc.ok {
				t.Fatalf("Read: %v; json.Unmarshal: %v; want ok=%v", err1, err2, tc.ok)
			}
			if !tc.ok {
				return
			}
			if len(un.Tensors) == 0 {
				un.Tensors = nil // Read gives no tensors as nil
			}
			if !reflect.DeepEqual(read, &un) {
				t.Errorf("Read: %+v\njson.Unmarshal: %+v", read, &un)
			}
		})
	}
}

// TestReadMalformed: a manifest that is not valid JSON is a *ckpterr.FormatError naming the
// file and the byte where decoding stopped, and ckpterr.ErrCorrupt.
func TestReadMalformed(t *testing.T) {
	path := filepath.Join(t.TempDir(), Name)
	if err := os.WriteFile(path, []byte(`{"tool": "ckpt", "tensors": [{"name": "w",]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Read(context.Background(), path)
	var fe *ckpterr.FormatError
	if !errors.As(err, &fe) || fe.File != path || fe.Offset <= 0 || !errors.Is(err, ckpterr.ErrCorrupt) {
		t.Errorf("%v: want a corrupt *ckpterr.FormatError naming %s and a byte offset", err, path)
	}
}
