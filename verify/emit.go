package verify

import (
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/verify/forward"
)

// verifyTPU is the script EmitTorch writes.
//
//go:embed verify_tpu.py
var verifyTPU []byte

// Emitted files of EmitTorch.
const (
	EmitScript       = "verify_tpu.py"
	EmitReference    = "reference.safetensors"
	EmitConfig       = "config.json"
	EmitSourceConfig = "source_config.json"
)

// EmitOptions are what the script needs besides the logits.
type EmitOptions struct {
	// Checkpoint is the converted checkpoint the script loads by default, Source the
	// checkpoint it was converted from (which the script runs itself when ckpt could not).
	Checkpoint, Source string
	// Thresholds are the thresholds the script checks.
	Thresholds Thresholds
	// Version is ckpt's version, recorded in the reference.
	Version string
	// Force replaces existing files of the bundle.
	Force bool
}

// ErrNoTokens is EmitTorch's error when it has no token ids to run and cannot choose them.
var ErrNoTokens = errors.New("no token ids to run")

// EmitTorch writes into dir a self-contained check to run on a TPU VM with torch_tpu and
// transformers: verify_tpu.py (which loads the converted checkpoint onto the "tpu" device,
// runs the same tokens under torch.no_grad and prints the same report as Forward, exiting 5
// when the logits disagree), reference.safetensors (the tokens "tokens" int64 [1, T]; when
// the Go forward pass ran (lg.Computed), float32 [1, T, vocab] logits of the source in
// float32 "logits", of the source as ckpt emulates a TPU "source_tpu_logits" and of the
// converted checkpoint so emulated "tpu_logits"; the thresholds, both checkpoints' paths
// and the version in its metadata), config.json (the configuration the converted run uses)
// and source_config.json (the source's). For a model the Go pass has no family for, the
// script computes the source's logits itself — transformers on the CPU in float32, and on
// the device in float32 as the TPU's stand-in for ckpt's emulation — for any architecture
// transformers knows. The logits are written a block of positions at a time, never held
// whole. Each file appears under its name only when complete; the script is written last.
func EmitTorch(ctx context.Context, dir string, lg *Logits, opts EmitOptions) error {
	if len(lg.Tokens) == 0 {
		return fmt.Errorf("%w: config.json declares no vocab_size to choose them from", ErrNoTokens)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	th, err := json.Marshal(opts.Thresholds)
	if err != nil {
		return err
	}
	abs := func(p string) string {
		if p == "" || strings.Contains(p, "://") {
			return p
		}
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	T, V := int64(len(lg.Tokens)), int64(lg.Vocab)
	meta := map[string]string{"format": "pt", "thresholds": string(th), "checkpoint": abs(opts.Checkpoint), "source": abs(opts.Source),
		"ckpt_version": opts.Version}
	infos := []safetensors.TensorInfo{{Name: "tokens", DType: "I64", Shape: []int64{1, T}}}
	which := []string{"logits", "source_tpu_logits", "tpu_logits"}
	if lg.Computed() {
		for _, name := range which {
			infos = append(infos, safetensors.TensorInfo{Name: name, DType: "F32", Shape: []int64{1, T, V}})
		}
	}
	err = writeAtomic(ctx, filepath.Join(dir, EmitReference), opts.Force, func(w io.Writer) error {
		sw, err := safetensors.NewWriter(w, infos, meta)
		if err != nil {
			return err
		}
		ids := make([]byte, 0, 8*T)
		for _, t := range lg.Tokens {
			ids = binary.LittleEndian.AppendUint64(ids, uint64(t))
		}
		if err := sw.WriteTensor("tokens", bytesTo(ids)); err != nil {
			return err
		}
		if lg.Computed() {
			for i, name := range which {
				if err := sw.WriteTensor(name, logitsTo{lg, i}); err != nil {
					return err
				}
			}
		}
		return sw.Close()
	})
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{EmitConfig, lg.Config}, {EmitSourceConfig, lg.SourceConfig}} {
		if err := writeAtomic(ctx, filepath.Join(dir, f.name), opts.Force, func(w io.Writer) error {
			_, err := w.Write(f.data)
			return err
		}); err != nil {
			return err
		}
	}
	return writeAtomic(ctx, filepath.Join(dir, EmitScript), opts.Force, func(w io.Writer) error {
		_, err := w.Write(verifyTPU)
		return err
	})
}

// logitsTo writes one run's logits (0: the source in float32, 1: the source as a TPU
// computes it, 2: the converted checkpoint) a block of positions at a time.
type logitsTo struct {
	lg  *Logits
	run int
}

func (l logitsTo) WriteTo(w io.Writer) (int64, error) {
	lg := l.lg
	V, T := lg.Vocab, len(lg.Tokens)
	step := logitRows(V)
	buf := make([]float32, min(step, T)*V)
	var n int64
	for t0 := 0; t0 < T; t0 += step {
		t1 := min(t0+step, T)
		rows := buf[:(t1-t0)*V]
		s := []*forward.States{lg.ref, lg.refTPU, lg.got}[l.run]
		if err := s.Logits(rows, t0, t1); err != nil {
			return n, err
		}
		k, err := safetensors.Float32s(rows).WriteTo(w)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// writeAtomic writes path with fill, under a temporary name renamed when complete.
func writeAtomic(ctx context.Context, path string, force bool, fill func(io.Writer) error) error {
	f, err := atomicfile.Create(ctx, path, atomicfile.FileOptions{Force: force})
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := fill(f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Commit()
}

type bytesTo []byte

func (b bytesTo) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(b)
	return int64(n), err
}
