package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); otherwise it is derived
// from the module and VCS information Go embeds in the binary.
var version = ""

// toolVersion is the version string ckpt reports and records in its outputs.
func toolVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		return fmt.Sprintf("%s (%s%s)", v, rev, dirty)
	}
	return v
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Example: `  ckpt version`,
		Short:   "Print the ckpt version",
		Args:    positional("", "ckpt version"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "ckpt", toolVersion())
			return err
		},
	}
}
