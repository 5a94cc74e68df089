// Package formats opens a checkpoint in any supported on-disk format, recognizing the
// format by content rather than by file name: torch.save zip archives, legacy torch.save
// streams and safetensors files (folders: Hugging Face and torch.distributed.checkpoint).
package formats

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ckpt-dev/ckpt/formats/torchlegacy"
	"github.com/ckpt-dev/ckpt/formats/torchzip"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Kind is a detected file format.
type Kind string

// Detectable single-file formats.
const (
	TorchZip    Kind = torchzip.Format
	TorchLegacy Kind = torchlegacy.Format
	Safetensors Kind = "safetensors"
)

// Detect recognizes the format of a single file from its first bytes.
func Detect(path string) (Kind, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 512)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", err
	}
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, torchzip.Magic):
		return TorchZip, nil
	case bytes.HasPrefix(head, torchlegacy.Magic):
		return TorchLegacy, nil
	case bytes.HasPrefix(head, []byte("PYTORCH1")):
		return "", fmt.Errorf("%s: a pre-1.0 preview torch archive (PYTORCH1), which torch itself no longer reads", path)
	case len(head) >= 262 && string(head[257:262]) == "ustar":
		return "", fmt.Errorf("%s: a tar-format torch.save file from the earliest PyTorch releases; re-save it with a recent torch (torch.load refuses it with weights_only=True)", path)
	case looksLikeSafetensors(head):
		return Safetensors, nil
	}
	return "", fmt.Errorf("%s: %w: unrecognized checkpoint format (not a torch.save zip or legacy stream, not safetensors)", path, statedict.ErrUnsupported)
}

// looksLikeSafetensors checks for an 8-byte little-endian header length followed by a JSON
// object (the reference accepts leading whitespace).
func looksLikeSafetensors(head []byte) bool {
	if len(head) < 9 {
		return false
	}
	if n := binary.LittleEndian.Uint64(head); n < 2 {
		return false
	}
	for _, c := range head[8:] {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}

// Open reads the checkpoint at path, a file or a folder, in whatever supported format it is.
func Open(path string) (*statedict.Checkpoint, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return openDir(path)
	}
	return openFile(path)
}

func openFile(path string) (*statedict.Checkpoint, error) {
	kind, err := Detect(path)
	if err != nil {
		return nil, err
	}
	switch kind {
	case TorchZip:
		return torchzip.Open(path)
	case TorchLegacy:
		return torchlegacy.Open(path)
	case Safetensors:
		return openSafetensors(path)
	}
	return nil, fmt.Errorf("%s: no reader for format %s", path, kind)
}
