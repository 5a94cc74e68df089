package main

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/formats/pickle"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/spf13/cobra"
)

// scanJSON is the --json output of scan.
type scanJSON struct {
	Path    string       `json:"path"`
	Pickles []pickleJSON `json:"pickles"`
	// Dangerous lists "module.name" of every dangerous global found.
	Dangerous []string `json:"dangerous"`
}

type pickleJSON struct {
	File    string       `json:"file"`
	Where   string       `json:"where"`
	Globals []globalJSON `json:"globals"`
	Error   string       `json:"error,omitempty"`
}

type globalJSON struct {
	Global string `json:"global"`
	Offset int64  `json:"offset"`
	Opcode string `json:"opcode"`
	Safety string `json:"safety"`
	Why    string `json:"why,omitempty"`
}

func newScanCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "scan PATH",
		Short: "List the Python globals a checkpoint's pickles reference; fail on dangerous ones",
		Long: `scan finds every pickle in a checkpoint file or folder (torch.save zip and legacy
files, DCP .metadata and the archives inside .distcp files) and lists each Python global it
references, classified as allowed (torch's weights_only allowlist), unknown (ckpt keeps it as
an inert record) or dangerous (os, subprocess, builtins.eval/exec/getattr, ...). Nothing is
decoded into objects or executed. Exits 3 naming the global when a dangerous one is found.`,
		Args: positional("PATH", "ckpt scan model.pt"),
		RunE: func(cmd *cobra.Command, args []string) error {
			scans, err := formats.Scan(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			res := scanJSON{Path: args[0], Pickles: []pickleJSON{}, Dangerous: []string{}}
			for _, s := range scans {
				pj := pickleJSON{File: s.File, Where: s.Where, Globals: []globalJSON{}}
				if s.Err != nil {
					pj.Error = s.Err.Error()
				}
				for _, g := range s.Report.Globals {
					why, _ := pickle.Dangerous(g.Global)
					pj.Globals = append(pj.Globals, globalJSON{g.Global.String(), s.Base + g.Offset, g.Opcode, g.Class.String(), why})
				}
				res.Pickles = append(res.Pickles, pj)
			}
			bad := formats.Dangerous(scans)
			for _, g := range bad {
				res.Dangerous = append(res.Dangerous, g.Global.String())
			}
			if asJSON {
				if err := printJSON(out, res); err != nil {
					return err
				}
			} else {
				for _, p := range res.Pickles {
					fmt.Fprintf(out, "%s: %s: %d globals\n", p.File, p.Where, len(p.Globals))
					if p.Error != "" {
						fmt.Fprintf(out, "  malformed: %s\n", p.Error)
					}
				}
				for _, g := range formats.SortedGlobals(scans) {
					line := fmt.Sprintf("  %-10s %s", g.Class, g.Global)
					if why, ok := pickle.Dangerous(g.Global); ok {
						line += "  — " + why
					}
					fmt.Fprintln(out, line)
				}
			}
			if len(bad) > 0 {
				f := bad[0]
				return fmt.Errorf("%s: %s: DANGEROUS global %s at byte %d (%s): unpickling it with Python's pickle, as torch.load(weights_only=False) and DCP's loader do, would run it: %w",
					f.File, f.Where, f.Global, f.Offset, f.Why, statedict.ErrDangerous)
			}
			for _, s := range scans {
				if s.Err != nil {
					return fmt.Errorf("%s: %s: malformed pickle: %w", s.File, s.Where, s.Err)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the findings as JSON")
	return cmd
}
