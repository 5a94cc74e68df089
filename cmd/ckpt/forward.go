package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ckpt-dev/ckpt/formats/safetensors"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/internal/regular"
	"github.com/ckpt-dev/ckpt/verify/forward"
	"github.com/ckpt-dev/ckpt/verify/forward/kernel"
	"github.com/spf13/cobra"
)

// forwardReport is the --json output of ckpt forward.
type forwardReport struct {
	Path      string    `json:"path"`
	ModelType string    `json:"model_type"`
	Precision string    `json:"precision"`
	Kernel    string    `json:"kernel"`
	Tokens    []int     `json:"tokens"`
	Vocab     int       `json:"vocab"`
	Out       string    `json:"out,omitempty"`
	Top1      []int     `json:"top1"`
	Top1Logit []float32 `json:"top1_logit"`
	Seconds   float64   `json:"seconds"`
}

func newForwardCmd() *cobra.Command {
	var (
		tokens, promptIDs, out, precision, config string
		keepFP8, force, asJSON                    bool
	)
	cmd := &cobra.Command{
		Use: "forward PATH --tokens 1,5,9 | --prompt-ids FILE",
		Example: `  ckpt forward Qwen3-0.6B/ --tokens 151644,872,198
  # as a TPU computes (bf16 inputs, fp32 accumulation), logits to a file
  ckpt forward model_tpu/ --tokens 1,5,9 --precision tpu --out logits.safetensors`,
		Short: "Run a decoder-only model's forward pass in Go and write its logits",
		Long: `forward reads the model at PATH (a Hugging Face folder, a torch.save file or safetensors
file with config.json beside it, a DCP directory: anything ckpt reads) and runs its forward
pass on the token ids --tokens (or those of --prompt-ids FILE) at positions 0…T−1, as
transformers does with eager attention. Supported model types: ` + strings.Join(forward.Supported(), ", ") + `.

Memory stays bounded for long inputs: attention runs a block of queries and keys at a time
(never a T×T score matrix), feed-forward blocks a block of positions at a time, and the
logits are written and reduced to top-1 a block of positions at a time; what must be held
per position (the residual stream, one layer's keys and values) is estimated first and a
sequence that would not fit in half the machine's memory is refused before anything is
allocated.

--out FILE writes the float32 logits [1, T, vocab] as the tensor "logits" of a safetensors
file (written under a temporary name and renamed when complete; --force replaces an existing
FILE). The command prints each position's most likely next token.

--precision float32 (default) widens every weight exactly and computes in float32, matching
transformers' float32 forward; --precision tpu rounds the inputs of every matrix product to
bfloat16 and accumulates in float32, as a TPU's matrix unit does at default precision
(--keep-fp8: FP8 weights enter the products as code×scale instead of being dequantized to
bfloat16, as on a TPU with FP8 matrix units).`,
		Args: positional("PATH", "ckpt forward Qwen3-0.6B/ --tokens 151644,872,198"),
		RunE: func(cmd *cobra.Command, args []string) error {
			start := time.Now()
			var ids []int
			var err error
			switch {
			case tokens != "" && promptIDs != "":
				return usage(fmt.Errorf("--tokens and --prompt-ids exclude each other"))
			case !cmd.Flags().Changed("tokens") && promptIDs == "":
				return usage(fmt.Errorf("%s needs --tokens or --prompt-ids (e.g. ckpt forward Qwen3-0.6B/ --tokens 151644,872,198)", cmd.CommandPath()))
			case promptIDs != "":
				b, err := regular.ReadFile(promptIDs, maxPromptIDs)
				if err != nil {
					return err
				}
				if ids, err = parsePromptIDs(string(b)); err != nil {
					return fmt.Errorf("%s: %w", promptIDs, err)
				}
			default:
				if ids, err = parseTokens(tokens); err != nil {
					return usage(err)
				}
			}
			prec, err := forward.ParsePrecision(precision)
			if err != nil {
				return usage(fmt.Errorf("--precision: %w", err))
			}
			if keepFP8 && prec != forward.TPU {
				return usage(fmt.Errorf("--keep-fp8 applies to --precision tpu only"))
			}
			opts := forward.Options{Precision: prec, KeepFP8: keepFP8}
			if config != "" {
				if opts.Config, err = regular.ReadFile(config, maxConfig); err != nil {
					return err
				}
			}
			if args[0], err = sourcePath(args[0]); err != nil {
				return err
			}
			m, err := forward.Open(cmd.Context(), args[0], opts)
			if err != nil {
				return err
			}
			defer m.Close()
			st, err := m.Run(cmd.Context(), ids)
			if err != nil {
				return err
			}
			vocab := m.Config().Vocab
			rep := forwardReport{Path: args[0], ModelType: m.Config().ModelType, Precision: prec.String(),
				Kernel: kernel.Current(), Tokens: ids, Vocab: vocab, Out: out}
			// The logits are computed a block of positions at a time — written to --out and
			// reduced to each position's top-1 as they come — never held whole.
			lw := &logitsWriter{st: st, vocab: vocab, top: func(row []float32) {
				best := 0
				for j, v := range row {
					if v > row[best] || math.IsNaN(float64(row[best])) {
						best = j
					}
				}
				rep.Top1 = append(rep.Top1, best)
				rep.Top1Logit = append(rep.Top1Logit, row[best])
			}}
			if out != "" {
				err = writeLogits(cmd.Context(), out, lw, len(ids), vocab, force)
			} else {
				_, err = lw.WriteTo(io.Discard)
			}
			if err != nil {
				return err
			}
			rep.Seconds = time.Since(start).Seconds()
			w := cmd.OutOrStdout()
			if asJSON {
				return printJSON(w, rep)
			}
			fmt.Fprintf(w, "%s: %s, %d tokens, vocab %d, %s precision (%s kernels), %.2f s\n",
				rep.Path, rep.ModelType, len(ids), vocab, rep.Precision, rep.Kernel, rep.Seconds)
			tw := newTable(w, 0)
			fmt.Fprintln(tw, "POSITION\tTOKEN\tNEXT (TOP-1)\tLOGIT")
			for t, id := range ids {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%.4f\n", t, id, rep.Top1[t], rep.Top1Logit[t])
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if out != "" {
				fmt.Fprintf(w, "logits [1, %d, %d] float32 written to %s\n", len(ids), vocab, out)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tokens, "tokens", "", "comma-separated token ids")
	f.StringVar(&promptIDs, "prompt-ids", "", "a file of token ids (separated by spaces, commas or newlines; a JSON list works)")
	f.StringVar(&out, "out", "", "write the logits to this safetensors file")
	f.StringVar(&precision, "precision", "float32", "float32 or tpu")
	f.StringVar(&config, "config", "", "the model's config.json (default: in the folder or beside the file)")
	f.BoolVar(&keepFP8, "keep-fp8", false, "with --precision tpu, multiply FP8 weights as FP8 codes times scales")
	f.BoolVar(&force, "force", false, "replace an existing --out file")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// parseTokens reads "1,5,9" (spaces allowed).
func parseTokens(s string) ([]int, error) {
	var ids []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("--tokens: %q is not a token id", f)
		}
		ids = append(ids, v)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("--tokens: no token ids")
	}
	return ids, nil
}

// logitsWriter writes a run's logits [T, vocab] as little-endian float32, computing them
// a block of positions at a time, and hands each row to top.
type logitsWriter struct {
	st    *forward.States
	vocab int
	top   func(row []float32)
}

func (l *logitsWriter) WriteTo(w io.Writer) (int64, error) {
	T, V := l.st.Len(), l.vocab
	step := max(1, (64<<20)/(4*V))
	buf := make([]float32, min(step, T)*V)
	var n int64
	for t0 := 0; t0 < T; t0 += step {
		t1 := min(t0+step, T)
		rows := buf[:(t1-t0)*V]
		if err := l.st.Logits(rows, t0, t1); err != nil {
			return n, err
		}
		for i := range t1 - t0 {
			l.top(rows[i*V : (i+1)*V])
		}
		k, err := safetensors.Float32s(rows).WriteTo(w)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// writeLogits writes logits [1, T, vocab] as the float32 tensor "logits" of a safetensors
// file, atomically.
func writeLogits(ctx context.Context, path string, logits io.WriterTo, T, vocab int, force bool) error {
	f, err := atomicfile.Create(ctx, path, atomicfile.FileOptions{Force: force})
	if err != nil {
		return err
	}
	defer f.Abort()
	w, err := safetensors.NewWriter(f, []safetensors.TensorInfo{{Name: "logits", DType: "F32", Shape: []int64{1, int64(T), int64(vocab)}}}, nil)
	if err != nil {
		return err
	}
	if err := w.WriteTensor("logits", logits); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Commit()
}
