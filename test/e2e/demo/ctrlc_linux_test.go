package demo

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/echopubsub/echopubsub/internal/proc"
)

// TestDemoCtrlCInTerminal runs the README's first command, `go run
// ./cmd/demo`, in a pseudo-terminal as a person does, types Ctrl-C, and
// requires exit status 0 from `go run` and no process of the demo left.
// (`go run` reports status 1 whenever the terminal sends it SIGINT, whatever
// its program does: golang/go#40467; the demo reads Ctrl-C as a key instead,
// see cmd/demo/tty_linux.go.)
func TestDemoCtrlCInTerminal(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found: %v", err)
	}
	master, slave := openPTY(t)
	cmd := exec.Command(gobin, "run", "./cmd/demo", "-port", "0")
	cmd.Dir = repoRoot
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// A new session whose controlling terminal is the pty: `go run` and the
	// demo are its foreground process group, as in a shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start go run: %v", err)
	}
	slave.Close()
	session := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = syscall.Kill(-session, syscall.SIGKILL)
			<-done
		}
	})

	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(master)
		for sc.Scan() {
			t.Log("demo: " + sc.Text())
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine(t, lines, "ScoreBoard is running", 3*time.Minute) // the first go run may compile
	if _, err := master.Write([]byte{0x03}); err != nil {
		t.Fatalf("type Ctrl-C: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("go run ./cmd/demo after Ctrl-C: %v (want exit status 0)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not exit within 30 s of Ctrl-C")
	}
	// Every node process is gone: nothing is left in the terminal's session.
	var left []string
	if !proc.Until(10*time.Second, 50*time.Millisecond, func() bool { left = inSession(session); return len(left) == 0 }) {
		t.Fatalf("processes of the demo still running 10 s after it exited: %v", left)
	}
}

func waitLine(t *testing.T, lines <-chan string, want string, within time.Duration) {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the demo's terminal closed before %q", want)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no %q on the demo's terminal within %v", want, within)
		}
	}
}

// openPTY opens a pseudo-terminal pair (the master side and the slave
// the demo runs on) with the kernel's /dev/ptmx.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	unlock := 0
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != 0 {
		t.Fatalf("unlock pty: %v", e)
	}
	var n uint32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatalf("pty number: %v", e)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty slave: %v", err)
	}
	return master, slave
}

// inSession lists the processes whose session id is sid (field 6 of
// /proc/PID/stat).
func inSession(sid int) []string {
	var left []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 3 && f[3] == strconv.Itoa(sid) {
			left = append(left, d.Name()+" "+s[:i+1])
		}
	}
	return left
}
