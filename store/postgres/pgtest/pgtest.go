// Package pgtest starts a real PostgreSQL server for tests: initdb and
// pg_ctl (Debian's postgresql package; /usr/lib/postgresql/*/bin is
// searched when they are not on PATH) in a temporary data directory, on a
// free loopback port. As root, initdb and the server run as the "postgres"
// user (PostgreSQL refuses to run as root). The server is this process's
// child and is killed with it (Linux parent-death signal), so a test binary
// that dies leaves no server behind.
package pgtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is one running PostgreSQL server.
type Server struct {
	dir, data, bin string
	Port           int
	cred           *syscall.Credential // nil: the current user
	proc           *exec.Cmd
	exited         chan struct{}
}

// DSN is the URL of the server's "postgres" database, superuser postgres,
// no password (trust on loopback).
func (s *Server) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.Port)
}

// SocketDSN is DSN through the server's Unix socket (in its temporary
// directory): it reaches the server from another network namespace of this
// machine, where 127.0.0.1 is that namespace's own loopback.
func (s *Server) SocketDSN() string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", s.dir, s.Port)
}

// Available reports whether initdb can be found (tests skip otherwise only
// when the caller decides so: CI installs it, see .ci/deps).
func Available() bool { _, err := binDir(); return err == nil }

func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", fmt.Errorf("pgtest: initdb not found on PATH nor in /usr/lib/postgresql/*/bin (apt-get install postgresql)")
}

// Start initialises a data directory and starts the server; Stop removes
// it.
func Start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "echopubsub-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, data: filepath.Join(dir, "data"), bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: running as root needs a 'postgres' user to run the server: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if out, err := s.run("initdb", "-D", s.data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %v: %s", err, out)
	}
	if err := s.start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) start() error {
	if s.Port == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		s.Port = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data, "-p", strconv.Itoa(s.Port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200")
	cmd.Dir, cmd.Stdout, cmd.Stderr = s.dir, log, log
	// Its own process group: Pause and Resume signal the postmaster and
	// every backend at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s.proc, s.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.exited) // reaps the server; ends when it exits
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, s.DSN())
		if err == nil {
			_ = c.Close(ctx)
			return nil
		}
		select {
		case <-s.exited:
			out, _ := os.ReadFile(filepath.Join(s.dir, "log"))
			return fmt.Errorf("pgtest: postgres exited: %s", out)
		default:
		}
		if ctx.Err() != nil {
			return fmt.Errorf("pgtest: server on port %d does not answer: %w", s.Port, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the server's start-up, bounded by ctx
	}
}

// Crash stops the server the way a crash does: an immediate shutdown
// (SIGQUIT: no checkpoint, every backend quits at once; the next start
// recovers from the WAL).
func (s *Server) Crash() error {
	if s.proc == nil {
		return nil
	}
	_ = s.proc.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.proc.Process.Kill()
		<-s.exited
	}
	s.proc = nil
	return nil
}

// Pid is the postmaster's process id (0 when the server is not running).
func (s *Server) Pid() int {
	if s.proc == nil {
		return 0
	}
	return s.proc.Process.Pid
}

// Pause SIGSTOPs the whole server (the postmaster and every backend, its
// process group): connections stay open and every query hangs, as on a
// frozen database host. Resume SIGCONTs it.
func (s *Server) Pause() error { return s.signalGroup(syscall.SIGSTOP) }

// Resume SIGCONTs a paused server.
func (s *Server) Resume() error { return s.signalGroup(syscall.SIGCONT) }

func (s *Server) signalGroup(sig syscall.Signal) error {
	if s.proc == nil {
		return fmt.Errorf("pgtest: the server is not running")
	}
	return syscall.Kill(-s.proc.Process.Pid, sig)
}

// Restart starts a stopped (or crashed) server again on the same port.
func (s *Server) Restart() error { return s.start() }

// Stop stops the server and removes its data directory.
func (s *Server) Stop() {
	_ = s.Crash()
	_ = os.RemoveAll(s.dir)
}

func (s *Server) run(tool string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(s.bin, tool), args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
