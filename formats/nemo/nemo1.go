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
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/megatron"
	"github.com/ckpt-dev/ckpt/formats/pytar"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
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

// Index lists the regular-file members of the uncompressed tar archive data, with names
// cleaned of a leading "./" (a later member of a name replaces an earlier one, as NeMo's
// extraction overwrites it). See IndexAt.
func Index(data []byte) ([]Member, error) {
	return IndexAt(bytes.NewReader(data), int64(len(data)), "")
}

// IndexAt is Index over the size bytes of r. The archive is read as NeMo's restore_from
// reads it — with Python's tarfile (package pytar), whose member list is what it
// extracts — and refused, naming the member and its byte offset, where that reading is
// one ckpt cannot follow or the archive is forged: tarfile cannot open or list it, the
// CPython versions read it differently, a member's name is absolute or climbs out of the
// archive (NeMo skips it with a warning), its PAX size contradicts its header's, its
// bytes run past the end of the archive, or its type is one tarfile does not know (NeMo
// extracts it as a file with CPython before 3.14 and fails with 3.14). Only the headers
// (and long-name and PAX records) are read: an archive in a bucket is indexed in one
// ranged read per stretch of small members plus one per large member, never read whole.
//
// file names the archive in errors ("" when unknown). Each is a *ckpterr.FormatError: of
// pytar's (Format "tar") where tarfile's reading fails or is unsure, of Format "nemo" where
// NeMo's restore would not extract what the archive says.
func IndexAt(r io.ReaderAt, size int64, file string) ([]Member, error) {
	a, err := pytar.Read(r, size)
	if err == nil {
		err = a.Err
	}
	if err != nil {
		if fe := (*ckpterr.FormatError)(nil); errors.As(err, &fe) && file != "" {
			named := *fe
			named.File = file
			return nil, &named
		}
		return nil, err
	}
	fail := func(m pytar.Member, cause error) error {
		return &ckpterr.FormatError{Format: Format1, File: file, Item: m.Name, Offset: m.Offset, Err: cause}
	}
	var out []Member
	at := map[string]int{}
	for _, m := range a.Members {
		if !m.HasData() {
			continue // folders, links (NeMo skips them) and devices hold no file bytes
		}
		if !m.Supported() {
			return nil, fail(m, fmt.Errorf("%w: tar member of type %q, which NeMo's restore extracts as a file with CPython before 3.14 and refuses with 3.14", ckpterr.ErrUnsupported, m.Type))
		}
		clean, err := cleanName(m.Name)
		if err != nil {
			return nil, fail(m, errors.New("its name is absolute or climbs out of the archive (NeMo's restore skips it)"))
		}
		if m.Size != m.HeaderSize {
			return nil, fail(m, fmt.Errorf("its PAX record gives %d bytes, its header %d", m.Size, m.HeaderSize))
		}
		if m.Size > size-m.Data {
			return nil, fail(m, fmt.Errorf("%d bytes, the archive has %d after its header", m.Size, size-m.Data))
		}
		if i, ok := at[clean]; ok {
			out[i] = Member{clean, m.Data, m.Size}
		} else {
			at[clean] = len(out)
			out = append(out, Member{clean, m.Data, m.Size})
		}
	}
	return out, nil
}

// cleanName is a member's name relative to the archive root, normalized as the path
// NeMo's extraction writes ("./a/b" and ".//a//b" → "a/b"); absolute names and names with
// a ".." component are refused.
func cleanName(name string) (string, error) {
	c := path.Clean(name)
	if c == "." || path.IsAbs(c) || slices.Contains(strings.Split(name, "/"), "..") {
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

// IsTarArchive reports whether a member list as Python's tarfile reads it is a .nemo
// archive's (IsArchive of the normalized names, whatever their types).
func IsTarArchive(a *pytar.Archive) bool {
	ms := make([]Member, len(a.Members))
	for i, m := range a.Members {
		ms[i].Name = strings.TrimPrefix(path.Clean(m.Name), "./")
	}
	return IsArchive(ms)
}

// IsGzipArchive reports whether head, the start of a gzip stream, inflates to the start of
// a tar whose first members are a .nemo archive's. It inflates at most 1 MiB.
func IsGzipArchive(head []byte) bool {
	zr, err := gzip.NewReader(bytes.NewReader(head))
	if err != nil {
		return false
	}
	b, _ := io.ReadAll(io.LimitReader(zr, 1<<20))
	a, err := pytar.Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return false
	}
	for _, m := range a.Members {
		if n := path.Base(strings.TrimPrefix(m.Name, "./")); n == ConfigMember || n == WeightsMember || n == "model_weights" {
			return true
		}
	}
	return false
}

// Open reads the .nemo archive at path (local: mapped; a gs:// or s3:// object: read in
// ranges, see package storage): its weights members decoded in place by decode (a torch.save
// archive of size bytes at base in the file, as torchzip.DecodeAt reads one), the other
// members carried as extras read through Checkpoint.Files.
func Open(ctx context.Context, file string, decode func(r io.ReaderAt, base, size int64, file string) (statedict.Value, error)) (_ *statedict.Checkpoint, err error) {
	f, err := storage.Open(ctx, file)
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
	members, err := IndexAt(f, f.Size(), file)
	if err != nil {
		return nil, err
	}
	var weights []Member
	for _, m := range members {
		switch {
		case strings.HasPrefix(m.Name, "model_weights/"):
			return nil, fmt.Errorf("%s: %w: the archive holds a distributed checkpoint folder model_weights/ (Megatron dist_checkpointing), which is not read inside a tar: unpack it (mkdir m && tar xf %s -C m) and convert m/model_weights",
				file, ckpterr.ErrUnsupported, file)
		case path.Base(m.Name) == WeightsMember && (m.Name == WeightsMember || path.Dir(path.Dir(m.Name)) == "."):
			weights = append(weights, m)
		default:
			ck.Extras = append(ck.Extras, m.Name)
		}
	}
	if len(weights) == 0 {
		return nil, fmt.Errorf("%s: %w: a .nemo archive without %s (it holds %s)", file, ckpterr.ErrCorrupt, WeightsMember, names(members))
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
			return nil, fmt.Errorf("%s: %w: %s both at the root and in rank folders", file, ckpterr.ErrCorrupt, WeightsMember)
		}
		v, err := decode(f, m.Offset, m.Size, file)
		if err != nil {
			return nil, &ckpterr.FormatError{Format: Format1, File: file, Item: m.Name, Offset: m.Offset, Err: err}
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
		file, ckpterr.ErrUnsupported, file, file)
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
