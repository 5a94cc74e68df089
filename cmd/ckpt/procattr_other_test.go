//go:build !linux

package main

import "os/exec"

// dieWithParent: only Linux kills a child with its parent (Pdeathsig); the memory tests that
// start children through the measuring process run on Linux.
func dieWithParent(*exec.Cmd) {}
