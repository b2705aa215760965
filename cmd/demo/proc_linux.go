package main

import (
	"os/exec"
	"syscall"
)

// setProcAttrs puts a node in its own process group, so that stopping it
// reaches anything it started, and makes the kernel kill it if the demo
// dies without stopping it.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
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
