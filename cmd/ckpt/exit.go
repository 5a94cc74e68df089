package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/ckpt-dev/ckpt/ckpterr"
	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/storage"
	"github.com/ckpt-dev/ckpt/verify"
	"github.com/ckpt-dev/ckpt/verify/forward"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit statuses. They are computed once, by exitStatus in main, from the error a command
// returns; commands only return errors of the right kind.
const (
	exitFailure = 1 // any other error
	exitUsage   = 2 // the command line is wrong
	// exitDangerous: the checkpoint references code that loading it with Python would run.
	exitDangerous = 3
	// exitMismatch: an optimizer state does not fit its model (or cannot be mapped
	// unambiguously), so training would not resume.
	exitMismatch = 4
	// exitCorrupt: verification failed (an output differs from its manifest or its source).
	exitCorrupt = 5
	// exitNoFit: the checkpoint does not fit the slice's HBM (plan).
	exitNoFit = 6
	// Interrupted runs exit 128 + the signal: 130 for SIGINT, 143 for SIGTERM.
)

// exitTable is the one source of the exit-status table `ckpt --help` (exitCodes) and the
// README (exitMarkdown, kept equal by TestREADMEExitTable) show.
var exitTable = []struct{ status, meaning string }{
	{"0", "success"},
	{"1", "error: unreadable or corrupt input, I/O error, …"},
	{"2", "usage error: wrong arguments or flags"},
	{"3", "dangerous content: a pickle references code Python would run (scan, inspect)"},
	{"4", "an optimizer state does not fit its model (inspect --optimizer, convert)"},
	{"5", "verification failed: an output differs from its manifest (check) or its source (verify)"},
	{"6", "does not fit: the checkpoint needs more HBM than the slice has (plan)"},
	{"130, 143", "interrupted by SIGINT, terminated by SIGTERM: partial outputs removed"},
}

// exitCodes is the exit-status table of `ckpt --help`.
var exitCodes = func() string {
	var b strings.Builder
	b.WriteString("Exit status:")
	for _, e := range exitTable {
		fmt.Fprintf(&b, "\n  %-9s %s", e.status, e.meaning)
	}
	return b.String()
}()

// exitMarkdown is the exit-status table of the README.
func exitMarkdown() string {
	var b strings.Builder
	b.WriteString("| status | meaning |\n|---|---|\n")
	for _, e := range exitTable {
		fmt.Fprintf(&b, "| %s | %s |\n", e.status, e.meaning)
	}
	return b.String()
}

// usageError is a wrong command line: missing or extra arguments, unknown flags or values.
type usageError struct{ err error }

func (u *usageError) Error() string { return u.err.Error() }
func (u *usageError) Unwrap() error { return u.err }

// usage marks err as a usage error.
func usage(err error) error { return &usageError{err} }

// exitStatus maps the error a command returned to the process's exit status.
func exitStatus(err error) int {
	var u *usageError
	switch {
	case err == nil:
		return 0
	case interrupted.Load() != 0 && (errors.Is(err, context.Canceled) || errors.Is(err, atomicfile.ErrInterrupted)):
		return 128 + int(interrupted.Load())
	case errors.As(err, &u), errors.Is(err, formats.ErrLayout):
		return exitUsage
	case errors.Is(err, ckpterr.ErrDangerous):
		return exitDangerous
	case errors.Is(err, optimizerstate.ErrNotFitting):
		return exitMismatch
	case errors.Is(err, verify.ErrFailed):
		return exitCorrupt
	case errors.Is(err, runtime.ErrDoesNotFit):
		return exitNoFit
	}
	return exitFailure
}

// cliError is an error as the command line shows it: the library's message with the flags
// that control what went wrong named, keeping the cause for exitStatus.
type cliError struct {
	msg string
	err error
}

func (e *cliError) Error() string { return e.msg }
func (e *cliError) Unwrap() error { return e.err }

// describe words a library error for the command line: a remapping rule's error names its
// flag (--select, --rename, --map-location), an existing destination points at --force, an
// optimizer the shapes cannot map at --optimizer-names.
func describe(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	var oe *remap.OptionError
	if errors.As(err, &oe) {
		msg = strings.Replace(msg, oe.Error(), "--"+oe.Option+" "+oe.Err.Error(), 1)
	}
	var ae *optimizerstate.AmbiguousError
	var nf *verify.NoFamilyError
	switch {
	case errors.Is(err, atomicfile.ErrUnfinished):
		msg += " (--resume, with the options of that conversion, finishes it)"
	case errors.Is(err, atomicfile.ErrExists), errors.Is(err, storage.ErrExists):
		msg += " (--force replaces an earlier output)"
	case errors.As(err, &ae):
		msg += " (--optimizer-names FILE)"
	case errors.Is(err, formats.ErrEarlierOutput):
		msg += " (name a new DST, or replace that output with --force and a folder --format)"
	case errors.Is(err, forward.ErrNoConfig):
		msg += " (--config FILE gives the model's config.json)"
	case errors.Is(err, verify.ErrNoTokens):
		msg += " (give --tokens or --prompt-ids)"
	case errors.As(err, &nf):
		msg += " (ckpt verify --emit-torch DIR writes that script)"
	}
	if msg == err.Error() {
		return err
	}
	return &cliError{msg, err}
}

// execute runs the command line args under root and returns its error as the command line
// shows it. A command run with --json that fails also prints the error as a JSON object on
// stdout, so a program reading the output always gets JSON — also when the flags failed to
// parse before --json was reached.
func execute(root *cobra.Command, args []string) error {
	printedJSON = false
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	err = describe(err)
	// A finding (failed check, plan that does not fit) comes with the report already printed.
	if err != nil && cmd != nil && !printedJSON {
		if j, _ := cmd.Flags().GetBool("json"); j || wantsJSON(args) {
			printJSON(cmd.OutOrStdout(), errorJSON{Error: errorReport{Message: err.Error(), Kind: errorKind(err), ExitStatus: exitStatus(err)}})
		}
	}
	return err
}

// wantsJSON reports whether args ask for --json before a "--" ending the flags.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "--json=true", "--json=1":
			return true
		}
	}
	return false
}

// errorJSON is what a failing command prints with --json.
type errorJSON struct {
	Error errorReport `json:"error"`
}

type errorReport struct {
	Message    string `json:"message"`
	Kind       string `json:"kind"`
	ExitStatus int    `json:"exit_status"`
}

// errorKind names the kind of a command's error for programs.
func errorKind(err error) string {
	if interrupted.Load() != 0 && exitStatus(err) == 128+int(interrupted.Load()) {
		return "interrupted"
	}
	switch exitStatus(err) {
	case exitUsage:
		return "usage"
	case exitDangerous:
		return "dangerous"
	case exitMismatch:
		return "optimizer_mismatch"
	case exitCorrupt:
		return "verification_failed"
	case exitNoFit:
		return "does_not_fit"
	}
	switch {
	case errors.Is(err, ckpterr.ErrCorrupt):
		return "corrupt"
	case errors.Is(err, ckpterr.ErrUnsupported):
		return "unsupported"
	case errors.Is(err, fs.ErrNotExist):
		return "not_found"
	}
	return "error"
}

// positional checks a command's arguments against its synopsis ("SRC DST"; "" for none),
// saying what is missing or extra with an example, as a usage error.
func positional(synopsis, example string) cobra.PositionalArgs {
	want := strings.Fields(synopsis)
	takes := synopsis
	if takes == "" {
		takes = "no arguments"
	}
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < len(want):
			return usage(fmt.Errorf("%s needs %s; missing %s (e.g. %s)", cmd.CommandPath(), synopsis, strings.Join(want[len(args):], " "), example))
		case len(args) > len(want):
			return usage(fmt.Errorf("%s takes %s; %s %q (e.g. %s)", cmd.CommandPath(), takes, plural(len(args)-len(want), "extra argument"), args[len(want):], example))
		}
		return nil
	}
}

// holdUsageContract makes the command line's mistakes usage errors for every command under
// root, in this one place rather than in each command: the arguments' check (Args) and the
// required flags, which cobra reports as plain errors (exit 1). A required flag's absence
// is said with an example of the command that gives it.
func holdUsageContract(root *cobra.Command) {
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		quietOutputs(cmd)
		return requiredFlags(cmd)
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				err := args(cmd, a)
				var u *usageError
				if err != nil && !errors.As(err, &u) {
					err = usage(err)
				}
				return err
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// quietOutputs holds -q ("errors only") for every command in one place: the report on
// stdout goes (unless --json asks for it: data a program reads) and so do warnings and
// progress on stderr. The error still reaches stderr: main prints it, and says everything a
// report would have explained.
func quietOutputs(cmd *cobra.Command) {
	if !quiet(cmd) {
		return
	}
	if j, _ := cmd.Flags().GetBool("json"); !j {
		cmd.SetOut(io.Discard)
	}
	cmd.SetErr(io.Discard)
}

// requiredFlags is a usage error naming the required flags of cmd the command line did not
// give, with the first example of cmd's help that gives them.
func requiredFlags(cmd *cobra.Command) error {
	var missing []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if r := f.Annotations[cobra.BashCompOneRequiredFlag]; len(r) == 1 && r[0] == "true" && !f.Changed {
			missing = append(missing, "--"+f.Name)
		}
	})
	if len(missing) == 0 {
		return nil
	}
	msg := fmt.Sprintf("%s needs %s", cmd.CommandPath(), strings.Join(missing, " and "))
	for _, line := range strings.Split(cmd.Example, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "ckpt ") && strings.Contains(line, missing[0]+" ") {
			msg += " (e.g. " + line + ")"
			break
		}
	}
	return usage(errors.New(msg))
}
