package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/ckpt-dev/ckpt/optimizerstate"
)

// parseOptimizerNames reads --optimizer-names values, [PATH=]FILE: the names file of the
// optimizer state at PATH (without PATH, of the checkpoint's only optimizer state).
func parseOptimizerNames(values []string) (map[string][]string, error) {
	if len(values) == 0 {
		return nil, nil
	}
	out := map[string][]string{}
	for _, v := range values {
		path, file, ok := strings.Cut(v, "=")
		if !ok {
			path, file = "", v
		}
		if _, dup := out[path]; dup {
			return nil, fmt.Errorf("--optimizer-names: two names files for %q", path)
		}
		names, err := optimizerstate.ReadNames(file)
		if err != nil {
			return nil, fmt.Errorf("--optimizer-names: %w", err)
		}
		out[path] = names
	}
	return out, nil
}

// printTraining writes the human-readable training-state report of inspect --optimizer.
func printTraining(w io.Writer, a *optimizerstate.Analysis) error {
	for _, o := range a.Optimizers {
		fmt.Fprintf(w, "\noptimizer state %s: %s, %s form, %s, %s\n", label(o.Path), o.Kind, form(o.Form, o.Flat), plural(len(o.Groups), "group"), plural(len(o.Params), "parameter"))
		for i, g := range o.Groups {
			keys := make([]string, 0, len(g.Options))
			for k := range g.Options {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			opts := make([]string, len(keys))
			for j, k := range keys {
				opts[j] = k + "=" + showValue(g.Options[k])
			}
			fmt.Fprintf(w, "  group %d: %s; %s\n", i, plural(g.Params, "parameter"), strings.Join(opts, " "))
		}
		switch {
		case o.Error != "" && o.Model != "":
			fmt.Fprintf(w, "  MISMATCH with %s: %s\n", o.Model, o.Error)
		case o.Error != "":
			fmt.Fprintf(w, "  NOT MAPPED: %s\n", o.Error)
		case o.MappedBy == "":
			fmt.Fprintln(w, "  no model state dict in the checkpoint: ids are not tied to names")
		}
		fmt.Fprintf(w, "  %s\n", tie(o.Model, o.MappedBy, o.ParamOrder, o.Tied, o.NotTied))
		tw := newTable(w, 0)
		fmt.Fprintln(tw, "  ID\tGROUP\tPARAMETER\tSHAPE\tSTATE")
		for _, p := range o.Params {
			var st []string
			for _, s := range p.State {
				if s.DType != "" {
					st = append(st, fmt.Sprintf("%s %s%v", s.Key, s.DType, s.Shape))
				} else {
					st = append(st, s.Key+"="+showValue(s.Value))
				}
			}
			shape := ""
			if p.Shape != nil {
				shape = fmt.Sprint(p.Shape)
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", showValue(p.ID), p.Group, p.Name, shape, strings.Join(st, ", "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, u := range o.Unused {
			fmt.Fprintf(w, "  not an optimizer parameter: %s (%s)\n", u.Name, u.Reason)
		}
		for _, k := range o.Orphans {
			fmt.Fprintf(w, "  state %s belongs to no group\n", k)
		}
	}
	for _, s := range a.Schedulers {
		fmt.Fprintf(w, "\nLR scheduler %s: %s (%s)\n", label(s.Path), s.Kind, s.Detail)
	}
	for _, s := range a.Scalers {
		fmt.Fprintf(w, "\ngrad scaler %s: %s (%s)\n", label(s.Path), s.Kind, s.Detail)
	}
	if len(a.Counters) > 0 {
		fmt.Fprintln(w)
	}
	for _, c := range a.Counters {
		fmt.Fprintf(w, "counter %s = %s\n", c.Path, c.Detail)
	}
	if len(a.RNG.CPU)+len(a.RNG.CUDA) > 0 {
		fmt.Fprintf(w, "\nRNG states: CPU %s; CUDA %s (dropped by convert unless --keep-cuda-rng)\n", list(a.RNG.CPU), list(a.RNG.CUDA))
	}
	return nil
}

// optimizerNote summarizes how convert made an optimizer state follow its model.
func optimizerNote(o *optimizerstate.Report) string {
	parts := []string{tie(o.Model, o.MappedBy, o.ParamOrder, o.Tied, o.NotTied)}
	if o.Unmapped != "" {
		parts[0] += " (see warning)"
	}
	if len(o.Dropped) > 0 {
		parts = append(parts, fmt.Sprintf("%d dropped with their weights", len(o.Dropped)))
	}
	if o.Renamed > 0 {
		parts = append(parts, fmt.Sprintf("%d renamed", o.Renamed))
	}
	if o.Renumbered {
		parts = append(parts, "ids renumbered")
	}
	return "; " + strings.Join(parts, "; ")
}

// tie says how an optimizer state was tied to its model — by what (an optimizerstate
// Mapping's By: fqn, shapes, names file, …) — and how many of its parameters were and
// were not.
func tie(model, by, order string, tied, notTied int) string {
	if by == "" {
		return fmt.Sprintf("not tied to a model: %d parameters", notTied)
	}
	if order != "" {
		by += " (parameter order: " + order + ")"
	}
	return fmt.Sprintf("tied to %s by %s: %d parameters, %d not tied", label(model), by, tied, notTied)
}

// form names an optimizer state's form: "index", "fqn", "fqn (flattened)".
func form(f optimizerstate.Form, flat bool) string {
	if flat {
		return string(f) + " (flattened)"
	}
	return string(f)
}

// printCarried writes what a conversion for a mesh did with the training state beside
// the model and its optimizer, a line per action (kept, replicated, dropped).
func printCarried(w io.Writer, cs []optimizerstate.Carried) {
	for _, action := range []string{optimizerstate.Kept, optimizerstate.Replicated, optimizerstate.Dropped} {
		var items []string
		for _, c := range cs {
			if c.Action == action {
				items = append(items, label(c.Path)+" ("+c.Kind+")")
			}
		}
		if len(items) > 0 {
			fmt.Fprintf(w, "training state %s: %s\n", action, strings.Join(items, ", "))
		}
	}
}

func label(path string) string {
	if path == "" {
		return "(root)"
	}
	return path
}

func list(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// showValue renders a typed JSON value (statedict.JSON) for the human-readable reports, in
// the same spelling as --json: true/false, null, numbers, [lists], "strings" unquoted.
func showValue(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
