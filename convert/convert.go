// Package convert is ckpt's main job as a library: open a checkpoint in any supported format,
// remap it (device tags, dtypes, names, selection), and write it as a torch.save file, a
// safetensors file or Hugging Face folder, or a torch.distributed.checkpoint directory that
// real PyTorch loads. Tensors stream from the mapped source to the output; nothing is held
// whole in memory, and the output appears under its final name only when complete.
package convert

import (
	"fmt"
	"hash"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/statedict"
)

// Output formats.
const (
	Torch       = "torch"
	Safetensors = "safetensors"
	DCP         = "dcp"
)

// Options describe one conversion.
type Options struct {
	Src, Dst string
	// Format is Torch, Safetensors or DCP.
	Format string
	Remap  remap.Options
	// MaxShardSize splits a safetensors folder output into shards of at most this many bytes
	// (a larger tensor gets a shard of its own); 0 means 5 GB, transformers' default.
	MaxShardSize int64
	// Force allows replacing an existing destination.
	Force bool
	// Progress, if set, is told how many tensor bytes were written so far.
	Progress func(done, total int64)
	// ToolVersion is recorded in the manifest.
	ToolVersion string
	// Args is the command line recorded in the manifest.
	Args []string
	// Dequantize is DequantizeNone, DequantizeAll or DequantizeAuto; dequantized tensors
	// take Remap.DType (bfloat16 when unset).
	Dequantize string
	// TPUGen is the target generation DequantizeAuto decides for.
	TPUGen quant.TPUGen
}

// Summary reports what a conversion did; it is also the --json output.
type Summary struct {
	Src       string            `json:"src"`
	Dst       string            `json:"dst"`
	SrcFormat string            `json:"src_format"`
	Format    string            `json:"format"`
	Files     []string          `json:"files"`
	Manifest  string            `json:"manifest"`
	Tensors   int               `json:"tensors"`
	Bytes     int64             `json:"bytes"`
	Seconds   float64           `json:"seconds"`
	Remap     *remap.Report     `json:"remap"`
	Tied      map[string]string `json:"tied,omitempty"`
	Warnings  []string          `json:"warnings,omitempty"`
	// Quantization says what happened to a quantized checkpoint's tensors and config.
	Quantization *QuantReport `json:"quantization,omitempty"`
	// ConfigDType is set ("float32 → bfloat16") when config.json's dtype was rewritten to
	// the --dtype the weights were cast to.
	ConfigDType string `json:"config_dtype,omitempty"`
	// Alongside summarizes the conversion of each training-state file of an HF Trainer
	// checkpoint folder (optimizer.pt, scheduler.pt, rng_state.pth, …) into the output folder.
	Alongside []*Summary `json:"alongside,omitempty"`
}

// Run performs the conversion.
func Run(opts Options) (*Summary, error) {
	start := time.Now()
	opts.Dst = filepath.Clean(opts.Dst) // "DST/" names the folder DST
	if err := checkApart(opts.Src, opts.Dst); err != nil {
		return nil, err
	}
	ck, err := formats.Open(opts.Src)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	qroot, q, err := prepareQuantized(ck, opts)
	if err != nil {
		return nil, err
	}
	root, rep, err := remap.Apply(qroot, opts.Remap)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", opts.Src, err)
	}
	if err := unhide(root); err != nil {
		return nil, err
	}
	sum := &Summary{Src: opts.Src, Dst: opts.Dst, SrcFormat: ck.Format, Format: opts.Format, Remap: rep, Warnings: rep.Warnings}
	sum.Quantization, sum.Warnings = q.report, append(sum.Warnings, q.warnings...)
	// A folder output takes an HF Trainer checkpoint's training state along, converted; the
	// other files of other layouts are left out.
	folderOut := opts.Format == Safetensors && !strings.HasSuffix(opts.Dst, ".safetensors")
	var alongside, left []string
	for _, f := range ck.Ignored {
		if folderOut && trainerState(f) {
			alongside = append(alongside, f)
		} else {
			left = append(left, f)
		}
	}
	if len(ck.Outside) > 0 {
		sum.Warnings = append(sum.Warnings, fmt.Sprintf("left out %s: links leading outside the checkpoint folder, never read", strings.Join(ck.Outside, ", ")))
	}
	if len(left) > 0 {
		sum.Warnings = append(sum.Warnings, fmt.Sprintf("left out %s: weights or pickles outside the %s checkpoint that was read, not converted",
			strings.Join(left, ", "), ck.Format))
	}
	out := &statedict.Checkpoint{Format: ck.Format, Path: ck.Path, Root: root, Extras: ck.Extras, Files: ck.Files}
	tensors, err := out.Tensors()
	if err != nil {
		return nil, err
	}
	var total int64
	for _, t := range tensors {
		total += t.Tensor.NBytes()
	}
	if q.rewrite == nil {
		q.rewrite = map[string][]byte{}
	}
	if sum.ConfigDType, err = configDType(ck, q.rewrite, opts.Remap.DType); err != nil {
		return nil, err
	}
	if sum.ConfigDType != "" {
		sum.ConfigDType += " → " + opts.Remap.DType.String()
	}
	w := &writeJob{opts: opts, src: out, mapped: ck, sum: sum, total: total, rewrite: q.rewrite, alongside: alongside}
	switch opts.Format {
	case Torch:
		err = w.torch()
	case Safetensors:
		if strings.HasSuffix(opts.Dst, ".safetensors") {
			err = w.safetensorsFile()
		} else {
			err = w.safetensorsFolder()
		}
	case DCP:
		err = w.dcp()
	default:
		err = fmt.Errorf("unknown output format %q (torch, safetensors, dcp)", opts.Format)
	}
	if err != nil {
		return nil, err
	}
	sum.Tensors = len(tensors)
	sum.Seconds = time.Since(start).Seconds()
	return sum, nil
}

// writeJob carries the state of one write.
type writeJob struct {
	opts   Options
	src    *statedict.Checkpoint // the remapped tree to write
	mapped *statedict.Checkpoint // the opened source, whose mapped files back src's tensors
	sum    *Summary
	total  int64
	done   int64
	// sinceRelease counts bytes streamed since the source's resident pages were last dropped.
	sinceRelease int64
	// sums holds the xxhash64 digests fed while writing, keyed by the *statedict.Tensor or
	// *statedict.Storage whose bytes they saw, so the manifest reads nothing a second time.
	sums map[any]*xxhash.Digest
	// rewrite replaces extra files of a folder output (nil content: left out).
	rewrite map[string][]byte
	// alongside are training-state files of the source folder converted into the output
	// folder next to the weights.
	alongside []string
}

// releaseEvery is how many streamed bytes may stay resident from the mapped source before
// they are dropped (they remain in the page cache): it bounds the process's memory.
const releaseEvery = 32 << 20

// streamed accounts for n bytes read from the source and written out.
func (j *writeJob) streamed(n int64) {
	j.sinceRelease += n
	if j.sinceRelease >= releaseEvery {
		j.mapped.ReleaseMemory()
		j.sinceRelease = 0
	}
}

// progress wraps w so bytes written through it are reported and the source's pages released
// as they are consumed.
func (j *writeJob) progress(w io.Writer) io.Writer {
	return &progressWriter{w: w, job: j}
}

type progressWriter struct {
	w   io.Writer
	job *writeJob
}

// Write passes b on, accounting for it.
func (p *progressWriter) Write(b []byte) (int, error) {
	// Large slices of the mapped source are written in pieces so their pages can be
	// released between pieces: resident memory stays bounded even for huge tensors.
	var done int
	for done < len(b) {
		piece := b[done:min(len(b), done+releaseEvery/4)]
		n, err := p.w.Write(piece)
		done += n
		p.account(int64(n))
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// WriteRange passes file ranges on (fastcopy), accounting for them as written.
func (p *progressWriter) WriteRange(r statedict.Range) (int64, error) {
	n, err := statedict.WriteRange(p.w, r)
	p.account(n)
	return n, err
}

func (p *progressWriter) account(n int64) {
	p.job.done += n
	p.job.streamed(n)
	if p.job.opts.Progress != nil {
		p.job.opts.Progress(p.job.done, p.job.total)
	}
}

// digest returns a new digest for the bytes of key (a tensor or storage) as they are written.
func (j *writeJob) digest(key any) hash.Hash {
	if j.sums == nil {
		j.sums = map[any]*xxhash.Digest{}
	}
	d := xxhash.New()
	j.sums[key] = d
	return d
}

// summed returns t as an io.WriterTo that hashes its bytes for the manifest as it writes them.
func (j *writeJob) summed(t *statedict.Tensor) io.WriterTo {
	return writerToFunc(func(w io.Writer) (int64, error) {
		return t.WriteTo(&statedict.Tee{W: w, Sum: j.digest(t)})
	})
}

type writerToFunc func(io.Writer) (int64, error)

// WriteTo calls f.
func (f writerToFunc) WriteTo(w io.Writer) (int64, error) { return f(w) }

// trainerState reports whether a file is training state that an HF Trainer checkpoint folder
// holds next to the model (optimizer, LR scheduler, grad scaler, RNG states): torch.save
// files a folder output converts alongside the weights, so training resumes from the output.
// training_args.bin is not among them: it pickles a TrainingArguments object, code ckpt
// does not run.
func trainerState(name string) bool {
	switch name {
	case "optimizer.pt", "scheduler.pt", "scaler.pt":
		return true
	}
	return strings.HasPrefix(name, "rng_state") && strings.HasSuffix(name, ".pth")
}

// convertAlongside converts the training-state files of the source folder into dir, the
// output folder being written, with the same device and training-state options.
func (j *writeJob) convertAlongside(dir string) error {
	for _, name := range j.alongside {
		ro := j.opts.Remap
		sub, err := Run(Options{Src: filepath.Join(j.mapped.Path, name), Dst: filepath.Join(dir, name), Format: Torch,
			Force: true, ToolVersion: j.opts.ToolVersion, Args: j.opts.Args,
			Remap: remap.Options{Location: ro.Location, PlainData: ro.PlainData, OptimizerDType: ro.OptimizerDType, KeepCUDARNG: ro.KeepCUDARNG}})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		// Where they will be once the folder is in place.
		sub.Dst, sub.Manifest = filepath.Join(j.opts.Dst, name), filepath.Join(j.opts.Dst, filepath.Base(sub.Manifest))
		j.sum.Alongside = append(j.sum.Alongside, sub)
		j.sum.Files = append(j.sum.Files, name, filepath.Base(sub.Manifest))
		for _, w := range sub.Warnings {
			j.sum.Warnings = append(j.sum.Warnings, name+": "+w)
		}
	}
	return nil
}

// archiveName is the folder torch.save uses inside a zip written to path: the file name
// without its last extension.
func archiveName(path string) string {
	base := filepath.Base(path)
	if ext := filepath.Ext(base); ext != "" && ext != base {
		base = strings.TrimSuffix(base, ext)
	}
	if base == "" || !isASCII(base) {
		return "archive"
	}
	return base
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
