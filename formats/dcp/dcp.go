// Package dcp reads torch.distributed.checkpoint (DCP) checkpoints: a folder holding a
// `.metadata` pickle, which describes every flattened state-dict key, and `.distcp` data
// files, which hold each tensor chunk and each non-tensor value as an embedded torch.save
// archive (or, with SerializationFormat.SAFETENSORS, one safetensors blob per file).
//
// Nothing is executed: `.metadata` is decoded by the restricted unpickler with an
// allowlist of the DCP classes only, and the embedded archives by formats/torchzip.
// Everything is validated before use — chunks must tile their tensors exactly, storage
// ranges must lie inside their files, file names must stay inside the folder — and every
// error names the file, the item and the position at fault.
//
// Tensors saved in one chunk are returned as that chunk's tensor, a zero-copy view of the
// mapped data file. Tensors saved in several chunks (DTensor / ShardedTensor shards written
// by several ranks) are returned as one logical contiguous tensor assembled lazily from the
// chunks by a [Chunked] reader, so reading them never materialises the whole tensor.
package dcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/internal/regular"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Format is the statedict.Checkpoint.Format of checkpoints opened by Open.
const Format = "dcp"

// MetadataFile is the name of the metadata pickle in a DCP folder.
const MetadataFile = ".metadata"

// IsCheckpoint reports whether the folder dir is a torch.distributed.checkpoint directory:
// it holds a .metadata file.
func IsCheckpoint(ctx context.Context, dir string) bool {
	st, err := storage.Stat(ctx, storage.Join(dir, MetadataFile))
	return err == nil && st.Mode().IsRegular()
}

// errorAt returns the positional error for a problem in file (the .metadata pickle or a
// data file), about the item fqn ("" for the file as a whole) and its chunk at the given
// offsets within the tensor (nil when not about one chunk), at byte off of file (-1 when
// the problem has no position).
func errorAt(file, fqn string, chunk []int64, off int64, err error) *ckpterr.FormatError {
	if chunk != nil {
		err = fmt.Errorf("chunk at %v: %w", chunk, err)
	}
	return &ckpterr.FormatError{Format: Format, File: file, Item: fqn, Offset: off, Err: err}
}

// MaxMetadata bounds a .metadata file read from object storage (a local one is read as
// the file system gives it): by Open, and by the scanner (formats), which reads the same
// files.
const MaxMetadata = 1 << 30

// Open reads the DCP checkpoint in folder dir. The checkpoint's Root is the nested state
// dict rebuilt from planner_data as torch's dcp_to_torch_save nests it: tensors are
// *statedict.Tensor (a multi-chunk tensor is a contiguous tensor whose storage assembles
// the chunks on demand), non-tensor values are what their embedded torch.save archives
// hold. The data files stay mapped until the checkpoint is closed.
func Open(ctx context.Context, dir string) (*statedict.Checkpoint, error) {
	var root *os.Root
	if !storage.IsRemote(dir) {
		var err error
		if root, err = os.OpenRoot(dir); err != nil {
			return nil, err
		}
		defer root.Close()
	}
	mdPath := storage.Join(dir, MetadataFile)
	md, err := openMetadata(ctx, root, dir, mdPath)
	if err != nil {
		return nil, err
	}
	r := reader{dir: dir, root: root, md: md, files: map[string]storage.File{}, blobs: map[blobKey]*blob{}}
	if severalRanks(md) {
		r.shards, r.ranks = map[*statedict.Tensor][]statedict.Shard{}, map[int]bool{}
	}
	values, err := r.values(ctx)
	if err == nil {
		var root *statedict.Dict
		if root, err = Nest(md, values, mdPath); err == nil {
			ck := &statedict.Checkpoint{Format: Format, Path: dir, Root: root, Closers: r.closers()}
			if len(r.ranks) > 1 {
				ck.Shards = r.shards
			}
			return ck, nil
		}
	}
	for _, c := range r.closers() {
		c.Close()
	}
	return nil, err
}

// openMetadata reads the folder's .metadata (through root when local), streaming it.
func openMetadata(ctx context.Context, root *os.Root, dir, mdPath string) (*Metadata, error) {
	var f interface {
		io.ReaderAt
		io.Closer
	}
	var size int64
	var err error
	if root != nil {
		// A regular file only, opened without waiting (a FIFO there is refused).
		var lf *os.File
		var st os.FileInfo
		if lf, st, err = regular.OpenIn(root, MetadataFile); err == nil {
			f, size = lf, st.Size()
		}
	} else {
		var sf storage.File
		if sf, err = storage.Open(ctx, mdPath); err == nil {
			f, size = sf, sf.Size()
		}
	}
	if err == nil && size > MaxMetadata {
		f.Close()
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a .metadata may have", mdPath, size, int64(MaxMetadata))
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if ranks := storage.Glob(ctx, dir, "__*.metadata"); len(ranks) > 0 {
				return nil, fmt.Errorf("%s: %w: no %s but per-rank %s files (saved without collectives); they are not merged",
					dir, ckpterr.ErrUnsupported, MetadataFile, storage.Base(ranks[0]))
			}
		}
		return nil, fmt.Errorf("%s: %w", mdPath, err)
	}
	defer f.Close()
	return ReadMetadataFrom(f, size, mdPath)
}

// reader turns metadata entries into values, mapping each data file once.
type reader struct {
	dir   string
	root  *os.Root // a local folder: data files must resolve inside it, symlinks included
	md    *Metadata
	files map[string]storage.File
	order []string // relative paths in the order mapped, for closing
	// last is the relative path and full path of the file an entry last named: one
	// string for the 300 000 items of one data file, not one each.
	last, lastPath string
	head           []byte // an item's first bytes (chunk)
	blobs          map[blobKey]*blob
	// shards are the chunks each tensor was read from, with the rank whose file stores
	// them; ranks the ranks seen (Checkpoint.Shards when the files are several ranks').
	// Both are nil when the data files are one rank's (severalRanks): nothing to record.
	shards map[*statedict.Tensor][]statedict.Shard
	ranks  map[int]bool
}

// severalRanks reports whether md's tensor chunks lie in the data files of more than one
// rank — necessary for the chunks read to be several ranks' (Checkpoint.Shards).
func severalRanks(md *Metadata) bool {
	first, prev := -1, ""
	for i := range md.Storage {
		e := &md.Storage[i]
		if e.Offsets == nil || e.RelativePath == prev {
			continue
		}
		prev = e.RelativePath
		if rank, ok := FileRank(e.RelativePath); ok {
			if first >= 0 && rank != first {
				return true
			}
			first = rank
		}
	}
	return false
}

func (r *reader) closers() []io.Closer {
	out := make([]io.Closer, len(r.order))
	for i, rel := range r.order {
		out[i] = r.files[rel]
	}
	return out
}

// values builds every item's value. The metadata is Open's own: once an item's value is
// built its tensor record is let go (Nest needs the names only), and the storage entries
// once every value is built, so that the metadata and the checkpoint of hundreds of
// thousands of tensors are not held whole together.
func (r *reader) values(ctx context.Context) ([]statedict.Value, error) {
	out := make([]statedict.Value, len(r.md.Items))
	for i := range r.md.Items {
		it := &r.md.Items[i]
		var err error
		if it.Tensor == nil {
			out[i], err = r.bytesItem(ctx, i, it.FQN)
		} else {
			out[i], err = r.tensor(ctx, i, it.FQN, it.Tensor)
			it.Tensor = nil
		}
		if err != nil {
			return nil, err
		}
	}
	r.md.Storage, r.md.first, r.md.entries = nil, nil, nil
	return out, nil
}

// FileRank is the rank whose process wrote the data file rel, as torch's FileSystemWriter
// names them: "__R_N.distcp" is rank R's (N counts its files).
func FileRank(rel string) (int, bool) {
	rest, ok := strings.CutPrefix(path.Base(rel), "__")
	if !ok {
		return 0, false
	}
	r, rest, ok := strings.Cut(rest, "_")
	if !ok || !strings.HasSuffix(rest, ".distcp") {
		return 0, false
	}
	n, err := strconv.Atoi(r)
	if err != nil || n < 0 || strconv.Itoa(n) != r {
		return 0, false
	}
	return n, true
}

// slice returns the entry's bytes — a slice of its mapped file (mapped), or read from an
// object — and its file's path.
func (r *reader) slice(ctx context.Context, e *StorageEntry) (b []byte, mapped bool, path string, err error) {
	f, path, err := r.file(ctx, e)
	if err != nil {
		return nil, false, path, err
	}
	_, mapped = storage.Bytes(f)
	if b, err = storage.ReadRange(f, e.Offset, e.Length); err != nil {
		return nil, false, path, errorAt(path, e.FQN, e.Offsets, e.Offset, err)
	}
	return b, mapped, path, nil
}

// file opens the entry's file (once per file: mapped, or an object read in ranges) and
// checks the entry's bytes lie inside it.
func (r *reader) file(ctx context.Context, e *StorageEntry) (storage.File, string, error) {
	if e.RelativePath != r.last || r.lastPath == "" {
		r.last, r.lastPath = e.RelativePath, storage.Join(r.dir, e.RelativePath)
	}
	path := r.lastPath
	fail := func(off int64, format string, args ...any) error {
		return errorAt(path, e.FQN, e.Offsets, off, fmt.Errorf(format, args...))
	}
	if _, err := compressed(e.TransformDescriptors); err != nil {
		return nil, path, fail(e.Offset, "%w", err)
	}
	f, ok := r.files[e.RelativePath]
	if !ok {
		// ReadMetadata refused names that leave the folder; the root also refuses symlinks
		// that do. (The file is then mapped by name: a symlink swapped in between is a race
		// this reader does not defend against.)
		if r.root != nil {
			if _, err := r.root.Stat(filepath.FromSlash(e.RelativePath)); err != nil {
				return nil, path, fail(-1, "data file: %w", err)
			}
		}
		var err error
		if f, err = storage.Open(ctx, path); err != nil {
			return nil, path, fail(-1, "data file: %w", err)
		}
		r.files[e.RelativePath] = f
		r.order = append(r.order, e.RelativePath)
	}
	if e.Offset > f.Size() || e.Length > f.Size()-e.Offset {
		return nil, path, fail(e.Offset, "stored range of %d bytes runs past the end of the %d-byte file", e.Length, f.Size())
	}
	return f, path, nil
}

// bytesItem decodes a non-tensor value: a torch.save archive of the Python object.
func (r *reader) bytesItem(ctx context.Context, i int, fqn string) (statedict.Value, error) {
	e, _ := r.md.ChunkEntry(i, 0)
	b, mapped, path, err := r.slice(ctx, e)
	if err != nil {
		return nil, err
	}
	if b, err = r.md.Inflate(e, b); err != nil {
		return nil, errorAt(path, fqn, nil, e.Offset, err)
	}
	decode := torchzip.DecodeBytes // inflated, or read from a bucket: memory only
	if z, _ := compressed(e.TransformDescriptors); mapped && !z {
		decode = torchzip.Decode // the local file's bytes as stored
	}
	v, err := decode(b, path, e.Offset)
	if err != nil {
		return nil, errorAt(path, fqn, nil, e.Offset, err)
	}
	return v, nil
}

// tensor reads every chunk of a tensor item and returns the tensor: the chunk itself when
// one chunk holds all elements, else a lazy assembly of the chunks.
func (r *reader) tensor(ctx context.Context, item int, fqn string, t *TensorMeta) (out *statedict.Tensor, _ error) {
	chunks := make([]Chunk, len(t.Chunks))
	var shards []statedict.Shard
	for i, c := range t.Chunks {
		e, _ := r.md.ChunkEntry(item, i) // ReadMetadata checked every chunk has its entry
		ct, err := r.chunk(ctx, fqn, t.DType, c, e)
		if err != nil {
			return nil, err
		}
		chunks[i] = Chunk{Offsets: c.Offsets, Tensor: ct}
		if r.shards == nil {
			continue
		}
		if rank, ok := FileRank(e.RelativePath); ok && !slices.Contains(ct.Shape, 0) {
			shards = append(shards, statedict.Shard{Piece: statedict.Piece{Offsets: c.Offsets, Sizes: ct.Shape, Ranks: []int{rank}}, Local: ct})
			r.ranks[rank] = true
		}
	}
	defer func() {
		if out != nil && len(shards) > 0 {
			r.shards[out] = shards
		}
	}()
	var nonEmpty []Chunk
	for _, c := range chunks {
		if !slices.Contains(c.Tensor.Shape, 0) {
			nonEmpty = append(nonEmpty, c)
		}
	}
	switch {
	case len(nonEmpty) == 1 && slices.Equal(nonEmpty[0].Tensor.Shape, t.Size):
		return nonEmpty[0].Tensor, nil
	case len(nonEmpty) == 0:
		// An empty tensor (ReadMetadata checked the chunks cover it, so it has no elements).
		if len(chunks) > 0 && slices.Equal(chunks[0].Tensor.Shape, t.Size) {
			return chunks[0].Tensor, nil
		}
		st := statedict.NewMappedStorage(fqn, "cpu", t.DType, []byte{})
		return &statedict.Tensor{DType: t.DType, Shape: slices.Clone(t.Size), Strides: statedict.ContiguousStrides(t.Size), Storage: st}, nil
	}
	asm, err := NewChunked(t.DType, t.Size, chunks)
	if err != nil {
		return nil, errorAt(storage.Join(r.dir, MetadataFile), fqn, nil, -1, err)
	}
	out = asm.Tensor(fqn)
	out.Storage.File = r.dir
	return out, nil
}

// chunk decodes one stored chunk, stored as e, and checks it against the metadata.
func (r *reader) chunk(ctx context.Context, fqn string, dtype statedict.DType, c ChunkMeta, e *StorageEntry) (*statedict.Tensor, error) {
	f, path, err := r.file(ctx, e)
	if err != nil {
		return nil, err
	}
	fail := func(err error) error {
		return errorAt(path, fqn, c.Offsets, e.Offset, err)
	}
	if z, _ := compressed(e.TransformDescriptors); z {
		// Inflated when read: the metadata says what the item holds.
		return r.zstdTensor(fqn, path, e, f, dtype, c.Sizes), nil
	}
	if _, mapped := storage.Bytes(f); !mapped && e.Length <= torchzip.SmallArchive {
		// Read with pread: a small archive is read once, for its kind and its directory.
		b, err := storage.ReadRange(f, e.Offset, e.Length)
		if err != nil {
			return nil, fail(fmt.Errorf("reading the item: %w", err))
		}
		if bytes.HasPrefix(b, torchzip.Magic) {
			t, err := archiveTensor(torchzip.DecodeRead(f, e.Offset, b, e.Length, path))
			if err != nil {
				return nil, fail(err)
			}
			return matching(t, dtype, c, fail)
		}
	}
	// The item's first bytes say what it is: an archive, or a safetensors blob whose header
	// length and JSON start follow.
	if r.head == nil {
		r.head = make([]byte, 512)
	}
	head := r.head[:min(f.Size()-e.Offset, 512)]
	if n, err := f.ReadAt(head, e.Offset); n < len(head) {
		return nil, fail(fmt.Errorf("reading the item: %w", err))
	}
	var t *statedict.Tensor
	switch {
	case bytes.HasPrefix(head, torchzip.Magic):
		if t, err = archiveTensor(torchzip.DecodeAt(f, e.Offset, e.Length, path)); err != nil {
			return nil, fail(err)
		}
	case looksLikeSafetensorsAt(f, e.Offset, head):
		if t, err = r.safetensorsChunk(e, path); err != nil {
			return nil, fail(err)
		}
	default:
		return nil, fail(errors.New("stored bytes are neither a torch.save archive nor a safetensors blob"))
	}
	return matching(t, dtype, c, fail)
}

// archiveTensor is the tensor an embedded archive holds.
func archiveTensor(v statedict.Value, err error) (*statedict.Tensor, error) {
	if err != nil {
		return nil, err
	}
	t, ok := v.(*statedict.Tensor)
	if !ok {
		return nil, fmt.Errorf("the embedded archive holds a %T, not a tensor", v)
	}
	return t, nil
}

// matching returns t if it has the dtype and shape the metadata gives its chunk.
func matching(t *statedict.Tensor, dtype statedict.DType, c ChunkMeta, fail func(error) error) (*statedict.Tensor, error) {
	if t.DType != dtype || !slices.Equal(t.Shape, c.Sizes) {
		return nil, fail(fmt.Errorf("stored tensor is %s %v, the metadata says %s %v", t.DType, t.Shape, dtype, c.Sizes))
	}
	return t, nil
}
