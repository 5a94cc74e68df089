package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/plan"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/spf13/cobra"
)

// planReport is the --json output of ckpt plan: the memory plan and what was read.
type planReport struct {
	Path     string   `json:"path"`
	Format   string   `json:"format"`
	Warnings []string `json:"warnings,omitempty"`
	*runtime.MemoryPlan
}

func newPlanCmd() *cobra.Command {
	var topology, mesh, planFile, dtype string
	var optimNames []string
	var asJSON bool
	cmd := &cobra.Command{
		Use: "plan SRC --topology T [--mesh M]",
		Example: `  ckpt plan Llama-3.1-70B/ --topology v5p-32
  ckpt plan checkpoint.pt --topology v6e-8 --mesh dp=2,fsdp=4 --dtype bf16
  ckpt plan Qwen3-8B/ --topology tpu7x-8 --json`,
		Short: "Check whether a checkpoint fits a TPU slice: per-device HBM, raw and tile-padded",
		Long: `plan reads the tensor names, dtypes and shapes of a checkpoint (any format; no
tensor data) and lays them over the TPU slice --topology names (see ckpt devices) on the
logical mesh --mesh (default fsdp over every device): dp (replicate), fsdp (FSDP2: Shard(0)
of everything, after tp/ep), tp (Megatron-style tensor parallelism for the Llama, Qwen and
Mistral family: q/k/v/gate/up column-parallel, o/down row-parallel, embeddings and lm_head
vocabulary-parallel, norms replicated), ep (stacked MoE experts by expert) and cp. Ranks are
DeviceMesh's, row-major over the mesh, host-major over the devices. --plan FILE overrides
placements by name: {"rules": [{"match": REGEX, "placements": {"tp": "Replicate()"}}]}.
Optimizer moments follow their parameter (mapped as inspect --optimizer maps them); scalar
state stays on the host.

It prints each device's bytes of weights, optimizer state and other tensors, raw and padded
to TPU tiles (last two dimensions to (8·32/bits, 128); 16-bit arrays at 8 rows before
TPU7x), the fullest device against its HBM, and — when it does not fit — the changes that
would, each planned: more devices, FSDP, bfloat16 weights (--dtype), no optimizer state.
Activations, gradients and XLA's workspace come on top. Exit status 6: does not fit.`,
		Args: positional("PATH", "ckpt plan Llama-3.1-70B/ --topology v5p-32"),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec := runtime.Spec{Topology: topology, Mesh: mesh}
			var err error
			if planFile != "" {
				if spec.Plan, err = runtime.LoadPlan(planFile); err != nil {
					return err
				}
			}
			t, err := newTarget(spec)
			if err != nil {
				return err
			}
			opts := runtime.MemoryOptions{Topology: t.Topology, Mesh: t.Mesh, Plan: t.Plan}
			if opts.WeightDType, err = parseDType(dtypeChoice("dtype"), dtype); err != nil {
				return err
			}
			names, err := parseOptimizerNames(optimNames)
			if err != nil {
				return err
			}
			if args[0], err = sourcePath(args[0]); err != nil {
				return err
			}
			ck, err := formats.Open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer ck.Close()
			// A Trainer or accelerate folder's optimizer state takes device memory too.
			if ck, err = formats.WithTrainingState(cmd.Context(), ck); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			defer ck.Close()
			specs, warnings, err := tensorSpecs(ck, names)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			mp, err := runtime.PlanMemory(specs, opts)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			rep := planReport{Path: ck.Path, Format: ck.Format, Warnings: warnings, MemoryPlan: mp}
			if asJSON {
				err = printJSON(cmd.OutOrStdout(), rep)
			} else {
				err = printPlan(cmd.OutOrStdout(), &rep, len(specs))
			}
			if err != nil {
				return err
			}
			if err := mp.Err(); err != nil {
				return fmt.Errorf("%s on %s: %w", args[0], mp.AcceleratorType, err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&topology, "topology", "", "the TPU slice: v5p-32, v6e:4x4, tpu7x:2,2,1,2, … (see ckpt devices)")
	f.StringVar(&mesh, "mesh", "", "the logical mesh, outermost axis first: fsdp=8, dp=2,fsdp=2,tp=2 (default fsdp over every device)")
	f.StringVar(&planFile, "plan", "", "JSON plan file whose rules override the built-in placements by tensor name")
	f.StringVar(&dtype, "dtype", "keep", "plan floating-point weights cast to: keep, bfloat16, float32 or float16 (as convert --dtype)")
	f.StringArrayVar(&optimNames, "optimizer-names", nil, "[PATH=]FILE: the model names of an optimizer's parameters in id order, one per line")
	f.BoolVar(&asJSON, "json", false, "print the plan as JSON")
	cmd.MarkFlagRequired("topology")
	completeTopology(cmd)
	return cmd
}

// tensorSpecs lists a checkpoint's tensors for the memory plan as the conversion's plan
// sees them (plan.TensorSpecs): the weights, each optimizer state tensor with the parameter
// it belongs to, everything else (every tensor of the source: nothing renamed or dropped).
// The placements are the memory plan's own (it also plans the alternatives), so the
// conversion is planned for the device alone.
func tensorSpecs(ck *statedict.Checkpoint, names map[string][]string) ([]runtime.TensorSpec, []string, error) {
	pl, err := plan.Make(ck, plan.Options{Layout: formats.TorchFile, OptimizerNames: names, KeepCUDARNG: true}, nil)
	if err != nil {
		return nil, nil, err
	}
	var warnings []string
	for _, w := range pl.Warnings {
		switch w.Kind {
		case "optimizer_not_understood", "optimizer_unmapped":
			warnings = append(warnings, w.Message+"; its tensors are placed by their own names")
		}
	}
	specs, err := pl.TensorSpecs()
	return specs, warnings, err
}

// printPlan writes the human-readable memory plan.
func printPlan(w io.Writer, r *planReport, tensors int) error {
	mp := r.MemoryPlan
	fmt.Fprintf(w, "%s (%s): %s\n", r.Path, r.Format, plural(tensors, "tensor"))
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	plan := "built-in plan"
	if mp.PlanFile != "" {
		plan = "plan " + mp.PlanFile
	}
	fmt.Fprintf(w, "target: %s (TPU %s, %s), %d devices, %s HBM each; mesh %s, %s", mp.AcceleratorType, mp.Generation, mp.TopologyShape, len(mp.Devices), humanBytes(mp.HBMPerDevice), mp.Mesh, plan)
	if mp.WeightDType != "" {
		fmt.Fprintf(w, "; weights as %s", mp.WeightDType)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	tw := newTable(w, tabwriter.AlignRight)
	fmt.Fprintln(tw, "RANK\tHOST\tWEIGHTS\tOPTIMIZER\tOTHER\tRAW\tPADDED\t% HBM\t")
	row := func(d runtime.DeviceMemory, mark string) {
		fmt.Fprintf(tw, "%d%s\t%d\t%s\t%s\t%s\t%s\t%s\t%.1f%%\t\n", d.Rank, mark, d.Host, humanBytes(d.Weights.Padded), humanBytes(d.Optimizer.Padded),
			humanBytes(d.Other.Padded), humanBytes(d.Total.Raw), humanBytes(d.Total.Padded), 100*float64(d.Total.Padded)/float64(mp.HBMPerDevice))
	}
	const show = 16
	if len(mp.Devices) <= show {
		for _, d := range mp.Devices {
			mark := ""
			if d.Rank == mp.Fullest {
				mark = "*"
			}
			row(d, mark)
		}
	} else {
		least := slices.MinFunc(mp.Devices, func(a, b runtime.DeviceMemory) int { return cmp.Compare(a.Total.Padded, b.Total.Padded) })
		row(mp.Devices[mp.Fullest], "*")
		row(least, " (least)")
	}
	tw.Flush()
	fmt.Fprintln(w, "(WEIGHTS, OPTIMIZER, OTHER and PADDED are padded to TPU tiles; RAW is the unpadded total; * the fullest device)")
	full := mp.Devices[mp.Fullest].Total.Padded
	if mp.Fits {
		fmt.Fprintf(w, "\nfits: the fullest device holds %s of %s (%s free for activations, gradients and workspace)\n", humanBytes(full), humanBytes(mp.HBMPerDevice), humanBytes(mp.HBMPerDevice-full))
		return nil
	}
	fmt.Fprintf(w, "\nDOES NOT FIT: the fullest device (rank %d) needs %s, %s more than its %s\n", mp.Fullest, humanBytes(full), humanBytes(mp.Over), humanBytes(mp.HBMPerDevice))
	if len(mp.Suggestions) > 0 {
		fmt.Fprintln(w, "\nplanned alternatives:")
	}
	for _, s := range mp.Suggestions {
		verdict := "fits"
		if !s.Fits {
			verdict = "still does not fit"
		}
		change := s.Change
		if flags := suggestionFlags(mp, s); flags != "" {
			change += ": " + flags
		}
		fmt.Fprintf(w, "  - %s\n      fullest device %s of %s: %s\n", change, humanBytes(s.Fullest.Padded), humanBytes(s.HBMPerDevice), verdict)
	}
	return nil
}

// suggestionFlags are the flags of plan (and convert) that set what a suggestion changes
// from the plan mp: its slice, mesh and weight dtype.
func suggestionFlags(mp *runtime.MemoryPlan, s runtime.Suggestion) string {
	var flags []string
	if s.Topology != mp.AcceleratorType {
		flags = append(flags, "--topology "+s.Topology)
	}
	if s.Mesh != mp.Mesh {
		flags = append(flags, "--mesh "+s.Mesh)
	}
	if s.WeightDType != "" && s.WeightDType != mp.WeightDType {
		flags = append(flags, "--dtype "+s.WeightDType)
	}
	return strings.Join(flags, " ")
}
