package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one node (or NATS server) process the harness started.
type proc struct {
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser

	mu      sync.Mutex
	nextID  int64
	waiting map[int64]chan event
	ready   chan event
	exited  chan struct{}
}

// startProc re-executes this binary in role with cfg, stderr appended to
// logPath, and waits for its "ready" line.
func startProc(name, role string, cfg nodeConfig, logPath string, timeout time.Duration) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	c := exec.Command(self)
	c.Env = append(os.Environ(), roleEnv+"="+role, configEnv+"="+string(b))
	c.Stderr = logf
	in, err := c.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := c.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: c, in: in, waiting: map[int64]chan event{}, ready: make(chan event, 1), exited: make(chan struct{})}
	go func() {
		p.read(out)
		_ = c.Wait()
		logf.Close()
		close(p.exited)
	}()
	select {
	case <-p.ready:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("%s exited before ready (log: %s)", name, logPath)
	case <-time.After(timeout):
		p.kill()
		return nil, fmt.Errorf("%s not ready in %v (log: %s)", name, timeout, logPath)
	}
}

func (p *proc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<20), 64<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue // not ours (a library printing to stdout)
		}
		switch ev.Ev {
		case "ready":
			select {
			case p.ready <- ev:
			default:
			}
		case "reply":
			p.mu.Lock()
			ch := p.waiting[ev.ID]
			delete(p.waiting, ev.ID)
			p.mu.Unlock()
			if ch != nil {
				ch <- ev
			}
		}
	}
}

// call sends c and waits for its reply.
func (p *proc) call(c cmd, timeout time.Duration) (event, error) {
	ch := make(chan event, 1)
	p.mu.Lock()
	p.nextID++
	c.ID = p.nextID
	p.waiting[c.ID] = ch
	p.mu.Unlock()
	b, _ := json.Marshal(c)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return event{}, fmt.Errorf("%s: %s: %w", p.name, c.Op, err)
	}
	select {
	case ev := <-ch:
		if ev.Err != "" {
			return ev, fmt.Errorf("%s: %s: %s", p.name, c.Op, ev.Err)
		}
		return ev, nil
	case <-p.exited:
		return event{}, fmt.Errorf("%s: %s: process exited", p.name, c.Op)
	case <-time.After(timeout):
		return event{}, fmt.Errorf("%s: %s: no reply in %v", p.name, c.Op, timeout)
	}
}

// hwmKB is the process's peak resident set (VmHWM), in KiB.
func (p *proc) hwmKB() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
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

// stop asks the process to quit and kills it if it has not within 5 s.
func (p *proc) stop() {
	_, _ = p.call(cmd{Op: "quit"}, 3*time.Second)
	_ = p.in.Close()
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		p.kill()
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
	}
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
