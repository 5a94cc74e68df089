// Package manifest reads and writes ckpt-manifest.json, the record ckpt convert leaves
// with every output: how it was produced (tool, version, the conversion's options as a
// typed record, the command line for people, the source) and what it holds (every tensor's name, dtype, shape, device tag, size and the xxhash64 of
// its contiguous little-endian bytes). `ckpt check` compares an output with it; a later
// forced conversion replaces only the files it lists.
package manifest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/storage"
)

// Name is the manifest's file name inside a folder output; a file output FILE gets
// FILE.ckpt-manifest.json beside it.
const Name = "ckpt-manifest.json"

// Tool is the Tool field of every manifest ckpt writes.
const Tool = "ckpt"

// Manifest records how an output was produced and what it holds.
type Manifest struct {
	Tool    string   `json:"tool"`
	Version string   `json:"version"`
	Created string   `json:"created"`
	Args    []string `json:"args,omitempty"`
	Source  Source   `json:"source"`
	Output  Output   `json:"output"`
	// Conversion is what the conversion was asked to do, typed and versioned: the options
	// `ckpt verify` replays. nil in manifests of ckpt versions before it was recorded.
	Conversion *Conversion `json:"conversion,omitempty"`
	// Remap is the conversion's report of what it changed, as it chose to record it.
	Remap   any      `json:"remap"`
	Tensors []Tensor `json:"tensors"`
	// Stream, when set, yields the tensors in Tensors' place for Write, one at a time, so
	// that a manifest of hundreds of thousands of tensors is never held in memory whole.
	Stream func(yield func(Tensor) error) error `json:"-"`
}

// Source names the input.
type Source struct {
	Path   string `json:"path"`
	Format string `json:"format"`
	// Metadata is the source's free-form metadata (safetensors' __metadata__), recorded
	// whatever the output holds.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Output names the output and its files (relative to the output folder; a file output
// lists its own base name).
type Output struct {
	Path   string   `json:"path"`
	Format string   `json:"format"`
	Files  []string `json:"files"`
	// Run identifies a multi-host conversion: a host run again after the output is complete
	// finds its run here and has nothing to do.
	Run string `json:"run,omitempty"`
	// Sums records each file of the output (the manifests themselves aside) as it was
	// written: its size and the xxhash64 of its bytes. It is how a later forced conversion
	// proves a file ckpt's before replacing it (an output in a bucket records none: its
	// objects carry their run).
	Sums map[string]FileSum `json:"sums,omitempty"`
}

// FileSum is a file's size and the xxhash64 of its bytes (16 lower-case hex digits).
type FileSum struct {
	Size     int64  `json:"size"`
	XXHash64 string `json:"xxhash64"`
}

// Tensor describes one written tensor; XXHash64 is the xxhash64 of its contiguous
// little-endian bytes as written, in 16 lower-case hex digits.
type Tensor struct {
	Name     string  `json:"name"`
	DType    string  `json:"dtype"`
	Shape    []int64 `json:"shape"`
	Location string  `json:"location"`
	NBytes   int64   `json:"nbytes"`
	XXHash64 string  `json:"xxhash64"`
}

// PathFor is where the manifest of the output at dst goes: inside a folder output,
// beside a file output.
func PathFor(dst string, folder bool) string {
	if folder {
		return storage.Join(dst, Name)
	}
	return dst + "." + Name
}

// Find returns the manifest path of the existing output at path.
func Find(ctx context.Context, path string) (string, error) {
	st, err := storage.Stat(ctx, path)
	if err != nil {
		return "", err
	}
	if storage.IsRemote(path) {
		return PathFor(strings.TrimSuffix(path, "/"), st.IsDir()), nil
	}
	return PathFor(filepath.Clean(path), st.IsDir()), nil
}

// maxManifest bounds a manifest read: a few hundred bytes per tensor.
const maxManifest = 1 << 30

// Read reads and parses the manifest file at path.
func Read(ctx context.Context, path string) (*Manifest, error) {
	var ts []Tensor
	m, err := ReadEach(ctx, path, func(t Tensor) error {
		ts = append(ts, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.Tensors = ts
	return m, nil
}

// ReadEach reads the manifest file at path, streaming: it returns every field but
// Tensors, and passes the tensors to each one at a time, in file order, as it decodes
// them, so that a manifest of hundreds of thousands of tensors is never held in memory
// whole. An error from each stops the read and is returned. A manifest whose tensor list
// is null or absent yields no tensor (Tensors stays nil). The tool is checked only at the
// end, wherever the field is: each may have been called for a file that is not a ckpt
// manifest.
//
// A key the manifest object holds twice (field names matched as encoding/json matches
// them, ignoring case) is an error, here and in json.Unmarshal of a Manifest (see
// UnmarshalJSON), where encoding/json alone would take the last. ckpt never writes one;
// a file that has one reads differently in readers that take the first, the last or
// either (a streaming read meets the first tensor list before it knows of a second), so
// what `ckpt check` verified need not be what another tool reads.
func ReadEach(ctx context.Context, path string, each func(Tensor) error) (*Manifest, error) {
	f, err := storage.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Size() > maxManifest {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a manifest may have", path, f.Size(), maxManifest)
	}
	dec := json.NewDecoder(bufio.NewReaderSize(io.NewSectionReader(f, 0, f.Size()), 1<<16))
	m, err := decode(dec, each)
	if err != nil {
		var yield yieldError
		if errors.As(err, &yield) {
			return nil, yield.err
		}
		var head headError
		if errors.As(err, &head) {
			return nil, fmt.Errorf("%s: %w: %w", path, ckpterr.ErrCorrupt, head.err)
		}
		return nil, &ckpterr.FormatError{Format: "ckpt-manifest", File: path, Offset: dec.InputOffset(), Err: err}
	}
	if m.Tool != Tool {
		return nil, fmt.Errorf("%s: %w: not a ckpt manifest (tool %q)", path, ckpterr.ErrCorrupt, m.Tool)
	}
	return m, nil
}

// UnmarshalJSON decodes a manifest as ReadEach reads one, a key held twice included (an
// error): json.Unmarshal of a Manifest and ReadEach accept the same documents and read
// the same from them. It does not check the tool.
func (m *Manifest) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	var ts []Tensor
	dec := json.NewDecoder(bytes.NewReader(b))
	got, err := decode(dec, func(t Tensor) error {
		ts = append(ts, t)
		return nil
	})
	if err != nil {
		var head headError
		if errors.As(err, &head) {
			return head.err
		}
		return err
	}
	if got.Tensors != nil && ts == nil {
		ts = []Tensor{} // an empty list, not null
	}
	got.Tensors = ts
	*m = *got
	return nil
}

// decode reads one manifest object from dec, passing the tensors to each, and returns
// the other fields (Tensors is non-nil, and empty, when the list is present and not
// null). It fails on a key held twice.
func decode(dec *json.Decoder, each func(Tensor) error) (*Manifest, error) {
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	// Every field but the tensors is decoded as json.Unmarshal would decode the object
	// without them.
	head := map[string]json.RawMessage{}
	seen := map[string]bool{}
	list := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		// encoding/json matches a key to a field ignoring case (strings.EqualFold); a
		// key no field takes is ignored however often it comes.
		if i := slices.IndexFunc(fields, func(f string) bool { return strings.EqualFold(f, key) }); i >= 0 {
			if seen[fields[i]] {
				return nil, fmt.Errorf("key %q is held twice", key)
			}
			seen[fields[i]] = true
		}
		if !strings.EqualFold(key, "tensors") {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, err
			}
			head[key] = raw
			continue
		}
		present, err := eachTensor(dec, each)
		if err != nil {
			return nil, err
		}
		list = present
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the manifest object")
	}
	b, err := json.Marshal(head)
	if err != nil {
		return nil, err
	}
	var m plain
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, headError{err}
	}
	if list {
		m.Tensors = []Tensor{}
	}
	return (*Manifest)(&m), nil
}

// plain is a Manifest without its UnmarshalJSON.
type plain Manifest

// fields are the JSON names of Manifest's fields.
var fields = func() []string {
	var names []string
	t := reflect.TypeFor[Manifest]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}()

// headError is an error decoding the fields but the tensors, which has no byte offset.
type headError struct{ err error }

func (e headError) Error() string { return e.err.Error() }

// yieldError carries an error of ReadEach's callback through eachTensor unchanged.
type yieldError struct{ err error }

func (e yieldError) Error() string { return e.err.Error() }

// eachTensor decodes a tensor list (or null) and passes each tensor to each. It reports
// whether the list was there (not null).
func eachTensor(dec *json.Decoder, each func(Tensor) error) (bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	if tok == nil {
		return false, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return false, fmt.Errorf("tensors is %v, want a list", tok)
	}
	for dec.More() {
		var t Tensor
		if err := dec.Decode(&t); err != nil {
			return false, err
		}
		if err := each(t); err != nil {
			return false, yieldError{err}
		}
	}
	_, err = dec.Token() // ']'
	return true, err
}

// expectDelim reads the delimiter d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != d {
		return fmt.Errorf("found %v, want %q", tok, d)
	}
	return nil
}

// Write writes m as indented JSON (what json.Encoder with a two-space indent writes),
// streaming the tensor list (Tensors, or what Stream yields) one entry at a time: a
// manifest of 300 000 tensors is not built as one buffer in memory.
func Write(w io.Writer, m *Manifest) error {
	head := *m
	head.Tensors = []Tensor{}
	b, err := json.MarshalIndent(&head, "", "  ")
	if err != nil {
		return err
	}
	// The tensor list is the last field: its "[]" closes the object.
	const tail = "[]\n}"
	if !bytes.HasSuffix(b, []byte(tail)) {
		return fmt.Errorf("manifest: unexpected layout")
	}
	bw := bufio.NewWriter(w)
	bw.Write(b[:len(b)-len(tail)])
	if m.Tensors == nil && m.Stream == nil {
		bw.WriteString("null\n}\n")
		return bw.Flush()
	}
	each := m.Stream
	if each == nil {
		each = func(yield func(Tensor) error) error {
			for _, t := range m.Tensors {
				if err := yield(t); err != nil {
					return err
				}
			}
			return nil
		}
	}
	n := 0
	err = each(func(t Tensor) error {
		e, err := json.MarshalIndent(&t, "    ", "  ")
		if err != nil {
			return err
		}
		if n == 0 {
			bw.WriteString("[\n    ")
		} else {
			bw.WriteString(",\n    ")
		}
		n++
		_, err = bw.Write(e)
		return err
	})
	if err != nil {
		return err
	}
	if n == 0 {
		bw.WriteString(tail + "\n")
	} else {
		bw.WriteString("\n  ]\n}\n")
	}
	return bw.Flush()
}

// Owned lists the objects of the bucket folder dir that a ckpt conversion wrote — the
// files its manifest lists and the manifest itself — for replacing it (a local output is
// proven file by file from Output.Sums instead). A folder without a manifest claims
// nothing.
func Owned(ctx context.Context, dir string) ([]string, bool) {
	m, err := Read(ctx, storage.Join(dir, Name))
	if err != nil {
		return nil, false
	}
	return append(m.Output.Files, Name), true
}
