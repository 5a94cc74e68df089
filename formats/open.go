// Package formats opens a checkpoint in any supported on-disk format, recognizing the
// format by content rather than by file name: torch.save zip archives, legacy torch.save
// streams and safetensors files (folders: Hugging Face and torch.distributed.checkpoint).
//
// It also scans checkpoints for code ([Scan]): every pickle torch.load(weights_only=False)
// or DCP's loader would unpickle, found where they find it, is checked against a
// default-deny policy — torch's weights_only allowlist and the pure-data reconstructors
// ckpt models are allowed; every other global, dotted names included, is refused as
// "known code execution" or "would import and call unknown code". Bytes no archive record,
// pickle or DCP item accounts for, records torch refuses and layouts torch does not load
// are problems that keep the scan from vouching for a file.
package formats

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	pathpkg "path"
	"slices"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats/nemo"
	"github.com/ckpt-dev/ckpt/formats/pytar"
	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/formats/torchlegacy"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/formats/zero"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
)

// Kind is a detected file format.
type Kind string

// Detectable single-file formats.
const (
	TorchZip    Kind = torchzip.Format
	TorchLegacy Kind = torchlegacy.Format
	Safetensors Kind = "safetensors"
	Nemo        Kind = nemo.Format1
)

// Detect recognizes the format of a single file from its first bytes.
func Detect(ctx context.Context, path string) (Kind, error) {
	f, err := storage.Open(ctx, path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, min(512, f.Size()))
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, torchzip.Magic):
		return TorchZip, nil
	case torchlegacy.IsLegacy(head):
		return TorchLegacy, nil
	case bytes.HasPrefix(head, []byte("PYTORCH1")):
		return "", fmt.Errorf("%s: a pre-1.0 preview torch archive (PYTORCH1), which torch itself no longer reads", path)
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}) && isNemoGzip(f):
		return "", nemo.GzipError(path)
	}
	if pytar.IsHeader(head) {
		if kind, isTar, err := detectTar(path, f); isTar {
			return kind, err
		}
	}
	// A file named .safetensors that does not begin as one is still read as one, so that its
	// reader says where it breaks (corrupt, as the safetensors library calls a header too
	// short, empty or not an object) instead of "not a checkpoint".
	if safetensors.LooksLike(head) || strings.EqualFold(pathpkg.Ext(path), ".safetensors") {
		return Safetensors, nil
	}
	return "", fmt.Errorf("%s: %w: %w", path, ckpterr.ErrUnsupported, errUnrecognized)
}

// errUnrecognized is Detect's error for bytes that are no single-file format.
var errUnrecognized = errors.New("unrecognized checkpoint format (not a torch.save zip or legacy stream, not safetensors)")

// detectTar recognizes a tar archive as Python's tarfile reads it (package pytar) — the
// reading of NeMo's restore_from and torch's legacy loader: a .nemo archive, whose index
// must be one ckpt reads (else the error names the member and its byte offset), or a
// legacy torch.save tar. isTar is false for a file tarfile does not open, or opens as an
// empty archive.
func detectTar(path string, f storage.File) (kind Kind, isTar bool, err error) {
	a, err := pytar.Read(f, f.Size())
	switch {
	case errors.Is(err, pytar.ErrNotTar):
		return "", false, nil
	case err != nil:
		return "", true, fmt.Errorf("%s: %w: %w", path, ckpterr.ErrUnsupported, err)
	case len(a.Members) == 0:
		return "", false, nil
	case nemo.IsTarArchive(a):
		if _, err := nemo.IndexAt(f, f.Size(), path); err != nil {
			return "", true, err // naming path, the member and its offset
		}
		return Nemo, true, nil
	}
	names := make([]string, 0, len(a.Members))
	for _, m := range a.Members {
		names = append(names, m.Name)
	}
	if slices.ContainsFunc(names, func(n string) bool { return n == "storages" || n == "tensors" || n == "pickle" }) {
		return "", true, fmt.Errorf("%s: a tar-format torch.save file from the earliest PyTorch releases; re-save it with a recent torch (torch.load refuses it with weights_only=True)", path)
	}
	if a.Err != nil {
		return "", true, fmt.Errorf("%s: a tar archive ckpt does not read: %w", path, a.Err) // corrupt, or unsupported where the readers differ
	}
	return "", true, fmt.Errorf("%s: %w: a tar archive that is neither a .nemo archive nor a torch.save file (it holds %s)", path, ckpterr.ErrUnsupported, strings.Join(names[:min(len(names), 8)], ", "))
}

// isNemoGzip reports whether the gzip file f inflates to a .nemo archive's first members.
func isNemoGzip(f io.ReaderAt) bool {
	head := make([]byte, 64<<10)
	n, _ := f.ReadAt(head, 0)
	return nemo.IsGzipArchive(head[:n])
}

// OpenOptions ask a reader for more than the checkpoint's default reading.
type OpenOptions struct {
	// ZeROOptimizer reads a DeepSpeed ZeRO folder as {"model": the consolidated weights,
	// "optimizer": the optimizer state consolidated by parameter name} (zero.Options); any
	// other source is refused.
	ZeROOptimizer bool
}

// Open reads the checkpoint at path, a file or a folder, in whatever supported format it is.
// A gs:// or s3:// path is read through the backend registered for its scheme (see package
// store; importing storage/bucket registers them): headers, pickles and metadata
// first, tensor bytes only when read.
func Open(ctx context.Context, path string) (*statedict.Checkpoint, error) {
	return OpenWith(ctx, path, OpenOptions{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, path string, o OpenOptions) (*statedict.Checkpoint, error) {
	st, err := storage.Stat(ctx, path)
	if err != nil {
		return nil, err
	}
	var ck *statedict.Checkpoint
	if o.ZeROOptimizer {
		tag, ok := "", false
		if st.IsDir() {
			tag, ok = zero.Detect(ctx, path)
		} else {
			tag, ok = zero.FolderOf(ctx, path) // a rank's model-states file: its folder
		}
		if !ok {
			return nil, fmt.Errorf("%s: %w: the ZeRO optimizer state is read from a DeepSpeed ZeRO checkpoint folder (latest, global_stepN/, *_optim_states.pt) or one of its *_model_states.pt files; this is not one", path, ckpterr.ErrUnsupported)
		}
		ck, err = zero.OpenWith(ctx, tag, openPart, zero.Options{Optimizer: true})
	} else if st.IsDir() {
		ck, err = openDir(ctx, path)
	} else {
		ck, err = openFile(ctx, path)
	}
	if err != nil {
		return nil, err
	}
	// Each pickle was checked as it was read; a folder's checkpoint joins many (DCP bytes
	// items, shards), whose expansions add up.
	if err := statedict.CheckExpansion(ck.Root); err != nil {
		ck.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ck, nil
}

// openFile reads one checkpoint file. A file that is only part of a checkpoint — a
// DeepSpeed ZeRO-3 model-states file, whose parameters are placeholders for the ranks'
// partitions — reads as the checkpoint of its folder, consolidated (zero.Open), or is
// refused when its folder does not hold the ranks' files. So does a rank's torch.save of
// DTensor shards (FSDP2): its folder's rank files reassembled (openDTensorFiles).
func openFile(ctx context.Context, path string) (*statedict.Checkpoint, error) {
	ck, err := openPart(ctx, path)
	if err != nil {
		return nil, err
	}
	if firstDTensor(ck.Root) != nil {
		ck.Close()
		return openDTensorFolderOf(ctx, path)
	}
	if err := zero.CheckModelStates(path, ck.Root); err != nil {
		ck.Close()
		if dir, ok := zero.FolderOf(ctx, path); ok {
			return zero.Open(ctx, dir, openPart)
		}
		return nil, err
	}
	return ck, nil
}

// openPart reads one file in whatever format it is, as it is.
func openPart(ctx context.Context, path string) (*statedict.Checkpoint, error) {
	kind, err := Detect(ctx, path)
	if err != nil {
		return nil, err
	}
	switch kind {
	case TorchZip:
		return torchzip.Open(ctx, path)
	case TorchLegacy:
		return torchlegacy.Open(ctx, path)
	case Safetensors:
		return openSafetensors(ctx, path)
	case Nemo:
		return nemo.Open(ctx, path, torchzip.DecodeAt)
	}
	return nil, fmt.Errorf("%s: no reader for format %s", path, kind)
}
