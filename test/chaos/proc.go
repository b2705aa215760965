package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildNode builds the chaosnode binary into dir (with -race if race) and
// returns its path.
func BuildNode(ctx context.Context, dir string, race bool) (string, error) {
	return BuildNodeTags(ctx, dir, race)
}

// BuildNodeTags is BuildNode with build tags (plantdefect: the binary can
// plant the defect that ECHOPUBSUB_PLANT_DEFECT names, see internal/plant).
func BuildNodeTags(ctx context.Context, dir string, race bool, tags ...string) (string, error) {
	out := filepath.Join(dir, "chaosnode")
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "github.com/echopubsub/echopubsub/test/chaos/chaosnode")
	cmd := exec.CommandContext(ctx, "go", args...)
	if _, file, _, ok := runtime.Caller(0); ok {
		cmd.Dir = filepath.Dir(file) // inside the module, wherever the caller runs
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build chaosnode: %v\n%s", err, b)
	}
	return out, nil
}

// Proc is one running chaosnode process (a node or the proxy).
type Proc struct {
	Name string
	cmd  *exec.Cmd
	in   io.WriteCloser

	mu      sync.Mutex
	nextID  int64
	waiting map[int64]chan Event
	status  Event // the latest status
	onEvent func(*Proc, Event)
	exited  chan struct{}
	exitErr error
	ready   chan Event
}

// StartProc starts argv (argv[0] is the program) with stderr appended to
// logPath; onEvent sees every unsolicited event (status, violation). It
// waits for the process's "ready" line.
func StartProc(name string, argv []string, logPath string, onEvent func(*Proc, Event)) (*Proc, Event, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, Event{}, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = logf
	in, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, Event{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, Event{}, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, Event{}, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, in: in, waiting: map[int64]chan Event{}, onEvent: onEvent,
		exited: make(chan struct{}), ready: make(chan Event, 1)}
	go p.read(stdout)
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(p.exited)
	}()
	select {
	case ev := <-p.ready:
		return p, ev, nil
	case <-p.exited:
		return nil, Event{}, fmt.Errorf("%s exited before ready: %v (see %s)", name, p.exitErr, logPath)
	case <-time.After(30 * time.Second):
		_ = p.Kill()
		return nil, Event{}, fmt.Errorf("%s not ready within 30s (see %s)", name, logPath)
	}
}

func (p *Proc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			continue
		}
		switch ev.Ev {
		case "ready":
			p.ready <- ev
		case "reply":
			p.mu.Lock()
			ch := p.waiting[ev.ID]
			delete(p.waiting, ev.ID)
			p.mu.Unlock()
			if ch != nil {
				ch <- ev
			}
		default:
			if ev.Ev == "status" {
				p.mu.Lock()
				p.status = ev
				p.mu.Unlock()
			}
			if p.onEvent != nil {
				p.onEvent(p, ev)
			}
		}
	}
}

// ErrExited is returned by Call when the process is gone.
var ErrExited = errors.New("chaos: process exited")

// Call sends c and waits up to timeout for its reply.
func (p *Proc) Call(c Command, timeout time.Duration) (Event, error) {
	p.mu.Lock()
	p.nextID++
	c.ID = p.nextID
	ch := make(chan Event, 1)
	p.waiting[c.ID] = ch
	p.mu.Unlock()
	b, err := json.Marshal(c)
	if err != nil {
		return Event{}, err
	}
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return Event{}, fmt.Errorf("%s %s: %w", p.Name, c.Op, err)
	}
	select {
	case ev := <-ch:
		if ev.Err != "" {
			return ev, fmt.Errorf("%s %s: %s", p.Name, c.Op, ev.Err)
		}
		return ev, nil
	case <-p.exited:
		return Event{}, fmt.Errorf("%s %s: %w", p.Name, c.Op, ErrExited)
	case <-time.After(timeout):
		return Event{}, fmt.Errorf("%s %s: no reply within %v", p.Name, c.Op, timeout)
	}
}

// Status is the latest status the process reported unasked.
func (p *Proc) Status() Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill is kill -9; it waits (up to 10 s) for the process to be reaped.
func (p *Proc) Kill() error {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s not reaped 10s after SIGKILL", p.Name)
	}
}

// Quit asks the process to stop, and kills it if it has not within timeout.
func (p *Proc) Quit(timeout time.Duration) error {
	_, err := p.Call(Command{Op: OpQuit}, timeout)
	_ = p.in.Close()
	select {
	case <-p.exited:
		return nil
	case <-time.After(timeout):
		_ = p.Kill()
		if err == nil {
			err = fmt.Errorf("%s did not exit within %v of quit", p.Name, timeout)
		}
		return err
	}
}

// ExitState is the process's exit state once it exited (nil before).
func (p *Proc) ExitState() *os.ProcessState {
	select {
	case <-p.exited:
		return p.cmd.ProcessState
	default:
		return nil
	}
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Pid is the OS process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }
