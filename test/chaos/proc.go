package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/echopubsub/echopubsub/internal/proc"
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

// Proc is one running chaosnode process (a node or the proxy): the shared
// controller (internal/proc) with the chaos protocol's types.
type Proc struct {
	*proc.Proc
	name string // set before the controller starts: events may come before Start returns

	mu     sync.Mutex
	status Event // the latest status
}

// SetID numbers the command for the controller.
func (c *Command) SetID(id int64) { c.ID = id }

// StartProc starts argv (argv[0] is the program) with stderr appended to
// logPath; onEvent sees every unsolicited event (status, violation). It
// waits up to 30 s for the process's "ready" line and returns it.
func StartProc(name string, argv []string, logPath string, onEvent func(*Proc, Event)) (*Proc, Event, error) {
	p := &Proc{name: name}
	var err error
	p.Proc, err = proc.Start(context.Background(), proc.Spec{Name: name, Argv: argv, Log: logPath,
		OnEvent: func(_ *proc.Proc, _ proc.Header, line []byte) {
			var ev Event
			if json.Unmarshal(line, &ev) != nil {
				return
			}
			if ev.Ev == "status" {
				p.mu.Lock()
				p.status = ev
				p.mu.Unlock()
			}
			if onEvent != nil {
				onEvent(p, ev)
			}
		}})
	if err != nil {
		return nil, Event{}, err
	}
	var ready Event
	return p, ready, p.Ready(&ready)
}

// Name is the name StartProc was given.
func (p *Proc) Name() string { return p.name }

// Call sends c and waits up to timeout for its reply.
func (p *Proc) Call(c Command, timeout time.Duration) (Event, error) {
	var ev Event
	err := p.Proc.Call(&c, &ev, timeout)
	return ev, err
}

// Status is the latest status the process reported unasked.
func (p *Proc) Status() Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Quit asks the process to stop, and kills it if it has not within timeout.
func (p *Proc) Quit(timeout time.Duration) error {
	return p.Proc.Quit(&Command{Op: OpQuit}, timeout)
}
