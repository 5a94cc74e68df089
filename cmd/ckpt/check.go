package main

import (
	"fmt"

	"github.com/ckpt-dev/ckpt/verify"
	"github.com/spf13/cobra"
)

func newCheckCmd() *cobra.Command {
	var asJSON bool
	var manifest string
	cmd := &cobra.Command{
		Use: "check OUTPUT",
		Example: `  # after copying a converted checkpoint to a TPU VM or a bucket mount
  ckpt check /mnt/ckpt/llama_tpu
  # a program reads the verdict and the problems
  ckpt check --json model_tpu.safetensors`,
		Short: "Verify a converted checkpoint against its ckpt-manifest.json",
		Long: `check re-reads a checkpoint written by ckpt convert (a file, a Hugging Face folder or a
DCP directory) and compares it with the manifest convert wrote beside it (OUTPUT.ckpt-manifest.json)
or inside it (ckpt-manifest.json): every tensor the manifest lists must be present with the
recorded dtype, shape, size and xxhash64 of its bytes, and no other tensor may be present.
Run it after copying a checkpoint to a TPU VM, or on a gs:// or s3:// output. Exits 5 naming the first
problem when the checkpoint differs from its manifest.`,
		Args: positional("OUTPUT", "ckpt check model_tpu.pt"),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := verify.Check(cmd.Context(), args[0], manifest)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := printJSON(out, rep); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "%s: %d of %s intact (%d bytes hashed), manifest %s\n",
					rep.Path, rep.Checked, plural(rep.Tensors, "tensor"), rep.Bytes, rep.Manifest)
				if !rep.OK() {
					tw := newTable(out, 0)
					fmt.Fprintln(tw, "TENSOR\tPROBLEM\tMANIFEST\tOUTPUT")
					for _, p := range rep.Problems {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Tensor, p.Kind, showValue(p.Want), showValue(p.Got))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
				}
			}
			return rep.Err()
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&manifest, "manifest", "", "the manifest to check against (default: the one convert wrote with OUTPUT)")
	return cmd
}
