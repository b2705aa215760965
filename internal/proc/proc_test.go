package proc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The test binary is the child too: childEnv names what it does.
const childEnv = "PROC_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "serve":
		os.Exit(serve())
	case "exit":
		fmt.Fprintln(os.Stderr, "giving up before ready")
		os.Exit(3)
	case "mute":
		time.Sleep(time.Minute) // never ready: the parent kills it
		os.Exit(0)
	}
}

type command struct {
	ID int64  `json:"id"`
	Op string `json:"op"`
	N  int    `json:"n,omitempty"`
}

func (c *command) SetID(id int64) { c.ID = id }

type event struct {
	Ev   string `json:"ev"`
	ID   int64  `json:"id,omitempty"`
	Err  string `json:"err,omitempty"`
	N    int    `json:"n,omitempty"`
	Addr string `json:"addr,omitempty"`
}

// serve is the child: ready, then a reply per command; "twice" also sends
// an event unasked, "fail" replies with err, "quit" replies and exits.
func serve() int {
	out := NewChild(os.Stdout)
	fmt.Println("a library's stray line on stdout")
	out.Send(event{Ev: EvReady, Addr: "here"})
	for c := range Commands[command](out, os.Stdin) {
		switch c.Op {
		case "twice":
			out.Send(event{Ev: "status", N: c.N})
			out.Send(event{Ev: EvReply, ID: c.ID, N: 2 * c.N})
		case "fail":
			out.Send(event{Ev: EvReply, ID: c.ID, Err: "asked to fail"})
		case "quit":
			out.Send(event{Ev: EvReply, ID: c.ID})
			return 0
		case "hang":
		}
	}
	return 0 // stdin closed
}

// TestCommandsAnswersABadLine: the child's reader hands on every command
// in order and answers a line that is not one with a reply that says why
// (and carries no id), then goes on.
func TestCommandsAnswersABadLine(t *testing.T) {
	var out strings.Builder
	in := strings.NewReader(`{"id":1,"op":"a"}` + "\nnot json\n" + `{"id":2,"op":"b"}` + "\n")
	var got []string
	for c := range Commands[command](NewChild(&out), in) {
		got = append(got, fmt.Sprintf("%d:%s", c.ID, c.Op))
	}
	if strings.Join(got, " ") != "1:a 2:b" {
		t.Errorf("commands %q, want [1:a 2:b]", got)
	}
	var h Header
	if err := json.Unmarshal([]byte(out.String()), &h); err != nil || h.Ev != EvReply || h.ID != 0 || !strings.Contains(h.Err, `bad command "not json"`) {
		t.Errorf("reply to the bad line: %q (%v), want a reply without id whose err names the line", out.String(), err)
	}
}

func start(t *testing.T, role string, spec Spec) (*Proc, error) {
	t.Helper()
	spec.Name = role
	spec.Argv = []string{os.Args[0], "-test.run=^$"}
	spec.Env = []string{childEnv + "=" + role}
	if spec.Log == "" {
		spec.Log = filepath.Join(t.TempDir(), role+".log")
	}
	p, err := Start(context.Background(), spec)
	if p != nil {
		t.Cleanup(func() { _ = p.Kill() })
	}
	return p, err
}

func TestCallEventsAndQuit(t *testing.T) {
	var status atomic.Int64
	p, err := start(t, "serve", Spec{Group: true, OnEvent: func(_ *Proc, h Header, line []byte) {
		var ev event
		if h.Ev == "status" && json.Unmarshal(line, &ev) == nil {
			status.Store(int64(ev.N))
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	var ready event
	if err := p.Ready(&ready); err != nil || ready.Addr != "here" {
		t.Fatalf("ready line %+v, %v", ready, err)
	}
	var ev event
	if err := p.Call(&command{Op: "twice", N: 21}, &ev, 5*time.Second); err != nil || ev.N != 42 {
		t.Fatalf("twice 21: %+v, %v", ev, err)
	}
	// The event came before the reply, on the same reader: it is seen.
	if got := status.Load(); got != 21 {
		t.Fatalf("status event: got %d, want 21", got)
	}
	if err := p.Call(&command{Op: "fail"}, nil, 5*time.Second); err == nil || !strings.Contains(err.Error(), "serve fail: asked to fail") {
		t.Fatalf("fail: got %v", err)
	}
	if err := p.Call(&command{Op: "hang"}, nil, 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no reply within") {
		t.Fatalf("hang: got %v", err)
	}
	if err := p.Quit(&command{Op: "quit"}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := p.ExitState(); st == nil || st.ExitCode() != 0 {
		t.Fatalf("exit state after quit: %v", st)
	}
	if err := p.Call(&command{Op: "twice"}, nil, 5*time.Second); !errors.Is(err, ErrExited) {
		t.Fatalf("call after exit: got %v, want ErrExited", err)
	}
}

func TestStopAndKill(t *testing.T) {
	p, err := start(t, "serve", Spec{Group: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p.ExitState(); st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("exit state after Stop: %v, want killed by SIGTERM", st)
	}

	p, err = start(t, "serve", Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if st := p.ExitState(); st == nil || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("exit state after Kill: %v", st)
	}
}

func TestStartFails(t *testing.T) {
	log := filepath.Join(t.TempDir(), "exit.log")
	if _, err := start(t, "exit", Spec{Log: log}); err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Fatalf("child that exits: got %v", err)
	}
	if b, _ := os.ReadFile(log); !strings.Contains(string(b), "giving up before ready") {
		t.Fatalf("child's stderr not in its log: %q", b)
	}
	began := time.Now()
	if _, err := start(t, "mute", Spec{ReadyTimeout: 200 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "not ready within 200ms") {
		t.Fatalf("child that is never ready: got %v", err)
	}
	if d := time.Since(began); d > 15*time.Second {
		t.Fatalf("the mute child was not killed promptly: %v", d)
	}
}

func TestFreePortsDiffer(t *testing.T) {
	ports, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %v: not distinct positive ports", ports)
		}
		seen[p] = true
	}
}

func TestUntil(t *testing.T) {
	n := 0
	if !Until(time.Second, time.Millisecond, func() bool { n++; return n == 3 }) {
		t.Fatal("Until gave up on a condition that held on the third call")
	}
	if Until(20*time.Millisecond, time.Millisecond, func() bool { return false }) {
		t.Fatal("Until passed a condition that never held")
	}
}

// TestRunQueueWait: the process's own figure is readable where Linux
// reports it, and never goes backwards.
func TestRunQueueWait(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc here")
	}
	a := RunQueueWait(os.Getpid())
	for i := 0; i < 1e6; i++ { // some CPU, so that the scheduler runs
		_ = i * i
	}
	if b := RunQueueWait(os.Getpid()); b < a {
		t.Fatalf("run-queue wait went back from %v to %v", a, b)
	}
}
