package storage

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Mem is an in-memory backend for tests: objects by full path ("mem://run/model.pt"),
// folders as the prefixes of their names, as in a bucket. Register it under a scheme
// (Register("mem", storage.NewMem())) and every reader and output works over it. Its
// outputs follow Output's contract: a file appears once closed, Commit's files last,
// Abort removes what the output wrote and nothing else. Safe for concurrent use.
type Mem struct {
	mu      sync.Mutex
	objects map[string][]byte
}

// NewMem returns an empty in-memory backend.
func NewMem() *Mem { return &Mem{objects: map[string][]byte{}} }

// Put stores data as the object name (a full path).
func (m *Mem) Put(name string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[name] = bytes.Clone(data)
}

// Get returns the object name, if there is one.
func (m *Mem) Get(name string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objects[name]
	return b, ok
}

// Names lists every object, sorted.
func (m *Mem) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.objects))
	for n := range m.objects {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (m *Mem) remove(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, name)
}

// Open opens the object name; its bytes are Mapped.
func (m *Mem) Open(ctx context.Context, name string) (File, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	b, ok := m.Get(name)
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return FromBytes(b), nil
}

// Stat describes name: an object, or a folder when objects lie under name + "/".
func (m *Mem) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if b, ok := m.Get(name); ok {
		return FileInfo(Base(name), int64(len(b)), false), nil
	}
	dir := strings.TrimSuffix(name, "/") + "/"
	for _, n := range m.Names() {
		if strings.HasPrefix(n, dir) {
			return FileInfo(Base(name), 0, true), nil
		}
	}
	return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
}

// ReadDir lists the folder name: its objects and subfolders, sorted by name.
func (m *Mem) ReadDir(ctx context.Context, name string) ([]fs.DirEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	dir := strings.TrimSuffix(name, "/") + "/"
	seen := map[string]bool{}
	var out []fs.DirEntry
	for _, n := range m.Names() {
		rest, ok := strings.CutPrefix(n, dir)
		if !ok || rest == "" {
			continue
		}
		elem, _, sub := strings.Cut(rest, "/")
		if seen[elem] {
			continue
		}
		seen[elem] = true
		size := int64(0)
		if !sub {
			b, _ := m.Get(n)
			size = int64(len(b))
		}
		out = append(out, fs.FileInfoToDirEntry(FileInfo(elem, size, sub)))
	}
	if len(out) == 0 {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	return out, nil
}

// CreateOutput starts an output at url. An earlier output there is replaced only with
// opts.Force, and only when opts.Owned claims every object under it.
func (m *Mem) CreateOutput(ctx context.Context, url string, opts OutputOptions) (Output, error) {
	var there []string
	for _, n := range m.Names() {
		if n == url || strings.HasPrefix(n, url+"/") || !opts.Folder && slices.Contains(opts.Companions, Base(n)) && Dir(n) == Dir(url) {
			there = append(there, n)
		}
	}
	if len(there) > 0 {
		if !opts.Force {
			return nil, fmt.Errorf("%s: %w", url, ErrExists)
		}
		dir := url
		if !opts.Folder {
			dir = Dir(url)
		}
		owned := map[string]bool{}
		if opts.Owned != nil {
			if files, ok := opts.Owned(ctx, url); ok {
				for _, f := range files {
					owned[Join(dir, f)] = true
				}
			}
		}
		for _, n := range there {
			if !owned[n] {
				return nil, fmt.Errorf("%s: %w: %s", url, ErrForeign, n)
			}
		}
		for _, n := range there {
			m.remove(n)
		}
	}
	return &memOutput{m: m, ctx: ctx, url: url, folder: opts.Folder}, nil
}

// memOutput is an output of Mem.
type memOutput struct {
	m      *Mem
	ctx    context.Context
	url    string
	folder bool

	mu      sync.Mutex
	written []string
	open    int
}

func (o *memOutput) name(rel string) string {
	if rel == "" {
		return o.url
	}
	if o.folder {
		return Join(o.url, rel)
	}
	return o.url + rel
}

func (o *memOutput) Create(name string) (io.WriteCloser, error) {
	if err := o.ctx.Err(); err != nil {
		return nil, err
	}
	if name != "" && !fs.ValidPath(name) {
		return nil, fmt.Errorf("%s: %q: %w", o.url, name, fs.ErrInvalid)
	}
	o.mu.Lock()
	o.open++
	o.mu.Unlock()
	return &memWriter{o: o, name: o.name(name)}, nil
}

type memWriter struct {
	o    *memOutput
	name string
	buf  bytes.Buffer
	done bool
}

func (w *memWriter) Write(p []byte) (int, error) {
	if err := w.o.ctx.Err(); err != nil {
		return 0, err
	}
	return w.buf.Write(p)
}

func (w *memWriter) Close() error {
	if w.done {
		return nil
	}
	w.done = true
	w.o.mu.Lock()
	w.o.open--
	w.o.mu.Unlock()
	if err := w.o.ctx.Err(); err != nil {
		return err
	}
	w.o.put(w.name, w.buf.Bytes())
	return nil
}

func (o *memOutput) put(name string, b []byte) {
	o.m.Put(name, b)
	o.mu.Lock()
	o.written = append(o.written, name)
	o.mu.Unlock()
}

func (o *memOutput) Commit(last []NamedBytes) error {
	o.mu.Lock()
	open := o.open
	o.mu.Unlock()
	if open > 0 {
		return fmt.Errorf("%s: commit with %d files still open", o.url, open)
	}
	for _, f := range last {
		if err := o.ctx.Err(); err != nil {
			return err
		}
		o.put(o.name(f.Name), f.Data)
	}
	return nil
}

func (o *memOutput) Abort() {
	o.mu.Lock()
	written := o.written
	o.written = nil
	o.mu.Unlock()
	for _, n := range written {
		o.m.remove(n)
	}
}
