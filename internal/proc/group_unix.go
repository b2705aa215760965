//go:build unix

package proc

import (
	"os"
	"syscall"
)

func (p *Proc) signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !p.group || !ok {
		return p.cmd.Process.Signal(sig)
	}
	return syscall.Kill(-p.cmd.Process.Pid, s)
}

func (p *Proc) terminate() error { return p.signal(syscall.SIGTERM) }

func (p *Proc) kill() error { return p.signal(syscall.SIGKILL) }
