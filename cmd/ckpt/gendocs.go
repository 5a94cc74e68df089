package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newGenDocsCmd writes the reference pages generated from the commands themselves: one
// Markdown page per command under DIR/cli and one man page per command under DIR/man. The
// committed docs/ are regenerated with `go run ./cmd/ckpt gen-docs docs`; CI regenerates
// them and fails when they differ, so the reference never drifts from the commands.
func newGenDocsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "Write the generated command reference (Markdown and man pages) under DIR",
		Hidden: true,
		Args:   positional("DIR", "ckpt gen-docs docs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			root.DisableAutoGenTag = true
			md, man := filepath.Join(args[0], "cli"), filepath.Join(args[0], "man")
			for _, d := range []string{md, man} {
				if err := os.RemoveAll(d); err != nil {
					return err
				}
				if err := os.MkdirAll(d, 0o755); err != nil {
					return err
				}
			}
			if err := doc.GenMarkdownTree(root, md); err != nil {
				return fmt.Errorf("markdown: %w", err)
			}
			// A fixed date keeps the pages byte-identical between runs (CI compares them).
			date := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			hdr := &doc.GenManHeader{Title: "CKPT", Section: "1", Source: "ckpt", Manual: "ckpt manual", Date: &date}
			if err := doc.GenManTree(root, hdr, man); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			return nil
		},
	}
}
