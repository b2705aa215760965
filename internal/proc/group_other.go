//go:build !unix

package proc

import (
	"os"
	"os/exec"
)

// setGroup does nothing here: the child notices this process is gone when
// its stdin closes.
func setGroup(*exec.Cmd) {}

func (p *Proc) signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// terminate kills the child: there is no SIGTERM to ask politely with.
func (p *Proc) terminate() error { return p.cmd.Process.Kill() }

func (p *Proc) kill() error { return p.cmd.Process.Kill() }
