// Package proc starts and drives the child processes of the harnesses, the
// demo and the tests: the chaos nodes and proxy, the benchmark's nodes and
// NATS server, the demo's node processes and the root package's child
// nodes. It also holds the free-port and polling helpers they share.
//
// A child speaks JSON lines: it writes one JSON object per line on stdout,
// each with an "ev" field, and reads commands, one JSON object per line, on
// stdin. It says it is running with one "ready" line; it answers a command
// with id N with a "reply" line with id N (and "err" when the command
// failed). Other lines are events it sends unasked (status, violation);
// lines that are not JSON objects (a library printing to stdout) are
// skipped. The protocol's fields beyond ev, id and err belong to the
// caller: Call and Ready decode the whole line into the caller's type.
// Start, Call and Quit are the parent's side; Child and Commands the
// child's (every child process of the repository speaks through them).
//
// Nothing in the library imports this package: it is plumbing for
// programs and tests in this repository.
package proc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Header is what the controller reads of every line a child writes.
type Header struct {
	Ev  string `json:"ev"`            // "ready", "reply" or the caller's event kinds
	ID  int64  `json:"id,omitempty"`  // reply: the command's id
	Err string `json:"err,omitempty"` // reply: why the command failed
}

// Request is a command the controller numbers before it sends it: SetID
// sets the field the child echoes in its reply's "id".
type Request interface {
	SetID(id int64)
}

// Spec says how to start a child.
type Spec struct {
	// Name names the child in errors.
	Name string
	// Argv is the program and its arguments.
	Argv []string
	// Env is added to this process's environment.
	Env []string
	// Log is the file the child's stderr is appended to; empty: this
	// process's stderr.
	Log string
	// Group runs the child in its own process group, which Signal, Stop
	// and Kill reach as a whole (Unix), and asks the kernel to kill it when
	// this process dies (Linux). Without Unix, the child notices this
	// process is gone when its stdin closes.
	Group bool
	// ReadyTimeout bounds the wait for the "ready" line; 0: 30 s.
	ReadyTimeout time.Duration
	// OnEvent sees every line other than "ready" and "reply", in order,
	// on the goroutine that reads the child's stdout: it must not block
	// on the child.
	OnEvent func(p *Proc, h Header, line []byte)
}

// Proc is one running child.
type Proc struct {
	name    string
	cmd     *exec.Cmd
	group   bool
	onEvent func(*Proc, Header, []byte)

	writeMu sync.Mutex     // one line at a time on stdin
	in      io.WriteCloser // held open: the child may exit when it closes

	mu      sync.Mutex
	nextID  int64
	waiting map[int64]chan []byte

	ready     chan struct{} // closed when the ready line came
	readyLine []byte        // written once, before ready closes
	exited    chan struct{} // closed when the child has exited and its stdout is drained
	waitErr   error         // Wait's error; read after exited
	stopOnce  sync.Once
}

// ErrExited is returned (wrapped) by Call when the child is gone.
var ErrExited = errors.New("proc: process exited")

// Start starts the child and returns once it wrote its "ready" line. It
// kills the child and fails if the child exits first, if the line does not
// come within s.ReadyTimeout, or if ctx ends.
func Start(ctx context.Context, s Spec) (*Proc, error) {
	if len(s.Argv) == 0 {
		return nil, fmt.Errorf("start %s: empty Argv", s.Name)
	}
	cmd := exec.Command(s.Argv[0], s.Argv[1:]...)
	if len(s.Env) > 0 {
		cmd.Env = append(os.Environ(), s.Env...)
	}
	var logf *os.File
	cmd.Stderr = os.Stderr
	if s.Log != "" {
		f, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", s.Name, err)
		}
		logf, cmd.Stderr = f, f
	}
	closeLog := func() {
		if logf != nil {
			logf.Close()
		}
	}
	if s.Group {
		setGroup(cmd)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		closeLog()
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		closeLog()
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	if err := cmd.Start(); err != nil {
		closeLog()
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	p := &Proc{name: s.Name, cmd: cmd, group: s.Group, onEvent: s.OnEvent, in: in,
		waiting: map[int64]chan []byte{}, ready: make(chan struct{}), exited: make(chan struct{})}
	go func() { // owned by the child: ends when its stdout closes
		p.read(out)
		// Wait only after every read from the pipe (os/exec's rule).
		p.waitErr = cmd.Wait()
		closeLog()
		close(p.exited)
	}()
	timeout := s.ReadyTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.ready:
		return p, nil
	case <-p.exited:
		select {
		case <-p.ready: // ready, then gone: the caller sees the exit
			return p, nil
		default:
		}
		return nil, fmt.Errorf("%s exited before it was ready: %v%s", s.Name, p.waitErr, seeLog(s.Log))
	case <-timer.C:
		err = fmt.Errorf("%s not ready within %v%s", s.Name, timeout, seeLog(s.Log))
	case <-ctx.Done():
		err = fmt.Errorf("%s: %w", s.Name, ctx.Err())
	}
	_ = p.Kill()
	return nil, err
}

func seeLog(path string) string {
	if path == "" {
		return ""
	}
	return " (see " + path + ")"
}

func (p *Proc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		var h Header
		if json.Unmarshal(sc.Bytes(), &h) != nil || h.Ev == "" {
			continue // not ours
		}
		line := append([]byte(nil), sc.Bytes()...)
		switch h.Ev {
		case EvReady:
			if p.readyLine == nil { // only the first counts
				p.readyLine = line
				close(p.ready)
			}
		case EvReply:
			p.mu.Lock()
			ch := p.waiting[h.ID]
			delete(p.waiting, h.ID)
			p.mu.Unlock()
			if ch != nil {
				ch <- line // buffered
			}
		default:
			if p.onEvent != nil {
				p.onEvent(p, h, line)
			}
		}
	}
	// A line past the limit ends the scan: drain, so the child never
	// blocks on a full pipe.
	_, _ = io.Copy(io.Discard, r)
}

// Ready decodes the child's "ready" line into v.
func (p *Proc) Ready(v any) error {
	<-p.ready // closed before Start returned p
	return json.Unmarshal(p.readyLine, v)
}

// Call numbers req, writes it as one line and waits up to timeout for its
// reply, which it decodes into reply (unless reply is nil). A reply with
// "err" is an error (reply is decoded all the same).
func (p *Proc) Call(req Request, reply any, timeout time.Duration) error {
	if p.hasExited() {
		return fmt.Errorf("%s: %w", p.name, ErrExited)
	}
	ch := make(chan []byte, 1)
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	p.waiting[id] = ch
	p.mu.Unlock()
	forget := func() {
		p.mu.Lock()
		delete(p.waiting, id)
		p.mu.Unlock()
	}
	req.SetID(id)
	b, err := json.Marshal(req)
	if err != nil {
		forget()
		return fmt.Errorf("%s: %w", p.name, err)
	}
	var op struct {
		Op string `json:"op"`
	}
	_ = json.Unmarshal(b, &op) // for errors only
	p.writeMu.Lock()
	_, err = p.in.Write(append(b, '\n'))
	p.writeMu.Unlock()
	if err != nil {
		forget()
		return fmt.Errorf("%s %s: %w", p.name, op.Op, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case line := <-ch:
		var h Header
		_ = json.Unmarshal(line, &h)
		if reply != nil {
			if err := json.Unmarshal(line, reply); err != nil {
				return fmt.Errorf("%s %s: reply: %w", p.name, op.Op, err)
			}
		}
		if h.Err != "" {
			return fmt.Errorf("%s %s: %s", p.name, op.Op, h.Err)
		}
		return nil
	case <-p.exited:
		forget()
		return fmt.Errorf("%s %s: %w", p.name, op.Op, ErrExited)
	case <-timer.C:
		forget()
		return fmt.Errorf("%s %s: no reply within %v", p.name, op.Op, timeout)
	}
}

// Quit asks the child to exit: it sends req (unless nil) and waits for its
// reply, closes the child's stdin, and waits for the exit. It kills the
// child if it has not exited within timeout of each step, and then says so.
func (p *Proc) Quit(req Request, timeout time.Duration) error {
	var err error
	if req != nil {
		err = p.Call(req, nil, timeout)
	}
	p.closeStdin()
	if p.waitExit(timeout) {
		return nil
	}
	_ = p.Kill()
	if err == nil {
		err = fmt.Errorf("%s did not exit within %v of quit: killed", p.name, timeout)
	}
	return err
}

// Stop asks the child to exit with SIGTERM (its group's, with Spec.Group;
// where there is no SIGTERM, it kills it), waits until it exits or ctx
// ends, and then kills it and says so. The child's exit status is not an
// error here: see ExitState and Err.
func (p *Proc) Stop(ctx context.Context) error {
	if !p.hasExited() {
		_ = p.terminate()
	}
	select {
	case <-p.exited:
		p.closeStdin()
		return nil
	case <-ctx.Done():
		_ = p.Kill()
		p.closeStdin()
		return fmt.Errorf("%s did not stop in time: killed", p.name)
	}
}

// Kill sends SIGKILL (to the group, with Spec.Group) and waits up to 10 s
// for the child to be reaped.
func (p *Proc) Kill() error {
	if !p.hasExited() {
		_ = p.kill()
	}
	if p.waitExit(10 * time.Second) {
		return nil
	}
	return fmt.Errorf("%s not reaped 10s after SIGKILL", p.name)
}

// Signal sends sig to the child (to its group, with Spec.Group). Once the
// child has exited it sends nothing: its process id (and group id) may be
// another process's by then.
func (p *Proc) Signal(sig os.Signal) error {
	if p.hasExited() {
		return fmt.Errorf("%s: %w", p.name, ErrExited)
	}
	return p.signal(sig)
}

func (p *Proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

func (p *Proc) waitExit(timeout time.Duration) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.exited:
		return true
	case <-timer.C:
		return false
	}
}

func (p *Proc) closeStdin() { p.stopOnce.Do(func() { _ = p.in.Close() }) }

// Exited is closed once the child has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// ExitState is the child's exit state once it exited (nil before).
func (p *Proc) ExitState() *os.ProcessState {
	if !p.hasExited() {
		return nil
	}
	return p.cmd.ProcessState
}

// Err is Wait's error once the child exited (nil before, and after a zero
// exit status).
func (p *Proc) Err() error {
	if !p.hasExited() {
		return nil
	}
	return p.waitErr
}

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Name is Spec.Name.
func (p *Proc) Name() string { return p.name }
