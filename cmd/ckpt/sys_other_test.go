//go:build !unix

package main

import (
	"os"
	"testing"
)

func stopProcess(t *testing.T, _ *os.Process) { t.Helper(); t.Skip("no SIGSTOP here") }

func inode(os.FileInfo) uint64 { return 0 }

func maxRSS(*os.ProcessState) (int64, bool) { return 0, false }
