package ckpterr_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/ckpt-dev/ckpt/ckpterr"
)

func TestFormatError(t *testing.T) {
	pathErr := &fs.PathError{Op: "read", Path: "m.pt", Err: syscall.EIO}
	inner := &ckpterr.FormatError{Format: "pickle", Offset: 16, Err: errors.New("STACK_GLOBAL: unknown memo")}
	for _, tc := range []struct {
		name                   string
		err                    *ckpterr.FormatError
		text                   string
		corrupt, unsup, danger bool
	}{
		{"all parts", &ckpterr.FormatError{"safetensors", "m.safetensors", "w", 96, errors.New("bad")},
			`m.safetensors: safetensors: "w": byte 96: bad`, true, false, false},
		{"offset 0 is a position", &ckpterr.FormatError{"safetensors", "", "", 0, errors.New("bad")},
			`safetensors: byte 0: bad`, true, false, false},
		{"no position", &ckpterr.FormatError{"dcp", "d/.metadata", "a.b", -1, errors.New("chunk at [0 4]: overlaps")},
			`d/.metadata: dcp: "a.b": chunk at [0 4]: overlaps`, true, false, false},
		{"item needing quotes", &ckpterr.FormatError{"tar", "x.nemo", "../a: b", 512, errors.New("climbs out")},
			`x.nemo: tar: "../a: b": byte 512: climbs out`, true, false, false},
		{"nil cause", &ckpterr.FormatError{Format: "npy", Offset: -1}, `npy: malformed`, false, false, false},
		{"unsupported", &ckpterr.FormatError{"torch-zip", "m.pt", "", 10, fmt.Errorf("%w: compression method 12", ckpterr.ErrUnsupported)},
			`m.pt: torch-zip: byte 10: unsupported: compression method 12`, false, true, false},
		{"dangerous", &ckpterr.FormatError{"pickle", "", "", 3, fmt.Errorf("GLOBAL os.system: %w", ckpterr.ErrDangerous)},
			`pickle: byte 3: GLOBAL os.system: dangerous content`, false, false, true},
		{"I/O", &ckpterr.FormatError{"torch-legacy", "m.pt", "", -1, pathErr},
			`m.pt: torch-legacy: read m.pt: input/output error`, false, false, false},
		{"cancelled", &ckpterr.FormatError{"dcp", "d/__0_0.distcp", "w", 8, fmt.Errorf("reading: %w", context.Canceled)},
			`d/__0_0.distcp: dcp: "w": byte 8: reading: context canceled`, false, false, false},
		{"nested", &ckpterr.FormatError{"torch-zip", "m.pt", "archive/data.pkl", 64, inner},
			`m.pt: torch-zip: "archive/data.pkl": byte 64: pickle: byte 16: STACK_GLOBAL: unknown memo`, true, false, false},
		{"nested in the same file", &ckpterr.FormatError{"dcp", "d/__0_0.distcp", "w", 8,
			&ckpterr.FormatError{"torch-zip", "d/__0_0.distcp", "w/data.pkl", 72, inner}},
			`d/__0_0.distcp: dcp: "w": byte 8: torch-zip: "w/data.pkl": byte 72: pickle: byte 16: STACK_GLOBAL: unknown memo`, true, false, false},
		{"worded cause in the same file", &ckpterr.FormatError{"dcp", "d/__0_0.distcp", "w", 8,
			fmt.Errorf("chunk at [0 4]: %w", &ckpterr.FormatError{"torch-zip", "d/__0_0.distcp", "", 8, errors.New("empty zip archive")})},
			`d/__0_0.distcp: dcp: "w": byte 8: chunk at [0 4]: torch-zip: byte 8: empty zip archive`, true, false, false},
		{"nested in another file", &ckpterr.FormatError{"nemo", "m.nemo", "model_weights.ckpt", 512,
			&ckpterr.FormatError{"torch-zip", "model_weights.ckpt", "", -1, errors.New("empty zip archive")}},
			`m.nemo: nemo: "model_weights.ckpt": byte 512: model_weights.ckpt: torch-zip: empty zip archive`, true, false, false},
		{"nested unsupported", &ckpterr.FormatError{"torch-zip", "m.pt", "", 64,
			&ckpterr.FormatError{"pickle", "", "", 0, fmt.Errorf("%w: protocol 6", ckpterr.ErrUnsupported)}},
			`m.pt: torch-zip: byte 64: pickle: byte 0: unsupported: protocol 6`, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error = fmt.Errorf("converting: %w", tc.err)
			if got := tc.err.Error(); got != tc.text {
				t.Errorf("Error() = %q, want %q", got, tc.text)
			}
			if got := errors.Is(err, ckpterr.ErrCorrupt); got != tc.corrupt {
				t.Errorf("Is(ErrCorrupt) = %v, want %v", got, tc.corrupt)
			}
			if got := errors.Is(err, ckpterr.ErrUnsupported); got != tc.unsup {
				t.Errorf("Is(ErrUnsupported) = %v, want %v", got, tc.unsup)
			}
			if got := errors.Is(err, ckpterr.ErrDangerous); got != tc.danger {
				t.Errorf("Is(ErrDangerous) = %v, want %v", got, tc.danger)
			}
			var fe *ckpterr.FormatError
			if !errors.As(err, &fe) || fe != tc.err {
				t.Errorf("errors.As found %v, want the error itself", fe)
			}
		})
	}
}

func TestCorruptCause(t *testing.T) {
	for _, tc := range []struct {
		cause error
		want  bool
	}{
		{nil, false},
		{errors.New("data_offsets overlap"), true},
		{io.ErrUnexpectedEOF, true},
		{fmt.Errorf("record: %w", ckpterr.ErrCorrupt), true},
		{fmt.Errorf("%w: transform zlib", ckpterr.ErrUnsupported), false},
		{fmt.Errorf("GLOBAL os.system: %w", ckpterr.ErrDangerous), false},
		{&fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}, false},
		{os.NewSyscallError("pread", syscall.EIO), false},
		{fmt.Errorf("mmap: %w", syscall.ENOMEM), false},
		{context.Canceled, false},
		{fmt.Errorf("reading 512 bytes at byte 0: %w", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}), false},
		{fmt.Errorf("gs://b/m.pt: %w", httpError(503)), false},
		{fmt.Errorf("reading: %w", context.DeadlineExceeded), false},
	} {
		if got := ckpterr.CorruptCause(tc.cause); got != tc.want {
			t.Errorf("CorruptCause(%v) = %v, want %v", tc.cause, got, tc.want)
		}
	}
}

// httpError is an object store's answer, as the bucket clients' errors report it.
type httpError int

func (e httpError) Error() string       { return fmt.Sprintf("HTTP %d", int(e)) }
func (e httpError) HTTPStatusCode() int { return int(e) }
