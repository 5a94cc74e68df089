package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ckpt-dev/ckpt/convert"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/quant"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/spf13/cobra"
)

func newConvertCmd() *cobra.Command {
	var (
		to, format, mapLoc, dtype, sel, maxShard string
		renames, drops                           []string
		noStrip, force, resume, asJSON           bool
		verbose, strict, weightsOnly             bool
		optimDType                               string
		optimNames                               []string
		keepCUDARNG, zeroOptimizer               bool
		dequantize, tpuGen, compress             string
		shard                                    shardFlags
	)
	cmd := &cobra.Command{
		Use: "convert --to tpu SRC DST",
		Example: `  # a training checkpoint saved on cuda:0, for TorchTPU (optimizer, scheduler, RNG follow)
  ckpt convert --to tpu checkpoint.pt checkpoint_tpu.pt
  # a Hugging Face folder in bfloat16, as a Hugging Face folder
  ckpt convert --to tpu --dtype bf16 Llama-3.1-8B/ Llama-3.1-8B-tpu/
  # an FP8 checkpoint dequantized where the TPU has no FP8 matmul
  ckpt convert --to tpu --dequantize=auto --tpu-gen v6e Qwen3-8B-FP8/ Qwen3-8B-tpu/
  # one DCP file per device of a v6e-8, sharded FSDP-style
  ckpt convert --to tpu --topology v6e-8 --mesh fsdp=8 --format dcp checkpoint.pt ckpt_dcp/
  # host 2 of a 4-host job writes its own devices' files into a shared folder
  ckpt convert --to tpu --topology v5p-32 --format dcp --host-index 2 --num-hosts 4 ckpt.pt /shared/ckpt_dcp
  # the same, every host uploading its files to one bucket prefix
  ckpt convert --to tpu --topology v5p-32 --format dcp --num-hosts 4 --resume ckpt.pt gs://bucket/ckpt_dcp`,
		Short: "Convert a checkpoint for TorchTPU: device tags, dtypes, names, output format",
		Long: `convert reads SRC (any supported checkpoint file or folder, detected by content),
remaps it like torch.load's map_location — every storage tagged for the TPU device by
default — and writes DST as:
  --format torch        a torch.save file torch.load(weights_only=True) reads
  --format safetensors  DST.safetensors, or a Hugging Face folder (sharded by --max-shard-size)
  --format dcp          a torch.distributed.checkpoint directory
With --topology and/or --mesh the output is per device, one file per rank (TorchTPU
process) holding that rank's DTensor shards: --format dcp writes __R_0.distcp per rank
(deduplicated as torch's planner does) and .metadata; --format safetensors one
rank-R-of-N.safetensors per rank and sharding.json. Placements are ckpt plan's (--plan FILE
overrides); optimizer moments follow their parameters. With --num-hosts N each host of a
multi-host job (--host-index, default $JOB_COMPLETION_INDEX or $TPU_WORKER_ID) writes its
own devices' files — into DST's shared partial folder, or straight to a gs:// or s3:// DST
prefix, each object carrying the conversion's run — reading only the source bytes they
hold, and seals its share; host 0 waits for the others (--host-wait), checks their shares,
writes the index and the manifest last (moving a local DST into place). A host killed
midway is run again with --resume to keep what it finished.
A folder DST killed midway (SIGKILL, a lost VM) is continued with --resume: the files
the killed run finished are checked and kept, the rest written. Into a gs:// or s3://
prefix the kept objects are not uploaded again, a resume whose source or options differ
from the killed run's is refused, and since a bucket has no lock a killed run's leftovers
there are taken over only with --resume or --force. A single-file DST in a bucket cannot
be resumed: its object appears only once complete, so a killed run left nothing to keep.
The output is written in a partial folder beside it (.DST.partial), fsynced and moved into
place when complete; ckpt removes or keeps only what that folder's journal proves it made
there, and refuses, naming it, anything else it finds. An existing DST is replaced only
with --force, and only when its manifest proves every file an earlier conversion's (each
file's size and xxhash64). A manifest (DST.ckpt-manifest.json, or ckpt-manifest.json
inside a folder) records the source, options, version, each file's xxhash64 and an xxhash64
of every tensor.

SRC may also be a DeepSpeed ZeRO folder (consolidated as zero_to_fp32.py does), a diffusers
pipeline (written as a folder of components), a PEFT adapter folder, or an HF Trainer
checkpoint-N/ folder, whose optimizer, scheduler and RNG state follow the weights (files
alongside in a folder output, entries beside "model" in a torch file). Python objects that
only hold data (Lightning's AttributeDict, omegaconf configs, argparse and SimpleNamespace,
dataclasses) become plain dicts and lists; any other object is written as the source
pickled it, with a warning (--weights-only-safe makes it an error), never one that is code.

Quantized checkpoints (FP8, MXFP4, NVFP4 with their config.json quantization_config or
hf_quant_config.json) pass through unchanged with their scales and config, which --dtype
leaves alone. --dequantize unpacks every quantized tensor to --dtype (bfloat16 by default)
exactly as the reference dequantizers do, under the names transformers gives them after
loading; scales are dropped and the quantization config removed. --dequantize=auto
--tpu-gen GEN unpacks only what that TPU generation's matrix units do not take natively
(ckpt devices lists them: float8_e4m3fn on TPU7x only, float8_e5m2 from v5e on, FP4 nowhere). A checkpoint that looks quantized but whose config is missing or
disagrees with its tensors is refused when dequantizing or casting.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 3 && cmd.Flags().Changed("dequantize") && (args[0] == "auto" || args[0] == "all") {
				return usage(fmt.Errorf("--dequantize takes its value after '=': write --dequantize=%s", args[0]))
			}
			return positional("SRC DST", "ckpt convert --to tpu model.pt model_tpu.pt")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if args[0], err = sourcePath(args[0]); err != nil {
				return err
			}
			opts := convert.Options{Src: args[0], Dst: args[1], Force: force, Resume: resume, Strict: strict, WeightsOnly: weightsOnly, ToolVersion: toolVersion(),
				Args: recordedArgs(cmd, args, formatChoice, targetChoice, dequantizeChoice, tpuGenChoice, compressChoice, dtypeChoice("dtype"), dtypeChoice("optimizer-dtype"))}
			if to, err = targetChoice.parse(to); err != nil {
				return err
			}
			if format != "" {
				if format, err = formatChoice.parse(format); err != nil {
					return err
				}
			}
			opts.Format = formats.Layout(format)
			if compress != "" {
				if opts.Compress, err = compressChoice.parse(compress); err != nil {
					return err
				}
			}
			if opts.Plan.DType, err = parseDType(dtypeChoice("dtype"), dtype); err != nil {
				return err
			}
			if opts.Plan.OptimizerDType, err = parseDType(dtypeChoice("optimizer-dtype"), optimDType); err != nil {
				return err
			}
			if opts.Plan.OptimizerNames, err = parseOptimizerNames(optimNames); err != nil {
				return err
			}
			opts.Plan.KeepCUDARNG = keepCUDARNG
			opts.Plan.ZeROOptimizer = zeroOptimizer
			if dequantize != "" {
				d, err := dequantizeChoice.parse(dequantize)
				if err != nil {
					return err
				}
				opts.Plan.Dequantize = quant.Mode(d)
			}
			if opts.Plan.Dequantize == quant.DequantizeAuto && tpuGen == "" && shard.topology == "" {
				return usage(fmt.Errorf("--dequantize=auto needs --tpu-gen (%s) or --topology", runtime.GenerationNames()))
			}
			if tpuGen != "" && opts.Plan.Dequantize != quant.DequantizeAuto {
				return usage(fmt.Errorf("--tpu-gen applies to --dequantize=auto only"))
			}
			spec := runtime.Spec{Device: to, Generation: tpuGen}
			if cmd.Flags().Changed("map-location") {
				spec.MapLocation = mapLoc
				if spec.MapLocation == "" {
					return usage(fmt.Errorf("--map-location: empty"))
				}
			}
			if err := shard.apply(cmd.Flags(), &opts, spec, os.Getenv); err != nil {
				return err
			}
			opts.Plan.StripWrappers = !noStrip
			opts.Plan.PlainData = true
			opts.Plan.Select = sel
			for _, r := range renames {
				rr, err := remap.ParseRename(r)
				if err != nil {
					return err
				}
				opts.Plan.Renames = append(opts.Plan.Renames, rr)
			}
			for _, d := range drops {
				re, err := regexp.Compile(d)
				if err != nil {
					return usage(fmt.Errorf("--drop %q: %w", d, err))
				}
				opts.Plan.Drop = append(opts.Plan.Drop, re)
			}
			if maxShard != "" {
				if opts.MaxShardSize, err = parseSize(maxShard); err != nil {
					return err
				}
			}
			prog, err := newProgress(cmd.ErrOrStderr(), flagString(cmd, "progress"), quiet(cmd) || asJSON && !cmd.Flags().Changed("progress"), "converting")
			if err != nil {
				return err
			}
			opts.Progress = prog.report
			sum, err := convert.Run(cmd.Context(), opts)
			if prog.finish != nil {
				prog.finish()
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, sum)
			}
			errw := cmd.ErrOrStderr()
			if quiet(cmd) {
				out, errw = io.Discard, io.Discard
			}
			for _, w := range sum.Warnings {
				fmt.Fprintln(errw, "warning:", w.Message+warningHints[w.Kind])
				if verbose {
					for _, it := range w.Items {
						fmt.Fprintln(errw, "  -", it)
					}
				}
			}
			for _, s := range sum.Remap.Stripped {
				fmt.Fprintf(out, "stripped wrapper prefix %s\n", s)
			}
			for _, c := range sum.Remap.Converted {
				fmt.Fprintf(out, "converted %s\n", c)
			}
			for from, to := range sum.Remap.Locations {
				fmt.Fprintf(out, "storages tagged %s → %s\n", from, to)
			}
			if sum.Remap.Cast > 0 {
				fmt.Fprintf(out, "cast %s to %s\n", plural(sum.Remap.Cast, "tensor"), opts.Plan.DType)
			}
			if sum.ConfigDType != "" {
				fmt.Fprintf(out, "config.json dtype %s\n", sum.ConfigDType)
			}
			if len(sum.Remap.Dropped) > 0 {
				fmt.Fprintf(out, "dropped %d entries\n", len(sum.Remap.Dropped))
			}
			for _, o := range sum.Remap.Optimizers {
				fmt.Fprintf(out, "optimizer state %s (%s, %s form): %s%s\n", label(o.Path), o.Kind, form(o.Form, o.Flat), plural(o.Params, "parameter"), optimizerNote(o))
			}
			printCarried(out, sum.Remap.Carried)
			if q := sum.Quantization; q != nil {
				carried := slices.Contains(sum.Files, "config.json")
				switch {
				case len(q.Dequantized) > 0 && len(q.ConfigRemoved) > 0:
					fmt.Fprintf(out, "dequantized %s to %s; dropped %s; removed the quantization config from %s\n",
						plural(len(q.Dequantized), q.Method+" tensor"), q.DType, plural(len(q.Dropped), "scale tensor"), strings.Join(q.ConfigRemoved, ", "))
				case len(q.Dequantized) > 0:
					fmt.Fprintf(out, "dequantized %s to %s; dropped %s\n", plural(len(q.Dequantized), q.Method+" tensor"), q.DType, plural(len(q.Dropped), "scale tensor"))
				case carried:
					fmt.Fprintf(out, "kept %s with their scales and config\n", plural(len(q.Kept), q.Method+"-quantized tensor"))
				default:
					fmt.Fprintf(out, "kept %s with their scales\n", plural(len(q.Kept), q.Method+"-quantized tensor"))
				}
			}
			for _, r := range sum.Remap.Repaired {
				fmt.Fprintf(out, "repaired %s (a DCP round trip had turned the Counter's int keys into strings)\n", r)
			}
			for _, a := range sum.Alongside {
				fmt.Fprintf(out, "converted %s alongside (%s; manifest %s)\n", filepath.Base(a.Dst), plural(a.Tensors, "tensor"), filepath.Base(a.Manifest))
			}
			if sum.Resumed > 0 {
				fmt.Fprintf(out, "resumed: kept %s the interrupted conversion finished\n", plural(sum.Resumed, "file"))
			}
			if s := sum.Sharding; s != nil {
				fmt.Fprintf(out, "sharded %d tensors over %d ranks (mesh %s); the others are whole on every rank\n", s.Sharded, s.Ranks, s.Mesh)
			}
			if sum.Host != nil {
				printHost(out, sum)
				return nil
			}
			fmt.Fprintf(out, "wrote %s (%s, %s, %s) in %.2fs; manifest %s\n",
				sum.Dst, sum.Format, plural(sum.Tensors, "tensor"), humanBytes(sum.Bytes), sum.Seconds, sum.Manifest)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&to, "to", "tpu", "target runtime: tpu or cpu")
	f.StringVar(&format, "format", "", "output format: torch, safetensors or dcp (default: safetensors for a .safetensors DST, else torch)")
	f.StringVar(&mapLoc, "map-location", "", "device tag for every storage in place of the target's (tpu, cpu, tpu:N), or a table FROM=TO,… of exact tags")
	f.StringVar(&dtype, "dtype", "keep", "cast floating-point weights: keep, bfloat16, float32 or float16 (optimizer state and integers untouched)")
	f.StringVar(&optimDType, "optimizer-dtype", "keep", "cast optimizer moments (per-parameter state except step): keep, bfloat16, float32 or float16")
	f.StringArrayVar(&optimNames, "optimizer-names", nil, "[PATH=]FILE: the model names of an optimizer's parameters in id order, one per line, when shapes cannot map them")
	f.BoolVar(&keepCUDARNG, "keep-cuda-rng", false, "keep CUDA RNG states (as CPU byte tensors) instead of dropping them")
	f.BoolVar(&zeroOptimizer, "zero-optimizer", false, "read a DeepSpeed ZeRO folder with its optimizer state consolidated for resume: the output holds {\"model\": weights, \"optimizer\": state by parameter name}")
	f.StringVar(&dequantize, "dequantize", "", "unpack quantized tensors to --dtype (default bfloat16): --dequantize (all) or --dequantize=auto (with --tpu-gen)")
	f.Lookup("dequantize").NoOptDefVal = string(quant.DequantizeAll)
	shard.register(f)
	f.StringVar(&tpuGen, "tpu-gen", "", "target TPU generation for --dequantize=auto: v4, v5e, v5p, v6e or tpu7x (v7x)")
	f.StringArrayVar(&renames, "rename", nil, "REGEX=REPL applied to tensor names, in order (repeatable)")
	f.StringVar(&sel, "select", "", "keep only the sub-tree at this dotted key (e.g. state_dict)")
	f.StringArrayVar(&drops, "drop", nil, "drop entries whose flattened name matches REGEX (repeatable)")
	f.BoolVar(&noStrip, "no-strip-wrappers", false, "keep DDP module. and torch.compile _orig_mod. prefixes")
	f.StringVar(&maxShard, "max-shard-size", "", "largest safetensors shard in a folder output, e.g. 5GB, 500MB (default 5GB)")
	f.BoolVar(&force, "force", false, "replace an existing DST that an earlier conversion wrote (its manifest records every file's size and xxhash64)")
	f.BoolVar(&resume, "resume", false, "continue a folder output whose conversion was killed, keeping the files it finished (checked against their checksums), locally or in a bucket; with --num-hosts, this host's share")
	f.BoolVar(&asJSON, "json", false, "print a machine-readable summary")
	f.BoolVarP(&verbose, "verbose", "v", false, "list every value or file a warning concerns")
	f.String("progress", "auto", "progress on stderr: auto (a bar on a terminal, plain lines otherwise), always, never")
	f.BoolVar(&strict, "strict", false, "fail, writing nothing, when the output would not hold all of the source's data")
	f.StringVar(&compress, "compress", "", "compress a DCP output's items: zstd (torch's ZStandard extension, which DCP's loader reads with the zstandard module)")
	f.BoolVar(&weightsOnly, "weights-only-safe", false, "fail, writing nothing, when a Python object that is not plain data would be kept: the output then loads with torch.load(weights_only=True)")
	for _, c := range []choice{compressChoice, progressChoice, formatChoice, targetChoice, dequantizeChoice, tpuGenChoice, dtypeChoice("dtype"), dtypeChoice("optimizer-dtype")} {
		c.complete(cmd)
	}
	cmd.RegisterFlagCompletionFunc("map-location", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return []string{"tpu", "cpu", "cuda:0=tpu", "xla:0=tpu"}, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// parseDType parses a --dtype value: "keep" (or empty) is Invalid, no cast.
func parseDType(c choice, s string) (statedict.DType, error) {
	if s == "" {
		return statedict.Invalid, nil
	}
	v, err := c.parse(s)
	if err != nil || v == "keep" {
		return statedict.Invalid, err
	}
	d, _ := statedict.ParseDType(v)
	return d, nil
}

// warningHints point each kind of warning at the flag that changes it.
var warningHints = map[string]string{
	"cuda_rng_dropped":   " (--keep-cuda-rng keeps them)",
	"values_not_written": " (--format torch or dcp; --strict makes this an error)",
	"files_left_out":     " (--strict makes this an error)",
	"optimizer_unmapped": " (--optimizer-names FILE ties them)",
	"objects_kept":       " (--drop REGEX removes them; --weights-only-safe makes this an error)",
}

// parseSize parses sizes like "5GB", "500MB", "2GiB", "1048576".
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	u := strings.ToUpper(strings.TrimSpace(s))
	for _, un := range units {
		if num, ok := strings.CutSuffix(u, un.suffix); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || v <= 0 {
				return 0, fmt.Errorf("size %q: not a positive number of %s", s, un.suffix)
			}
			return int64(v * float64(un.mult)), nil
		}
	}
	v, err := strconv.ParseInt(u, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("size %q: use e.g. 5GB, 500MB, 2GiB", s)
	}
	return v, nil
}
