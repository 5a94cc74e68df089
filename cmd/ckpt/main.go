// Command ckpt inspects, scans and converts PyTorch checkpoints (torch.save files, safetensors,
// Hugging Face folders, torch.distributed.checkpoint directories) without executing any
// pickle code, for moving GPU-trained work onto TPUs.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// exitError carries a specific exit status out of a command (e.g. scan found danger).
type exitError struct {
	code int
	msg  string
}

// Error returns the message printed before exiting.
func (e *exitError) Error() string { return e.msg }

func main() {
	root := newRoot()
	if err := root.Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.msg != "" {
				fmt.Fprintln(os.Stderr, "ckpt:", ee.msg)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "ckpt:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "ckpt",
		Short:         "Read, check and convert PyTorch checkpoints for TPUs, safely",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCmd(), newInspectCmd(), newScanCmd(), newConvertCmd(), newCheckCmd())
	return root
}
