package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// partial is a partial folder being written, held by descriptor (see folder), and what
// this process made or adopted in it — the only entries it ever removes, reopens or
// commits.
type partial struct {
	fo *folder
	j  *journal

	mu     sync.Mutex
	files  map[string]ident
	dirs   map[string]ident
	sums   map[string]Journaled
	closed bool
}

func newPartial(fo *folder) *partial {
	return &partial{fo: fo, files: map[string]ident{}, dirs: map[string]ident{}, sums: map[string]Journaled{}}
}

// surveyAll lists every entry beneath fo, by slash-separated name.
func surveyAll(fo *folder) (map[string]ident, error) {
	all := map[string]ident{}
	err := fo.walk(func(name string, id ident) error {
		all[name] = id
		return nil
	})
	return all, err
}

// proves reports whether the entry name, found as id, is one the journal j records ckpt
// made: the same inode and kind, a file with no other link to it. An entry the journal
// only intended (a kill between its creation and its record) is ckpt's when it holds
// nothing: an empty file with one link at the intended name, or a folder on the way to it.
func proves(j *journaled, name string, id ident) bool {
	// The intended file first: it may be one made anew (a finisher's index written
	// again), whose earlier inode the journal lists and which was removed before.
	if name == j.Intent && id.isReg() && id.nlink == 1 && id.size == 0 {
		return true
	}
	if e, ok := j.Files[name]; ok {
		return id.isReg() && id.nlink == 1 && id.ino == e.ID
	}
	if ino, ok := j.Dirs[name]; ok {
		return id.isDir() && id.ino == ino
	}
	return j.Intent != "" && id.isDir() && strings.HasPrefix(j.Intent, name+"/")
}

// adopt takes the entries the journal proves (all, as surveyed) as this process's own.
func (p *partial) adopt(j *journaled, all map[string]ident) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, id := range all {
		if !proves(j, name, id) {
			continue
		}
		if id.isDir() {
			p.dirs[name] = id
		} else {
			p.files[name] = id
		}
	}
}

// made reports whether id at name is an entry this process made or adopted.
func (p *partial) made(name string, id ident) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if want, ok := p.files[name]; ok {
		return id.isReg() && id.nlink == 1 && id.ino == want.ino && id.dev == want.dev
	}
	if want, ok := p.dirs[name]; ok {
		return id.isDir() && id.ino == want.ino && id.dev == want.dev
	}
	return false
}

// create makes the new file name, journaling the folders made on the way and the file
// with their inodes.
func (p *partial) create(name string) (*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A file this output made before (a finisher writing its index again) is made anew.
	if old, ok := p.files[name]; ok {
		if err := p.fo.remove(name, old); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		delete(p.files, name)
		delete(p.sums, name)
	}
	// The intent covers a kill between the creation and the record of its inode.
	if err := p.j.write(record{Intent: name}); err != nil {
		return nil, err
	}
	f, id, err := p.fo.create(name, 0o666, func(dir string, id ident) error {
		p.dirs[dir] = id
		return p.j.write(record{Dir: dir, Ino: id.ino})
	})
	if err != nil {
		return nil, err
	}
	if err := p.j.write(record{File: name, Ino: id.ino}); err != nil {
		f.Close()
		p.fo.remove(name, id)
		return nil, err
	}
	p.files[name] = id
	return f, nil
}

// finished journals the file j.File, made by this process, as complete.
func (p *partial) finished(j Journaled) error {
	if j.XXHash64 == "" || j.Size < 0 {
		return errors.New("atomicfile: a finished file needs its size and digest")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.files[j.File]
	if !ok {
		return fmt.Errorf("%s: not a file this output made", p.fo.pathOf(j.File))
	}
	if err := p.j.write(record{File: j.File, Ino: id.ino, Size: j.Size, XXHash64: j.XXHash64}); err != nil {
		return err
	}
	p.sums[j.File] = j
	return nil
}

// finishedSums copies the finished files' records.
func (p *partial) finishedSums() map[string]Journaled {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Journaled, len(p.sums))
	for k, v := range p.sums {
		out[k] = v
	}
	return out
}

// open opens a file this process made or adopted, for reading, checking it is still it.
func (p *partial) open(name string) (*os.File, error) {
	p.mu.Lock()
	want, ok := p.files[name]
	p.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%s: not a file this output made", p.fo.pathOf(name))
	}
	f, id, _, err := p.fo.open(name, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	if id.ino != want.ino || id.dev != want.dev || id.nlink != 1 {
		f.Close()
		return nil, fmt.Errorf("%s is no longer the file ckpt made there", p.fo.pathOf(name))
	}
	return f, nil
}

// removeFile removes the file name if this process made or adopted it and it is still
// that file.
func (p *partial) removeFile(name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.files[name]
	if !ok {
		return nil
	}
	err := p.fo.remove(name, id)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		delete(p.files, name)
		delete(p.sums, name)
		return nil
	}
	return err
}

// removeEntry removes the entry name if it is still id (as the multi-host protocol found
// and proved it), and lets go of it.
func (p *partial) removeEntry(name string, id ident) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.fo.remove(name, id)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		delete(p.files, name)
		delete(p.dirs, name)
		delete(p.sums, name)
		return nil
	}
	return err
}

// removeAll removes every file and folder this process made or adopted (folders deepest
// first, each only when empty), each only if it is still what was made. The first error
// is returned; what could not be proven stays.
func (p *partial) removeAll() error {
	p.mu.Lock()
	files := make([]string, 0, len(p.files))
	for n := range p.files {
		files = append(files, n)
	}
	dirs := make([]string, 0, len(p.dirs))
	for n := range p.dirs {
		dirs = append(dirs, n)
	}
	p.mu.Unlock()
	var first error
	for _, n := range files {
		if err := p.removeFile(n); err != nil && first == nil {
			first = err
		}
	}
	sort.Slice(dirs, func(a, b int) bool { return strings.Count(dirs[a], "/") > strings.Count(dirs[b], "/") })
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range dirs {
		err := p.fo.remove(n, p.dirs[n])
		if err == nil || errors.Is(err, os.ErrNotExist) {
			delete(p.dirs, n)
		} else if first == nil {
			first = err
		}
	}
	return first
}

// syncAll fsyncs every file and folder this process made or adopted.
func (p *partial) syncAll() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for n, id := range p.files {
		if err := p.fo.syncName(n, id); err != nil {
			return err
		}
	}
	for n, id := range p.dirs {
		if err := p.fo.syncName(n, id); err != nil {
			return err
		}
	}
	return nil
}

// close lets go of the journal and the folder (and its lock).
func (p *partial) close() {
	if p.closed {
		return
	}
	p.closed = true
	p.j.close()
	p.fo.close()
}

// openNoFollow opens the file at path for reading without following a final link or
// waiting, refusing anything but a regular file.
func openNoFollow(path string) (*os.File, ident, error) {
	f, err := openFileNoFollow(path)
	if err != nil {
		return nil, ident{}, err
	}
	id, err := identFile(f)
	if err != nil {
		f.Close()
		return nil, ident{}, err
	}
	if !id.isReg() {
		f.Close()
		return nil, ident{}, fmt.Errorf("%s is %s, not a file ckpt wrote", path, id.kind())
	}
	return f, id, nil
}

// proveOpen checks that the file open gives (path, for messages) is what the claim
// records: the record itself when the claim's Size < 0, else its size and (with hash) its
// xxhash64.
func proveOpen(path string, c Journaled, open func() (*os.File, ident, error), hash bool) (ident, error) {
	f, id, err := open()
	if err != nil {
		return ident{}, fmt.Errorf("%s: %w: %w", path, ErrForeign, err)
	}
	defer f.Close()
	if c.Size < 0 {
		return id, nil
	}
	if id.size != c.Size {
		return ident{}, fmt.Errorf("%s: %w: %d bytes, where ckpt wrote %d", path, ErrForeign, id.size, c.Size)
	}
	if !hash {
		return id, nil
	}
	h := xxhash.New()
	if _, err := io.Copy(h, io.LimitReader(f, c.Size)); err != nil {
		return ident{}, fmt.Errorf("%s: %w", path, err)
	}
	if got := fmt.Sprintf("%016x", h.Sum64()); got != c.XXHash64 {
		return ident{}, fmt.Errorf("%s: %w: its bytes are not what ckpt wrote (xxhash64 %s, recorded %s)", path, ErrForeign, got, c.XXHash64)
	}
	return id, nil
}
