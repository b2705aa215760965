package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/echopubsub/echopubsub/internal/proc"
)

// child is one node (or NATS server) process the harness started: the
// shared controller (internal/proc) with this harness's protocol types.
type child struct{ *proc.Proc }

// SetID numbers the command for the controller.
func (c *cmd) SetID(id int64) { c.ID = id }

// startChild re-executes this binary in role with cfg and env added to its
// environment, stderr appended to logPath, and waits for its "ready" line.
func startChild(name, role string, cfg nodeConfig, logPath string, timeout time.Duration, env ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	p, err := proc.Start(context.Background(), proc.Spec{Name: name, Argv: []string{self},
		Env: append([]string{roleEnv + "=" + role, configEnv + "=" + string(b)}, env...), Log: logPath, ReadyTimeout: timeout})
	if err != nil {
		return nil, err
	}
	return &child{p}, nil
}

// call sends c and waits for its reply.
func (p *child) call(c cmd, timeout time.Duration) (event, error) {
	var ev event
	err := p.Call(&c, &ev, timeout)
	return ev, err
}

// stop asks the process to quit and kills it if it has not within 5 s.
func (p *child) stop() { _ = p.Quit(&cmd{Op: "quit"}, 5*time.Second) }

// hwmKB is the process's peak resident set (VmHWM), in KiB.
func (p *child) hwmKB() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}

// cpu is the user+sys CPU time the process has used so far (from
// /proc/<pid>/stat, in clock ticks of 1/100 s on Linux).
func (p *child) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces, in parentheses):
	// utime and stime are the 14th and 15th fields of the whole line.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// cpuOf is the CPU time of every process in ps together.
func cpuOf(ps []*child) time.Duration {
	var t time.Duration
	for _, p := range ps {
		t += p.cpu()
	}
	return t
}

// runQueueOf is the time the threads of every process in ps have waited for
// a core, together (proc.RunQueueWait).
func runQueueOf(ps []*child) time.Duration {
	var t time.Duration
	for _, p := range ps {
		t += proc.RunQueueWait(p.Pid())
	}
	return t
}
