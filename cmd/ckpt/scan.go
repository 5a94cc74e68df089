package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/scan"
	"github.com/spf13/cobra"
)

// scanJSON is the --json output of scan.
type scanJSON struct {
	Path    string       `json:"path"`
	Files   []fileJSON   `json:"files"`
	Pickles []pickleJSON `json:"pickles"`
	// Refused lists every refused finding: globals outside the policy and TorchScript code.
	Refused []findingJSON `json:"refused"`
	// Dangerous lists "module.name" of every global classified dangerous (known code execution).
	Dangerous []string      `json:"dangerous"`
	Problems  []problemJSON `json:"problems"`
}

type fileJSON struct {
	Path   string `json:"path"`
	Layout string `json:"layout"`
}

type pickleJSON struct {
	File     string       `json:"file"`
	Where    string       `json:"where"`
	Inflated bool         `json:"inflated,omitempty"`
	Globals  []globalJSON `json:"globals"`
	Error    string       `json:"error,omitempty"`
}

type globalJSON struct {
	Global   string `json:"global"`
	Offset   int64  `json:"offset"`
	Opcode   string `json:"opcode"`
	Safety   string `json:"safety"`
	Severity string `json:"severity,omitempty"`
	Why      string `json:"why,omitempty"`
}

type findingJSON struct {
	File     string `json:"file"`
	Where    string `json:"where"`
	Offset   int64  `json:"offset"`
	Global   string `json:"global,omitempty"`
	Severity string `json:"severity"`
	Why      string `json:"why,omitempty"`
}

type problemJSON struct {
	File   string `json:"file"`
	Format string `json:"format"`
	Offset int64  `json:"offset"`
	Kind   string `json:"kind"`
	Error  string `json:"error"`
}

func newScanCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "scan PATH",
		Example: `  ckpt scan downloaded.pt
  ckpt scan --json checkpoint_dcp/     # every pickle DCP's loader would unpickle`,
		Short: "Check that loading a checkpoint with torch would run no code",
		Long: `scan finds every pickle torch.load(weights_only=False), DCP's loader, NeMo's
restore_from or np.load(allow_pickle=True) would unpickle in a checkpoint file or folder,
where they find it — a torch.save zip's data.pkl, the pickles of a legacy stream or tar,
the weights of a .nemo archive, a bare pickle, the object arrays of .npy and .npz files, a
DCP folder's .metadata and each item its storage entries locate — and lists each Python
global referenced. Nothing is decoded into objects or executed. Archives are read as the
loaders read them (tar as Python's tarfile, zip records whatever their case, as torch's
reader); a file several loaders read, or that the CPython versions torch runs on read
differently, is scanned in every reading, the worst verdict winning. A pickle the scanner
cannot follow to its end (deeper or longer than its limits) is refused as unknown code.

The policy is default-deny. Allowed: torch's weights_only allowlist ("allowed") and the
pure-data reconstructors ckpt models ("data": builtin containers, copyreg's instance
protocol, numpy arrays and dtypes, argparse.Namespace, the DCP metadata dataclasses).
Every other global, every dotted name included, is refused with a severity: "known code
execution" (os.system, builtins.eval, pickle.loads, a TorchScript archive, ... also when
reached through a dotted name) or "would import and call unknown code" (any other class
or function, e.g. a pickled nn.Module's class).

A file's pickles are listed one by one when it holds a few; the pickles of a DCP data file
(one per item) are summed up in a line, which --json lists each.

Exit status: 3 when anything is refused; 1 when the scan cannot vouch for the checkpoint
(malformed pickles, bytes no record or item accounts for, records torch refuses, a layout
torch does not load, or nothing that is a checkpoint at all); 0 when every pickle was found
and every global is allowed, or when the checkpoint holds no pickle (safetensors): nothing
in it would run code.`,
		Args: positional("PATH", "ckpt scan model.pt"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if args[0], err = sourcePath(args[0]); err != nil {
				return err
			}
			res, err := scan.Scan(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := printJSON(out, scanOutput(res)); err != nil {
					return err
				}
			} else {
				printScan(out, res)
			}
			return scanVerdict(res)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the findings as JSON")
	return cmd
}

// scanOutput builds the --json report.
func scanOutput(res *scan.Result) scanJSON {
	j := scanJSON{Path: res.Path, Files: []fileJSON{}, Pickles: []pickleJSON{}, Refused: []findingJSON{}, Dangerous: []string{}, Problems: []problemJSON{}}
	for _, f := range res.Files {
		j.Files = append(j.Files, fileJSON{f.Path, f.Layout})
	}
	for _, s := range res.Pickles {
		pj := pickleJSON{File: s.File, Where: s.Where, Inflated: s.Inflated, Globals: []globalJSON{}}
		if s.Err != nil {
			pj.Error = s.Err.Error()
		}
		for _, g := range s.Report.Globals {
			pj.Globals = append(pj.Globals, globalJSON{g.Global.String(), s.Base + g.Offset, g.Opcode, g.Class.String(), g.Class.Severity(), g.Why})
		}
		j.Pickles = append(j.Pickles, pj)
	}
	seen := map[string]bool{}
	for _, f := range res.Refused() {
		fj := findingJSON{File: f.File, Where: f.Where, Offset: f.Offset, Severity: f.Class.Severity(), Why: f.Why}
		if f.Global.Module != "" || f.Global.Name != "" {
			fj.Global = f.Global.String()
			if f.Class.String() == "dangerous" && !seen[fj.Global] {
				seen[fj.Global] = true
				j.Dangerous = append(j.Dangerous, fj.Global)
			}
		}
		j.Refused = append(j.Refused, fj)
	}
	for _, p := range res.Problems {
		kind := "error"
		switch {
		case errors.Is(p, ckpterr.ErrCorrupt):
			kind = "corrupt"
		case errors.Is(p, ckpterr.ErrUnsupported):
			kind = "unsupported"
		}
		j.Problems = append(j.Problems, problemJSON{p.File, p.Format, p.Offset, kind, p.Err.Error()})
	}
	return j
}

// listedPickles is how many pickles of one file the text report lists one by one; a file
// holding more (a DCP data file has one per item) gets one line summing them up.
const listedPickles = 3

// printScan writes the text report: each file's layout, its pickles (or their sum), the
// problems, then the distinct globals with their class and severity, worst first.
func printScan(out io.Writer, res *scan.Result) {
	for _, f := range res.Files {
		fmt.Fprintf(out, "%s: %s\n", f.Path, f.Layout)
	}
	for i := 0; i < len(res.Pickles); {
		j, globals := i, 0
		for ; j < len(res.Pickles) && res.Pickles[j].File == res.Pickles[i].File; j++ {
			globals += len(res.Pickles[j].Report.Globals)
		}
		if j-i > listedPickles {
			fmt.Fprintf(out, "%s: %s, %s\n", res.Pickles[i].File, plural(j-i, "pickle"), plural(globals, "global"))
		} else {
			for _, p := range res.Pickles[i:j] {
				fmt.Fprintf(out, "%s: %s: %s\n", p.File, p.Where, plural(len(p.Report.Globals), "global"))
			}
		}
		i = j
	}
	if len(res.Pickles) == 0 && holdsCheckpoint(res) && len(res.Problems) == 0 {
		fmt.Fprintln(out, "no pickles: nothing here would run code when loaded")
	}
	for _, p := range res.Problems {
		fmt.Fprintf(out, "  problem: %s\n", p.Error())
	}
	for _, c := range res.Code {
		fmt.Fprintf(out, "  %-10s %s: %s  — %s: %s\n", c.Class, c.File, c.Where, c.Class.Severity(), c.Why)
	}
	for _, g := range res.SortedGlobals() {
		line := fmt.Sprintf("  %-10s %s", g.Class, g.Global)
		if g.Global.Module == "" && g.Global.Name == "" {
			what := g.Opcode
			if what == "STACK_GLOBAL" {
				what = "dynamic STACK_GLOBAL"
			}
			line = fmt.Sprintf("  %-10s (%s)", g.Class, what)
		}
		if sev := g.Class.Severity(); sev != "" {
			line += "  — " + sev
			if g.Why != "" {
				line += ": " + g.Why
			}
		}
		fmt.Fprintln(out, line)
	}
}

// scanVerdict turns a scan into the command's error: refused findings (wrapping
// ckpterr.ErrDangerous: exit 3) first, then problems, then finding nothing to vouch for
// (exit 1).
func scanVerdict(res *scan.Result) error {
	if bad := res.Refused(); len(bad) > 0 {
		f := bad[0]
		at := fmt.Sprintf("at byte %d", f.Offset)
		if f.Inflated {
			at = fmt.Sprintf("at byte %d of the inflated record", f.Offset)
		}
		what := "global " + f.Global.String()
		if f.Global.Module == "" && f.Global.Name == "" {
			what = "content"
		}
		if f.Class.String() == "dangerous" {
			what = "DANGEROUS " + what
		}
		msg := fmt.Sprintf("%s: %s: %s %s (%s", f.File, f.Where, what, at, f.Class.Severity())
		if f.Why != "" {
			msg += ": " + f.Why
		}
		msg += "): unpickling it with Python's pickle, as torch.load(weights_only=False) and DCP's loader do, would run it"
		if n := len(bad); n > 1 {
			msg += fmt.Sprintf(" (and %d more refused)", n-1)
		}
		return fmt.Errorf("%s: %w", msg, ckpterr.ErrDangerous)
	}
	if len(res.Problems) > 0 {
		p := res.Problems[0]
		msg := "scan cannot vouch for the checkpoint: " + p.Error()
		if n := len(res.Problems); n > 1 {
			msg += fmt.Sprintf(" (and %d more problems)", n-1)
		}
		return errors.New(msg)
	}
	if len(res.Pickles) == 0 && !holdsCheckpoint(res) {
		return fmt.Errorf("%s: no checkpoint found: nothing here is a file torch.load, DCP or safetensors would load", res.Path)
	}
	return nil
}

// holdsCheckpoint reports whether the scan read any file as a checkpoint (a safetensors
// file holds no pickle, and loading it runs no code), not only configs, text and other
// files ("not a checkpoint", as scan.ScannedFile documents its layouts).
func holdsCheckpoint(res *scan.Result) bool {
	for _, f := range res.Files {
		if f.Layout != "not a checkpoint" {
			return true
		}
	}
	return false
}
