package verify

import (
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
)

// verifyTPU is the script EmitTorch writes.
//
//go:embed verify_tpu.py
var verifyTPU []byte

// Emitted files of EmitTorch.
const (
	EmitScript    = "verify_tpu.py"
	EmitReference = "reference.safetensors"
	EmitConfig    = "config.json"
)

// EmitOptions are what the script needs besides the logits.
type EmitOptions struct {
	// Checkpoint is the converted checkpoint the script loads by default.
	Checkpoint string
	// Thresholds are the thresholds the script checks.
	Thresholds Thresholds
	// Version is ckpt's version, recorded in the reference.
	Version string
	// Force replaces existing files of the bundle.
	Force bool
}

// EmitTorch writes into dir a self-contained check to run on a TPU VM with torch_tpu and
// transformers: verify_tpu.py (which loads the converted checkpoint onto the "tpu" device,
// runs the same tokens under torch.no_grad and prints the same report as Forward, exiting 5
// when the logits disagree), reference.safetensors (the tokens "tokens" int64 [1, T]; float32
// [1, T, vocab] logits of the source in float32 "logits", of the source as ckpt emulates a
// TPU "source_tpu_logits" and of the converted checkpoint so emulated "tpu_logits"; the
// thresholds, checkpoint path and version in its metadata) and config.json (the
// configuration the converted run used). Each file appears under its name only when
// complete; the script is written last.
func EmitTorch(dir string, lg *Logits, opts EmitOptions) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	th, err := json.Marshal(opts.Thresholds)
	if err != nil {
		return err
	}
	ckpt := opts.Checkpoint
	if abs, err := filepath.Abs(ckpt); err == nil {
		ckpt = abs
	}
	T, V := int64(len(lg.Tokens)), int64(lg.Vocab)
	meta := map[string]string{"format": "pt", "thresholds": string(th), "checkpoint": ckpt, "ckpt_version": opts.Version}
	infos := []safetensors.TensorInfo{
		{Name: "tokens", DType: "I64", Shape: []int64{1, T}},
		{Name: "logits", DType: "F32", Shape: []int64{1, T, V}},
		{Name: "source_tpu_logits", DType: "F32", Shape: []int64{1, T, V}},
		{Name: "tpu_logits", DType: "F32", Shape: []int64{1, T, V}},
	}
	err = writeAtomic(filepath.Join(dir, EmitReference), opts.Force, func(w io.Writer) error {
		sw, err := safetensors.NewWriter(w, infos, meta)
		if err != nil {
			return err
		}
		ids := make([]byte, 0, 8*T)
		for _, t := range lg.Tokens {
			ids = binary.LittleEndian.AppendUint64(ids, uint64(t))
		}
		for _, x := range []struct {
			name string
			w    io.WriterTo
		}{{"tokens", bytesTo(ids)}, {"logits", safetensors.Float32s(lg.Reference)}, {"source_tpu_logits", safetensors.Float32s(lg.SourceTPU)}, {"tpu_logits", safetensors.Float32s(lg.TPU)}} {
			if err := sw.WriteTensor(x.name, x.w); err != nil {
				return err
			}
		}
		return sw.Close()
	})
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, EmitConfig), opts.Force, func(w io.Writer) error {
		_, err := w.Write(lg.Config)
		return err
	}); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, EmitScript), opts.Force, func(w io.Writer) error {
		_, err := w.Write(verifyTPU)
		return err
	})
}

// writeAtomic writes path with fill, under a temporary name renamed when complete.
func writeAtomic(path string, force bool, fill func(io.Writer) error) error {
	f, err := atomicfile.Create(path, atomicfile.FileOptions{Force: force})
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
