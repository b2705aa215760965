//go:build unix && !linux

package proc

import (
	"os/exec"
	"syscall"
)

// setGroup puts the child in its own process group. Without Pdeathsig
// (Linux only), the child notices this process is gone when its stdin
// closes.
func setGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
