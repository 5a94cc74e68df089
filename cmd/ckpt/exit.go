package main

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/ckpt-dev/ckpt/formats"
	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/ckpt-dev/ckpt/optimizerstate"
	"github.com/ckpt-dev/ckpt/remap"
	"github.com/ckpt-dev/ckpt/runtime"
	"github.com/ckpt-dev/ckpt/statedict"
	"github.com/ckpt-dev/ckpt/storage"
	"github.com/ckpt-dev/ckpt/verify"
	"github.com/spf13/cobra"
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

// exitCodes is the table `ckpt --help` and the README show.
const exitCodes = `Exit status:
  0    success
  1    error (unreadable or corrupt input, I/O error, …)
  2    usage error (wrong arguments or flags)
  3    dangerous content: a pickle references code Python would run (scan, inspect)
  4    an optimizer state does not fit its model (inspect --optimizer, convert)
  5    verification failed: an output differs from its manifest (check) or its source (verify)
  6    does not fit: the checkpoint needs more HBM than the slice has (plan)
  130  interrupted (SIGINT); 143 terminated (SIGTERM) — partial outputs removed`

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
	case errors.As(err, &u), errors.Is(err, formats.ErrLayout):
		return exitUsage
	case errors.Is(err, statedict.ErrDangerous):
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
	switch {
	case errors.Is(err, atomicfile.ErrExists), errors.Is(err, storage.ErrExists):
		msg += " (--force replaces an earlier output)"
	case errors.As(err, &ae):
		msg += " (--optimizer-names FILE)"
	}
	if msg == err.Error() {
		return err
	}
	return &cliError{msg, err}
}

// execute runs the command line and returns its error as the command line shows it. A
// command run with --json that fails also prints the error as a JSON object on stdout, so
// a program reading the output always gets JSON.
func execute(root *cobra.Command) error {
	printedJSON = false
	cmd, err := root.ExecuteC()
	err = describe(err)
	// A finding (failed check, plan that does not fit) comes with the report already printed.
	if err != nil && cmd != nil && !printedJSON {
		if j, _ := cmd.Flags().GetBool("json"); j {
			printJSON(cmd.OutOrStdout(), errorJSON{Error: errorReport{Message: err.Error(), Kind: errorKind(err), ExitStatus: exitStatus(err)}})
		}
	}
	return err
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
	case errors.Is(err, statedict.ErrCorrupt):
		return "corrupt"
	case errors.Is(err, statedict.ErrUnsupported):
		return "unsupported"
	case errors.Is(err, fs.ErrNotExist):
		return "not_found"
	}
	return "error"
}

// positional checks a command's arguments against its synopsis ("SRC DST"), saying what is
// missing or extra with an example, as a usage error.
func positional(synopsis, example string) cobra.PositionalArgs {
	want := strings.Fields(synopsis)
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) < len(want):
			return usage(fmt.Errorf("%s needs %s; missing %s (e.g. %s)", cmd.CommandPath(), synopsis, strings.Join(want[len(args):], " "), example))
		case len(args) > len(want):
			return usage(fmt.Errorf("%s takes %s; %s %q (e.g. %s)", cmd.CommandPath(), synopsis, plural(len(args)-len(want), "extra argument"), args[len(want):], example))
		}
		return nil
	}
}
