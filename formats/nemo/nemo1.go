// Package nemo reads NVIDIA NeMo checkpoints: NeMo 1 `.nemo` archives and NeMo 2 checkpoint
// folders.
//
// A NeMo 1 `.nemo` file is a tar of the model's save folder (SaveRestoreConnector, arcname
// "."): model_config.yaml, model_weights.ckpt (a torch.save of the state dict) — for
// model-parallel models one per rank, mp_rank_TT/model_weights.ckpt or
// tp_rank_TT_pp_rank_PPP/model_weights.ckpt — and artifacts (tokenizer files). An
// uncompressed tar stores each member as one contiguous byte range, so the archive is
// mapped and each weights member read in place, lazily, like any torch.save file; the
// other members travel as the checkpoint's extras, read through the same index. A
// gzip-compressed archive (older NeMo releases) cannot be read in place and is refused,
// saying how to unpack it: streaming it would mean holding the weights in memory.
//
// A NeMo 2 checkpoint is a folder: context/ (the model and trainer configuration,
// tokenizer) and weights/, a Megatron-core torch_dist checkpoint (see package megatron).
package nemo

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ckpt-dev/ckpt/formats/megatron"
	"github.com/ckpt-dev/ckpt/formats/store"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Format1 is the statedict.Checkpoint.Format of .nemo archives.
const Format1 = "nemo"

// Members of a .nemo archive.
const (
	ConfigMember  = "model_config.yaml"
	WeightsMember = "model_weights.ckpt"
)

// Member is one regular file of a tar archive: its cleaned name and where its bytes are.
type Member struct {
	Name         string
	Offset, Size int64
}

const block = 512

// Index lists the regular-file members of the uncompressed tar archive data, with names
// cleaned of a leading "./" (a later member of a name replaces an earlier one, as tarfile's
// getmember finds the last). Long names (GNU 'L' records, PAX headers) are honoured;
// sparse members and names leaving the archive are errors.
func Index(data []byte) ([]Member, error) {
	return IndexAt(bytes.NewReader(data), int64(len(data)))
}

// maxHeaderRecord bounds a long-name or PAX record: tar tools write a few hundred bytes;
// a larger one is refused rather than read into memory.
const maxHeaderRecord = 1 << 20

// IndexAt is Index over the size bytes of r: only the headers (and long-name and PAX
// records) are read, in reads of up to headerWindow bytes — so an archive in a bucket is
// indexed in one ranged read per stretch of small members plus one per large member,
// never read whole.
func IndexAt(r io.ReaderAt, size int64) ([]Member, error) {
	hr := headerReader{r: r, size: size}
	var out []Member
	at := map[string]int{}
	var longName string
	var pax map[string]string
	for off := int64(0); ; {
		if off+block > size {
			if off == size {
				break // no end-of-archive blocks: tarfile accepts it
			}
			return nil, fmt.Errorf("%w: tar header at byte %d: %d bytes left, a header is %d", statedict.ErrCorrupt, off, size-off, block)
		}
		h, err := hr.read(off, block)
		if err != nil {
			return nil, fmt.Errorf("tar header at byte %d: %w", off, err)
		}
		if allZero(h) {
			break
		}
		if !checksumOK(h) {
			return nil, fmt.Errorf("%w: tar header at byte %d: bad checksum", statedict.ErrCorrupt, off)
		}
		n, err := octal(h[124:136])
		if err != nil {
			return nil, fmt.Errorf("%w: tar header at byte %d: size: %w", statedict.ErrCorrupt, off, err)
		}
		start := off + block
		if n > size-start {
			return nil, fmt.Errorf("%w: tar member at byte %d: %d bytes, the archive has %d after its header", statedict.ErrCorrupt, off, n, size-start)
		}
		next := start + (n+block-1)/block*block
		name := cstr(h[0:100])
		if string(h[257:262]) == "ustar" {
			if prefix := cstr(h[345:500]); prefix != "" {
				name = prefix + "/" + name
			}
		}
		typ := h[156] // h is the reader's window: read what is needed before the next read
		body := func() ([]byte, error) {
			if n > maxHeaderRecord {
				return nil, fmt.Errorf("%w: tar %c record at byte %d holds %d bytes (at most %d)", statedict.ErrUnsupported, typ, off, n, maxHeaderRecord)
			}
			b, err := hr.read(start, int(n))
			if err != nil {
				return nil, fmt.Errorf("tar %c record at byte %d: %w", typ, off, err)
			}
			return b, nil
		}
		switch typ {
		case 'L':
			b, err := body()
			if err != nil {
				return nil, err
			}
			longName = cstr(b)
		case 'x':
			b, err := body()
			if err != nil {
				return nil, err
			}
			if pax, err = parsePAX(b); err != nil {
				return nil, fmt.Errorf("%w: tar PAX header at byte %d: %w", statedict.ErrCorrupt, off, err)
			}
		case 'g', 'K':
		case 'S':
			return nil, fmt.Errorf("%w: tar member at byte %d is a sparse file", statedict.ErrUnsupported, off)
		default:
			if longName != "" {
				name = longName
			}
			if p, ok := pax["path"]; ok {
				name = p
			}
			if s, ok := pax["size"]; ok {
				if v, err := strconv.ParseInt(s, 10, 64); err != nil || v != n {
					return nil, fmt.Errorf("%w: tar member %q at byte %d: PAX size %q, the header's %d", statedict.ErrUnsupported, name, off, s, n)
				}
			}
			longName, pax = "", nil
			if typ != '0' && typ != 0 && typ != '7' {
				break // folders, links and devices hold no file bytes
			}
			clean, err := cleanName(name)
			if err != nil {
				return nil, fmt.Errorf("%w: tar member at byte %d: %w", statedict.ErrCorrupt, off, err)
			}
			if i, ok := at[clean]; ok {
				out[i] = Member{clean, start, n}
			} else {
				at[clean] = len(out)
				out = append(out, Member{clean, start, n})
			}
		}
		off = min(next, size)
	}
	return out, nil
}

// headerWindow is how much IndexAt reads at once: the headers of small members that follow
// each other come in one read.
const headerWindow = 64 << 10

// headerReader reads ranges of a tar through a window of the last headerWindow bytes read.
type headerReader struct {
	r    io.ReaderAt
	size int64
	win  []byte
	at   int64 // offset of win in the archive
}

// read returns the n bytes at off (valid until the next read).
func (h *headerReader) read(off int64, n int) ([]byte, error) {
	if off >= h.at && off+int64(n) <= h.at+int64(len(h.win)) {
		return h.win[off-h.at : off-h.at+int64(n)], nil
	}
	want := min(max(int64(n), headerWindow), h.size-off)
	if int64(cap(h.win)) < want {
		h.win = make([]byte, want)
	}
	h.win = h.win[:want]
	k, err := h.r.ReadAt(h.win, off)
	if k < n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		h.win = h.win[:0]
		return nil, err
	}
	h.win, h.at = h.win[:k], off
	return h.win[:n], nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// checksumOK checks a header's checksum: the sum of its bytes with the checksum field as
// spaces (unsigned, or signed as some old tars wrote it).
func checksumOK(h []byte) bool {
	want, err := octal(h[148:156])
	if err != nil {
		return false
	}
	var u, s int64
	for i, c := range h {
		if i >= 148 && i < 156 {
			c = ' '
		}
		u += int64(c)
		s += int64(int8(c))
	}
	return want == u || want == s
}

// octal reads a numeric header field: octal digits (space or NUL terminated), or GNU's
// base-256 form for large sizes.
func octal(b []byte) (int64, error) {
	if len(b) > 0 && b[0]&0x80 != 0 {
		if b[0] != 0x80 || len(b) < 9 {
			return 0, errors.New("negative or oversized base-256 number")
		}
		var n int64
		for _, c := range b[1:] {
			if n > (1<<62)>>8 {
				return 0, errors.New("base-256 number too large")
			}
			n = n<<8 | int64(c)
		}
		return n, nil
	}
	s := strings.Trim(string(b), " \x00")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 8, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not an octal number", s)
	}
	return n, nil
}

func cstr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func parsePAX(b []byte) (map[string]string, error) {
	out := map[string]string{}
	for len(b) > 0 {
		sp := bytes.IndexByte(b, ' ')
		if sp <= 0 {
			return nil, errors.New("record without a length")
		}
		n, err := strconv.Atoi(string(b[:sp]))
		if err != nil || n <= sp+1 || n > len(b) || b[n-1] != '\n' {
			return nil, fmt.Errorf("record length %q", b[:sp])
		}
		kv := string(b[sp+1 : n-1])
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("record %q has no '='", kv)
		}
		out[k] = v
		b = b[n:]
	}
	return out, nil
}

// cleanName is a member's name relative to the archive root: "./a/b" → "a/b"; absolute
// names and names climbing out are refused.
func cleanName(name string) (string, error) {
	c := path.Clean(strings.TrimPrefix(name, "./"))
	if c == "." || c == "" || path.IsAbs(name) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("member name %q is not a file inside the archive", name)
	}
	return c, nil
}

// IsArchive reports whether the tar members are a .nemo archive's: a model_config.yaml or
// a model_weights.ckpt at the root or in a rank folder.
func IsArchive(members []Member) bool {
	for _, m := range members {
		if base := path.Base(m.Name); base == ConfigMember || base == WeightsMember || strings.HasPrefix(m.Name, "model_weights/") {
			return true
		}
	}
	return false
}

// IsGzipArchive reports whether head, the start of a gzip stream, inflates to the start of
// a tar whose first members are a .nemo archive's. It inflates at most 1 MiB.
func IsGzipArchive(head []byte) bool {
	zr, err := gzip.NewReader(bytes.NewReader(head))
	if err != nil {
		return false
	}
	b, _ := io.ReadAll(io.LimitReader(zr, 1<<20))
	for off := 0; off+block <= len(b); off += block {
		h := b[off : off+block]
		if allZero(h) || !checksumOK(h) {
			return false
		}
		if n := path.Base(strings.TrimPrefix(cstr(h[0:100]), "./")); n == ConfigMember || n == WeightsMember || n == "model_weights" {
			return true
		}
		size, err := octal(h[124:136])
		if err != nil || size < 0 {
			return false
		}
		off += int((size + block - 1) / block * block)
	}
	return false
}

// Open reads the .nemo archive at path (local: mapped; a gs:// or s3:// object: read in
// ranges, see package store): its weights members decoded in place by decode (a torch.save
// archive of size bytes at base in the file, as torchzip.DecodeAt reads one), the other
// members carried as extras read through Checkpoint.Files.
func Open(file string, decode func(r io.ReaderAt, base, size int64, file string) (statedict.Value, error)) (_ *statedict.Checkpoint, err error) {
	f, err := store.Open(file)
	if err != nil {
		return nil, err
	}
	ck := &statedict.Checkpoint{Format: Format1, Path: file, Closers: []io.Closer{f}}
	defer func() {
		if err != nil {
			ck.Close()
		}
	}()
	var magic [2]byte
	if n, _ := f.ReadAt(magic[:], 0); n == 2 && magic == [2]byte{0x1f, 0x8b} {
		return nil, GzipError(file)
	}
	members, err := IndexAt(f, f.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var weights []Member
	for _, m := range members {
		switch {
		case strings.HasPrefix(m.Name, "model_weights/"):
			return nil, fmt.Errorf("%s: %w: the archive holds a distributed checkpoint folder model_weights/ (Megatron dist_checkpointing), which is not read inside a tar: unpack it (mkdir m && tar xf %s -C m) and convert m/model_weights",
				file, statedict.ErrUnsupported, file)
		case path.Base(m.Name) == WeightsMember && (m.Name == WeightsMember || path.Dir(path.Dir(m.Name)) == "."):
			weights = append(weights, m)
		default:
			ck.Extras = append(ck.Extras, m.Name)
		}
	}
	if len(weights) == 0 {
		return nil, fmt.Errorf("%s: %w: a .nemo archive without %s (it holds %s)", file, statedict.ErrCorrupt, WeightsMember, names(members))
	}
	if len(weights) > 1 || weights[0].Name != WeightsMember {
		// The rank folders must be every rank of the model-parallel grid, once each.
		var ranks []string
		for _, m := range weights {
			ranks = append(ranks, path.Dir(m.Name))
		}
		if err := megatron.CheckNeMoRanks(ranks); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
	}
	root := statedict.NewDict("")
	for _, m := range weights {
		if m.Name == WeightsMember && len(weights) > 1 {
			return nil, fmt.Errorf("%s: %w: %s both at the root and in rank folders", file, statedict.ErrCorrupt, WeightsMember)
		}
		v, err := decode(f, m.Offset, m.Size, file)
		if err != nil {
			return nil, fmt.Errorf("%s: member %s (bytes %d–%d): %w", file, m.Name, m.Offset, m.Offset+m.Size, err)
		}
		if len(weights) == 1 && m.Name == WeightsMember {
			ck.Root = v
		} else {
			root.Set(path.Dir(m.Name), v)
		}
	}
	if ck.Root == nil {
		ck.Root = root
	}
	ck.Files = &tarFS{r: f, members: members}
	sort.Strings(ck.Extras)
	return ck, nil
}

// GzipError is the error for a gzip-compressed .nemo archive at file.
func GzipError(file string) error {
	return fmt.Errorf("%s: %w: a gzip-compressed .nemo archive, whose members cannot be read in place (reading it would mean inflating the weights into memory): unpack it (mkdir m && tar xzf %s -C m) and convert m/model_weights.ckpt, or store it uncompressed (gunzip -c %s > model.nemo)",
		file, statedict.ErrUnsupported, file, file)
}

func names(ms []Member) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	if len(out) == 0 {
		return "no files"
	}
	return strings.Join(out, ", ")
}

// tarFS reads an archive's members by name.
type tarFS struct {
	r       io.ReaderAt
	members []Member
}

func (t *tarFS) find(name string) (Member, bool) {
	for _, m := range t.members {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}

// Open implements fs.FS.
func (t *tarFS) Open(name string) (fs.File, error) {
	m, ok := t.find(name)
	if !fs.ValidPath(name) || !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &tarFile{m: m, r: io.NewSectionReader(t.r, m.Offset, m.Size)}, nil
}

// ReadFile implements fs.ReadFileFS.
func (t *tarFS) ReadFile(name string) ([]byte, error) {
	m, ok := t.find(name)
	if !fs.ValidPath(name) || !ok {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	b := make([]byte, m.Size) // the member's size: bounded by the archive's, checked by IndexAt
	if _, err := t.r.ReadAt(b, m.Offset); err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	return b, nil
}

type tarFile struct {
	m Member
	r *io.SectionReader
}

func (f *tarFile) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *tarFile) Close() error               { return nil }
func (f *tarFile) Stat() (fs.FileInfo, error) { return memberInfo{f.m}, nil }

type memberInfo struct{ m Member }

func (m memberInfo) Name() string       { return path.Base(m.m.Name) }
func (m memberInfo) Size() int64        { return m.m.Size }
func (m memberInfo) Mode() fs.FileMode  { return 0o644 }
func (m memberInfo) ModTime() time.Time { return time.Time{} }
func (m memberInfo) IsDir() bool        { return false }
func (m memberInfo) Sys() any           { return nil }
