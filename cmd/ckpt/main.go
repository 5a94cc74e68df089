// Command ckpt inspects, scans and converts PyTorch checkpoints (torch.save files, safetensors,
// Hugging Face folders, torch.distributed.checkpoint directories) without executing any
// pickle code, for moving GPU-trained work onto TPUs.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ckpt-dev/ckpt/internal/atomicfile"
	"github.com/spf13/cobra"
)

func main() {
	// Registered before any work starts, so no signal can arrive unhandled.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go removePartialOnSignal(sigs)
	root := newRoot()
	if err := execute(root); err != nil {
		fmt.Fprintln(os.Stderr, "ckpt:", err)
		os.Exit(exitStatus(err))
	}
}

// removePartialOnSignal waits for SIGINT or SIGTERM on sigs, removes the outputs being
// written (Go exits on these signals without running deferred cleanups, which would leave a
// partial checkpoint as large as the real one under its temporary name) and exits
// 128+signal.
func removePartialOnSignal(sigs <-chan os.Signal) {
	s := (<-sigs).(syscall.Signal)
	if n := atomicfile.RemovePending(); n > 0 {
		fmt.Fprintf(os.Stderr, "ckpt: %s: removed %d partial output(s)\n", s, n)
	}
	os.Exit(128 + int(s))
}

// printJSON writes v as indented JSON, the --json output of every command.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "ckpt",
		Short: "Read, check and convert PyTorch checkpoints for TPUs, safely",
		Long: `ckpt reads PyTorch checkpoints — torch.save files, safetensors, Hugging Face folders,
torch.distributed.checkpoint directories — without executing any pickle code, and converts
them for TorchTPU: device tags, dtypes, names, quantization and training state.

` + exitCodes,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	root.AddCommand(newVersionCmd(), newInspectCmd(), newScanCmd(), newConvertCmd(), newCheckCmd(), newDevicesCmd(), newPlanCmd(), newForwardCmd())
	return root
}
