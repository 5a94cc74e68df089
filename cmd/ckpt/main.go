// Command ckpt inspects, scans and converts PyTorch checkpoints (torch.save files, safetensors,
// Hugging Face folders, torch.distributed.checkpoint directories) without executing any
// pickle code, for moving GPU-trained work onto TPUs.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	english "github.com/ckpt-dev/ckpt/internal/plural"
	"github.com/ckpt-dev/ckpt/storage"
	_ "github.com/ckpt-dev/ckpt/storage/bucket" // gs:// and s3:// paths
	"github.com/spf13/cobra"
)

func main() {
	fitAddressSpace()
	// Registered before any work starts, so no signal can arrive unhandled.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	go onSignal(sigs, cancel)
	root := newRoot()
	root.SetContext(ctx)
	err := execute(root, os.Args[1:])
	exiting.Lock() // held for good: the process ends here
	if err != nil {
		if !printedJSON { // with --json the error is the JSON object on stdout
			fmt.Fprintln(os.Stderr, "ckpt:", err)
		}
		os.Exit(exitStatus(err))
	}
}

// exiting is taken, and never let go, by whichever ends the process: the command when it
// is done, or the signal handler from the moment it starts removing outputs. The command,
// failing because its outputs were removed under it, then cannot exit first with another
// status; and a command done first ends the process with its own status, its outputs
// committed or aborted by itself.
var exiting sync.Mutex

// interrupted is the signal that stopped the command (0 until one arrives).
var interrupted atomic.Int32

// unwindGrace is how long a command without outputs in flight has to return once its
// context is cancelled by a signal, before the handler ends the process itself.
const unwindGrace = 3 * time.Second

// onSignal waits for SIGINT or SIGTERM on sigs. Outputs being written are removed at once
// (Go exits on these signals without running deferred cleanups, which would leave a partial
// checkpoint as large as the real one under its temporary name) and the process exits
// 128+signal. A command with no output in flight (inspect, check, verify, scan, a bucket
// read) is cancelled through its context instead and returns by itself — its --json error
// object printed, its status 128+signal — unless it takes longer than unwindGrace or a
// second signal comes. No output can start once the handler has run (ErrInterrupted).
func onSignal(sigs <-chan os.Signal, cancel context.CancelFunc) {
	s := (<-sigs).(syscall.Signal)
	interrupted.Store(int32(s))
	exiting.Lock()
	if n := atomicfile.RemovePending() + storage.AbortPending(); n > 0 {
		fmt.Fprintf(os.Stderr, "ckpt: %s: removed %s\n", s, plural(n, "partial output"))
		os.Exit(128 + int(s))
	}
	exiting.Unlock()
	cancel()
	select {
	case <-sigs:
	case <-time.After(unwindGrace):
	}
	exiting.Lock()
	os.Exit(128 + int(s))
}

// quiet reports whether --quiet was given.
func quiet(cmd *cobra.Command) bool {
	q, _ := cmd.Flags().GetBool("quiet")
	return q
}

// flagString is the value of a string flag of cmd.
func flagString(cmd *cobra.Command, name string) string {
	v, _ := cmd.Flags().GetString(name)
	return v
}

// plural says "1 tensor", "2 tensors".
func plural(n int, noun string) string { return english.Of(n, noun) }

// schemaVersion is the version of every --json output's schema (docs/json.md); it changes
// when a field changes meaning or goes away, not when one is added.
const schemaVersion = 1

// printedJSON records that the command being executed printed its --json output.
var printedJSON bool

// printJSON writes v, a struct or map that encodes as a JSON object, as the --json output of
// a command: indented, with "schema_version" first.
func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) < 2 || b[0] != '{' {
		return fmt.Errorf("--json output of %T is not an object", v)
	}
	head := fmt.Sprintf(`{"schema_version":%d`, schemaVersion)
	if len(b) > 2 {
		head += ","
	}
	var out bytes.Buffer
	if err := json.Indent(&out, append([]byte(head), b[1:]...), "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	printedJSON = true
	_, err = w.Write(out.Bytes())
	return err
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "ckpt",
		Short: "Read, check and convert PyTorch checkpoints for TPUs, safely",
		Long: `ckpt reads PyTorch checkpoints — torch.save files, safetensors, Hugging Face folders,
torch.distributed.checkpoint directories — without executing any pickle code, and converts
them for TorchTPU: device tags, dtypes, names, quantization and training state.

Paths may be local, gs://bucket/prefix or s3://bucket/prefix (credentials from the
environment: Application Default Credentials, the AWS SDK chain; STORAGE_EMULATOR_HOST and
AWS_ENDPOINT_URL_S3 name emulators), or ORG/NAME[@REVISION], a model in the local Hugging
Face cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub; a local path that exists
wins).

` + exitCodes,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	// An unknown command is a usage error (exit 2), with cobra's suggestions.
	root.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return usage(fmt.Errorf("%s (ckpt --help lists the commands)", msg))
	}
	root.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	root.Version = toolVersion()
	root.SetVersionTemplate("ckpt {{.Version}}\n")
	root.PersistentFlags().BoolP("quiet", "q", false, "print errors only (no summary, warnings or progress)")
	root.AddCommand(newVersionCmd(), newInspectCmd(), newScanCmd(), newConvertCmd(), newCheckCmd(), newDevicesCmd(), newPlanCmd(), newForwardCmd(), newVerifyCmd())
	for _, c := range toolCommands {
		root.AddCommand(c())
	}
	holdUsageContract(root)
	return root
}

// toolCommands are hidden commands of the developers' builds (build tags), which the
// shipped binary does not link: gen-docs (gendocs.go).
var toolCommands []func() *cobra.Command
