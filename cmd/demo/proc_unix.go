//go:build unix && !linux

package main

import (
	"os/exec"
	"syscall"
)

// setProcAttrs puts a node in its own process group. Without Pdeathsig
// (Linux only), a node notices the demo is gone when its stdin closes.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// terminate signals the node's process group: SIGTERM asks for a graceful
// stop, force kills it.
func terminate(cmd *exec.Cmd, force bool) error {
	sig := syscall.SIGTERM
	if force {
		sig = syscall.SIGKILL
	}
	return syscall.Kill(-cmd.Process.Pid, sig)
}
