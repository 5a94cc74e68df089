//go:build gendocs

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// The reference pages are generated from the commands themselves by a build of ckpt with
// the gendocs tag, which alone links cobra/doc (and its Markdown and man-page renderers):
//
//	go run -tags gendocs ./cmd/ckpt gen-docs docs
//
// CI regenerates them and fails when they differ, so the reference never drifts from the
// commands; the shipped binary carries no generator.
func init() { toolCommands = append(toolCommands, newGenDocsCmd) }

// newGenDocsCmd writes one Markdown page per command under DIR/cli and one man page per
// command under DIR/man.
func newGenDocsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "Write the generated command reference (Markdown and man pages) under DIR",
		Hidden: true,
		Args:   positional("DIR", "go run -tags gendocs ./cmd/ckpt gen-docs docs"),
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
