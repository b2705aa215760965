package proc

import (
	"os/exec"
	"syscall"
)

// setGroup puts the child in its own process group, so that a signal
// reaches anything it started, and makes the kernel kill it if this process
// dies without stopping it.
func setGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
