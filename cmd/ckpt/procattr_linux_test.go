package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd when the process starting it dies.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
