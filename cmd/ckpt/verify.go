package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ckpt-dev/ckpt/internal/regular"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/verify"
	"github.com/spf13/cobra"
)

// verifyReport is the --json output of ckpt verify.
type verifyReport struct {
	OK      bool                  `json:"ok"`
	Tensors *verify.ParityReport  `json:"tensors"`
	Forward *verify.ForwardReport `json:"forward,omitempty"`
	// Emitted is the folder --emit-torch wrote.
	Emitted string `json:"emitted,omitempty"`
	// ForwardDeferred says why the forward comparison was left to the emitted script (the
	// Go forward pass has no family for the model): the script computes both sides.
	ForwardDeferred string `json:"forward_deferred,omitempty"`
}

func newVerifyCmd() *cobra.Command {
	var (
		asJSON, noManifest, fwd, force bool
		mpath, tokens, promptIDs       string
		tpuGen, config, emit           string
		th                             = verify.DefaultThresholds()
	)
	def := verify.DefaultThresholds()
	cmd := &cobra.Command{
		Use: "verify SRC DST",
		Example: `  # DST holds what converting SRC should give, tensor by tensor
  ckpt verify checkpoint.pt checkpoint_tpu.pt
  # and computes what SRC does, as a model
  ckpt verify --forward --tokens 1,5,9 Qwen3-8B/ Qwen3-8B-tpu/`,
		Short: "Prove a converted checkpoint holds what its source does, tensor by tensor and (--forward) as a model",
		Long: `verify compares the checkpoint DST with the checkpoint SRC it was converted from (any two
formats ckpt reads; it also tells whether two checkpoints are the same model).

Tensor parity (always): every source tensor — weights, buffers, optimizer state — is paired
with its counterpart in DST through the conversion's renames, the stripping of DDP and
torch.compile prefixes and the dropping of tied aliases (lm_head.weight); its dtype and shape
are checked, and its value compared bit for bit with the source's, or with exactly what the
conversion's cast (torch's rounding) or dequantization (the reference dequantizer) gives.
The conversion's options are read from DST's ckpt-manifest.json (its conversion record);
without one (--no-manifest) names are matched as convert's defaults give them and any float
cast or dequantization DST shows is reproduced and checked. A per-device DST (a multi-rank
DCP directory, a per-device safetensors folder) is compared as the tensors its shards
reassemble, a mismatch naming the rank whose piece holds it. Every mismatch is reported:
tensor, first differing element, both values.

--forward also runs the model (a decoder-only transformers model with config.json) on the
same tokens twice: the source in float32, quantized weights dequantized exactly, and DST as
a TPU runs it — every matrix product's inputs rounded to bfloat16, float32 accumulation, FP8
weights kept FP8 where the matrix units of --tpu-gen (default: the generation DST's manifest
records) take them — and compares the logits of every
position: max and mean absolute error, cosine similarity, KL divergence, top-1 agreement.
A per-device DST runs as its devices hold it: every matrix product is computed rank by rank
from the pieces they store and combined as the collectives would.
A position agrees when its KL divergence, cosine similarity and largest logit error (relative
to the spread of the source's logits) are within --max-kl, --min-cosine and --max-abs-rel and
its top-1 token is the source's (or a near tie of it) — against the source in float32, or
else against the source run as a TPU runs it (the TPU's arithmetic, not the conversion, moved
such a position: bfloat16 rounding flips near ties in a mixture of experts' routing). The
check passes when at least --min-agree of the positions agree. Defaults are measured on
correct and deliberately broken conversions; see docs/verify.md. Tokens: --tokens 1,5,9, --prompt-ids FILE (ids separated by spaces, commas or
newlines; a JSON list works), or 32 fixed ids spread over the vocabulary.

--emit-torch DIR writes DIR/verify_tpu.py, DIR/reference.safetensors, DIR/config.json and
DIR/source_config.json: on a TPU VM with torch_tpu and transformers, "python3
DIR/verify_tpu.py [DST]" loads DST onto the tpu device, runs the same tokens under
torch.no_grad and prints the same report against the source's logits (implies --forward).
For a model whose family the Go forward pass lacks (--forward alone says so), the script
computes both sides itself — the source with transformers on the CPU in float32 and on the
device, DST on the device — for any architecture transformers knows.

Exits 0 on parity (and, with --forward, agreement), 5 naming every problem otherwise.`,
		Args: positional("SRC DST", "ckpt verify model.pt model_tpu.safetensors"),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := sourcePath(args[0])
			if err != nil {
				return err
			}
			dst := args[1] // a conversion's output: a path or a bucket URL, never a hub cache id
			if emit != "" {
				fwd = true
			}
			var fopts verify.ForwardOptions
			if err := forwardFlags(cmd, fwd, tokens, promptIDs, tpuGen, config, &fopts); err != nil {
				return err
			}
			if th.MaxKL < 0 || th.MaxAbsRel < 0 || th.MinAgree < 0 || th.MinAgree > 1 || th.MinCosine > 1 {
				return usage(fmt.Errorf("thresholds: --max-kl and --max-abs-rel must be ≥ 0, --min-agree within [0, 1], --min-cosine ≤ 1"))
			}
			fopts.Thresholds = &th
			popts := verify.ParityOptions{Manifest: mpath}
			switch {
			case noManifest && mpath != "":
				return usage(fmt.Errorf("--manifest and --no-manifest exclude each other"))
			case noManifest:
				popts.Manifest = "-"
			}
			fopts.Manifest = popts.Manifest
			rep := &verifyReport{}
			if rep.Tensors, err = verify.Parity(cmd.Context(), src, dst, popts); err != nil {
				return err
			}
			var lg *verify.Logits
			if fwd {
				rep.Forward, lg, err = verify.Forward(cmd.Context(), src, dst, fopts)
				var nf *verify.NoFamilyError
				if errors.As(err, &nf) && emit != "" {
					// The emitted script runs both sides with transformers instead.
					rep.ForwardDeferred, err = nf.Err.Error(), nil
				}
				if err != nil {
					return err
				}
				defer lg.Close()
			}
			if emit != "" {
				eo := verify.EmitOptions{Checkpoint: dst, Source: src, Thresholds: th, Version: toolVersion(), Force: force}
				if err := verify.EmitTorch(cmd.Context(), emit, lg, eo); err != nil {
					return err
				}
				rep.Emitted = emit
			}
			var errs []error
			errs = append(errs, rep.Tensors.Err())
			if rep.Forward != nil {
				errs = append(errs, rep.Forward.Err())
			}
			failed := errors.Join(errs...)
			rep.OK = failed == nil
			out := cmd.OutOrStdout()
			if asJSON {
				if err := printJSON(out, rep); err != nil {
					return err
				}
			} else {
				if err := printVerify(out, rep); err != nil {
					return err
				}
			}
			return failed
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&mpath, "manifest", "", "read the conversion's options from this manifest (default: DST's own, when it has one)")
	f.BoolVar(&noManifest, "no-manifest", false, "ignore DST's manifest: match names as convert's defaults give them, infer casts and dequantization")
	f.BoolVar(&fwd, "forward", false, "also run both models on the same tokens and compare their logits")
	f.StringVar(&tokens, "tokens", "", "comma-separated token ids for --forward")
	f.StringVar(&promptIDs, "prompt-ids", "", "a file of token ids for --forward")
	f.StringVar(&tpuGen, "tpu-gen", "", "the TPU generation DST is for (v4, v5e, v5p, v6e, tpu7x; default: the one its manifest records): FP8 weights it runs natively stay FP8 in the forward")
	f.StringVar(&config, "config", "", "the model's config.json (default: each side's own, or the other side's)")
	f.Float64Var(&th.MaxKL, "max-kl", def.MaxKL, "largest KL divergence of the next-token distributions at any position, in nats")
	f.Float64Var(&th.MinCosine, "min-cosine", def.MinCosine, "smallest cosine similarity of the logits at any position")
	f.Float64Var(&th.MinAgree, "min-agree", def.MinAgree, "smallest fraction of positions that must agree (within every threshold, top-1 token agreeing or a near tie)")
	f.Float64Var(&th.MaxAbsRel, "max-abs-rel", def.MaxAbsRel, "largest absolute logit error at any position, relative to the spread of the source's logits there")
	f.StringVar(&emit, "emit-torch", "", "write a Python check to run on a TPU VM, with the reference logits, into this folder")
	f.BoolVar(&force, "force", false, "replace the files of an earlier --emit-torch")
	return cmd
}

// forwardFlags checks the flags of the forward comparison and fills opts.
func forwardFlags(cmd *cobra.Command, fwd bool, tokens, promptIDs, tpuGen, config string, opts *verify.ForwardOptions) error {
	if !fwd {
		for _, name := range []string{"tokens", "prompt-ids", "tpu-gen", "config", "max-kl", "min-cosine", "min-agree", "max-abs-rel"} {
			if cmd.Flags().Changed(name) {
				return usage(fmt.Errorf("--%s applies to --forward (or --emit-torch)", name))
			}
		}
		return nil
	}
	var err error
	switch {
	case tokens != "" && promptIDs != "":
		return usage(fmt.Errorf("--tokens and --prompt-ids exclude each other"))
	case tokens != "":
		if opts.Tokens, err = parseTokens(tokens); err != nil {
			return usage(err)
		}
	case promptIDs != "":
		b, err := regular.ReadFile(promptIDs, maxPromptIDs)
		if err != nil {
			return err
		}
		if opts.Tokens, err = parsePromptIDs(string(b)); err != nil {
			return fmt.Errorf("%s: %w", promptIDs, err)
		}
	}
	if tpuGen != "" {
		if opts.Generation, err = runtime.LookupGeneration(tpuGen); err != nil {
			return usage(fmt.Errorf("--tpu-gen: %w", err))
		}
	}
	if config != "" {
		if opts.Config, err = regular.ReadFile(config, maxConfig); err != nil {
			return err
		}
	}
	return nil
}

// parsePromptIDs reads token ids separated by whitespace or commas, JSON list brackets
// allowed ("[[1, 5, 9]]").
func parsePromptIDs(s string) ([]int, error) {
	s = strings.NewReplacer("[", " ", "]", " ", ",", " ").Replace(s)
	var ids []int
	for i, f := range strings.Fields(s) {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			// Named by position, not repeated: a file that is not a list of ids may be
			// anything (a link to a secret).
			return nil, fmt.Errorf("entry %d (of %d bytes) is not a token id", i+1, len(f))
		}
		ids = append(ids, v)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no token ids")
	}
	return ids, nil
}

// printVerify writes the human-readable report.
func printVerify(w io.Writer, rep *verifyReport) error {
	printParity(w, rep.Tensors, "")
	if f := rep.Forward; f != nil {
		conv := f.Converted
		if f.Generation != "" {
			conv += " for " + f.Generation
		}
		fmt.Fprintf(w, "forward: %s, %d tokens, source %s vs converted %s (%s kernels), %.2f s\n", f.ModelType, len(f.Tokens), f.Reference, conv, f.Kernel, f.Seconds)
		if s := f.Shards; s != nil {
			fmt.Fprintf(w, "forward: converted side from %d ranks' shards (%s of %s, each product computed per device and combined as the collectives would)\n",
				s.Ranks, plural(s.Pieces, "piece"), plural(s.Tensors, "tensor"))
		}
		tw := newTable(w, tabwriter.AlignRight)
		fmt.Fprintln(tw, "POS\tTOKEN\tMAX ABS\tMEAN ABS\tCOSINE\tKL\tTOP-1 SRC/DST\t\t")
		for i, p := range f.Positions {
			mark := ""
			switch {
			case !p.Agrees:
				mark = "outside: " + strings.Join(p.Outside, ", ")
			case p.ByTPU:
				mark = "agrees with the source on a TPU"
			}
			fmt.Fprintf(tw, "%d\t%d\t%.3g\t%.3g\t%.6f\t%.3g\t%d/%d\t%s\t\n", i, p.Token, p.MaxAbs, p.MeanAbs, p.Cosine, p.KL, p.Top1Ref, p.Top1Got, mark)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "forward: %s\n", f.LogitsReport)
	}
	if rep.ForwardDeferred != "" {
		fmt.Fprintf(w, "forward: not run here (%s): %s/%s computes both sides with transformers, the source on the CPU in float32 and DST on the device\n",
			rep.ForwardDeferred, rep.Emitted, verify.EmitScript)
	}
	if rep.Emitted != "" {
		fmt.Fprintf(w, "wrote %s/%s, %s, %s and %s: on a TPU VM run python3 %s/%s\n", rep.Emitted, verify.EmitScript, verify.EmitReference,
			verify.EmitConfig, verify.EmitSourceConfig, rep.Emitted, verify.EmitScript)
	}
	return nil
}

// printParity writes a parity report and those of the files taken along.
func printParity(w io.Writer, r *verify.ParityReport, indent string) {
	fmt.Fprintf(w, "%s%s (%s) vs %s (%s); conversion: %s", indent, r.Src, r.SrcFormat, r.Dst, r.DstFormat, r.Conversion)
	if r.Manifest != "" {
		fmt.Fprintf(w, " (from %s)", r.Manifest)
	}
	fmt.Fprintln(w)
	verdict := "PARITY"
	if len(r.Problems) > 0 {
		verdict = strings.ToUpper(plural(len(r.Problems), "problem"))
	}
	dropped := ""
	if len(r.Dropped) > 0 {
		dropped = ", " + plural(len(r.Dropped), "CUDA RNG state") + " left out"
	}
	values := ""
	switch {
	case r.Values > 0:
		values = fmt.Sprintf("; %s equal", plural(r.Values, "other value"))
	case r.NotCompared > 0:
		values = fmt.Sprintf("; %s not compared (%s holds tensors only)", plural(r.NotCompared, "other value"), r.DstFormat)
	}
	if r.Replicas > 0 {
		values += fmt.Sprintf("; %s of replicated pieces compared", plural(r.Replicas, "further rank copy"))
	}
	tied := "no tied aliases"
	switch n := len(r.Tied); {
	case n == 1:
		tied = "1 tied alias"
	case n > 1:
		tied = fmt.Sprintf("%d tied aliases", n)
	}
	fmt.Fprintf(w, "%stensors: %d paired, %d equal (%d exact, %d cast, %d dequantized), %s%s, %s compared%s — %s\n",
		indent, r.Pairs, r.Equal, r.Exact, r.Cast, r.Dequantized, tied, dropped, humanBytes(r.Bytes), values, verdict)
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "%swarning: %s\n", indent, warn)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "%s  %s\n", indent, p)
	}
	for _, a := range r.Alongside {
		printParity(w, a, indent+"  ")
	}
}

// maxConfig bounds a config.json given with --config (as the one beside a checkpoint is);
// maxPromptIDs a --prompt-ids file.
const (
	maxConfig    = 64 << 20
	maxPromptIDs = 64 << 20
)
