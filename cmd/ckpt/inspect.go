package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	english "github.com/ckpt-dev/ckpt/internal/plural"
	"github.com/ckpt-dev/ckpt/scan"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/inspect"
	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/spf13/cobra"
)

func newInspectCmd() *cobra.Command {
	var asJSON, hash, optim bool
	var optimNames []string
	cmd := &cobra.Command{
		Use: "inspect PATH",
		Example: `  ckpt inspect checkpoint.pt
  ckpt inspect --optimizer checkpoint.pt       # the training state and how it maps onto the model
  ckpt inspect --json --hash model.safetensors # for programs: SHA-256 of every tensor`,
		Short: "List a checkpoint's tensors, dtypes, shapes, device tags and sizes",
		Long: `inspect reads a checkpoint file or folder (format detected by content) without
executing any pickle code and lists every tensor as stored: flattened name, dtype, shape,
the device location it was saved with, and its size. Totals by dtype and a summary of the
non-tensor entries follow. --json prints the stable machine-readable report; --hash adds the
SHA-256 of each tensor's contiguous little-endian bytes, so two checkpoints in different
formats can be compared tensor by tensor. --optimizer adds the training state: each
optimizer's parameters mapped onto the model's names (checked by shape), schedulers,
grad scalers, counters and RNG states; it exits with status 4 when an optimizer state does
not fit its model or cannot be mapped unambiguously.`,
		Args: positional("PATH", "ckpt inspect model.pt"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if args[0], err = sourcePath(args[0]); err != nil {
				return err
			}
			ck, err := formats.Open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer ck.Close()
			names, err := parseOptimizerNames(optimNames)
			if err != nil {
				return err
			}
			if optim || names != nil {
				// A Trainer or accelerate folder's training-state files join the tree.
				wrapped, err := formats.WithTrainingState(cmd.Context(), ck)
				if err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				if wrapped != ck {
					defer wrapped.Close()
					ck = wrapped
				}
			}
			rep, err := inspect.Build(cmd.Context(), ck, inspect.Options{Hash: hash, Training: optim || names != nil, OptimizerNames: names})
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			// What scan calls known code execution makes inspect fail too, after the report.
			var danger error
			if res, err := scan.Scan(cmd.Context(), args[0]); err == nil {
				for _, f := range res.Refused() {
					if f.Class == pickle.Unsafe {
						rep.Dangerous = append(rep.Dangerous, fmt.Sprintf("%s at %s: %s", f.Global, f.File, f.Where))
					}
				}
				if len(rep.Dangerous) > 0 {
					danger = fmt.Errorf("%s: references %s, which Python's pickle would run (ckpt read it as an inert record; ckpt scan tells more): %w",
						args[0], rep.Dangerous[0], ckpterr.ErrDangerous)
				}
			}
			if asJSON {
				err = printJSON(cmd.OutOrStdout(), rep)
			} else {
				err = printReport(cmd.OutOrStdout(), rep)
			}
			if err != nil {
				return err
			}
			if rep.Training == nil {
				return danger
			}
			if !asJSON {
				if err := printTraining(cmd.OutOrStdout(), rep.Training); err != nil {
					return err
				}
			}
			if danger != nil {
				return danger
			}
			for _, o := range rep.Training.Optimizers {
				if o.Error != "" {
					return fmt.Errorf("optimizer state %s: %s: %w", label(o.Path), o.Error, optimizerstate.ErrNotFitting)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&hash, "hash", false, "add the SHA-256 of every tensor's contiguous bytes (reads all data)")
	cmd.Flags().BoolVar(&optim, "optimizer", false, "add the training state: optimizer parameters mapped onto model names, schedulers, scalers, RNG")
	cmd.Flags().StringArrayVar(&optimNames, "optimizer-names", nil, "[PATH=]FILE: the model names of an optimizer's parameters in id order, one per line (implies --optimizer)")
	return cmd
}

// printReport writes the human-readable form of a report.
func printReport(w io.Writer, r *inspect.Report) error {
	fmt.Fprintf(w, "%s  (%s)\n\n", r.Path, r.Format)
	header := []string{"NAME", "DTYPE", "SHAPE", "LOCATION", "BYTES", "NOTE"}
	cells := make([]string, len(header))
	err := writeColumns(w, len(r.Tensors)+1, func(i int) []string {
		if i == 0 {
			return header
		}
		t := &r.Tensors[i-1]
		note := ""
		if t.SharesStorageWith != "" {
			note = "shares storage with " + t.SharesStorageWith
		}
		if t.Module != "" {
			note = strings.TrimSpace(note + " in pickled " + t.Module)
		}
		if t.SHA256 != "" {
			note = strings.TrimSpace(note + " sha256:" + t.SHA256[:16])
		}
		cells[0], cells[1], cells[2], cells[3], cells[4], cells[5] = t.Name, t.DType, fmt.Sprint(t.Shape), t.Location, humanBytes(t.NBytes), note
		return cells
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%s, %s\n", plural(len(r.Tensors), "tensor"), humanBytes(r.TotalBytes))
	for _, t := range r.Totals {
		fmt.Fprintf(w, "  %-18s %6d %-7s  %s\n", t.DType, t.Tensors, english.Noun(t.Tensors, "tensor"), humanBytes(t.NBytes))
	}
	if err := printQuantized(w, r.Quantized); err != nil {
		return err
	}
	if len(r.Ignored) > 0 {
		fmt.Fprintf(w, "\nnot read (weights or pickles outside this %s checkpoint): %s\n", r.Format, strings.Join(r.Ignored, ", "))
	}
	if len(r.NonTensors) > 0 {
		byType := map[string]int{}
		for _, n := range r.NonTensors {
			byType[n.Type]++
		}
		types := make([]string, 0, len(byType))
		for t := range byType {
			types = append(types, t)
		}
		sort.Strings(types)
		fmt.Fprintf(w, "\n%s:", plural(len(r.NonTensors), "non-tensor entry"))
		for _, t := range types {
			fmt.Fprintf(w, " %s×%d", t, byType[t])
		}
		fmt.Fprintln(w)
		const show = 20
		for i, n := range r.NonTensors {
			if i == show {
				fmt.Fprintf(w, "  … %d more (see --json)\n", len(r.NonTensors)-show)
				break
			}
			if n.HasValue {
				fmt.Fprintf(w, "  %s = %s (%s)\n", n.Name, showValue(n.Value), n.Type)
			} else {
				fmt.Fprintf(w, "  %s (%s)\n", n.Name, n.Type)
			}
		}
	}
	return nil
}

// humanBytes formats a byte count with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// printQuantized writes the quantized groups as logical tensors.
func printQuantized(w io.Writer, q *inspect.Quantized) error {
	if q == nil {
		return nil
	}
	if q.Error != "" {
		fmt.Fprintf(w, "\nquantization not understood: %s\n", q.Error)
		return nil
	}
	fmt.Fprintf(w, "\n%d quantized tensors (%s, from %s):\n", len(q.Groups), q.Method, strings.Join(q.Config, " + "))
	tw := newTable(w, 0)
	fmt.Fprintln(tw, "NAME\tSCHEME\tSHAPE\tBLOCK\tSTORED")
	for _, g := range q.Groups {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%s %s\n", g.Name, g.Scheme, g.Shape, g.Block, g.CodeDType, strings.Join(g.Stored, " + "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(q.RuntimeOnly) > 0 {
		fmt.Fprintf(w, "runtime-only scales: %s\n", strings.Join(q.RuntimeOnly, ", "))
	}
	return nil
}
