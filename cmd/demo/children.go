package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// child is one node process, started by re-executing this binary with
// nodeFlag.
type child struct {
	index   int
	spec    nodeSpec
	cmd     *exec.Cmd
	stdin   io.WriteCloser // held open: the node exits when it closes
	control string         // the node's HTTP control URL
	done    chan struct{}  // closed when the process has exited
	waitErr error          // valid after done
}

// spawnChild starts a node process and waits until it reports ready.
func spawnChild(ctx context.Context, exe string, spec nodeSpec) (*child, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, nodeFlag, string(b))
	cmd.Stderr = os.Stderr
	setProcAttrs(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("node %d: %w", spec.Index, err)
	}
	c := &child{index: spec.Index, spec: spec, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	ready := make(chan string, 1)
	go func() {
		// Read stdout to its end before Wait, which closes the pipe.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), readyPrefix); ok {
				select {
				case ready <- url:
				default:
				}
			}
		}
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	select {
	case c.control = <-ready:
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("node %d exited before it was ready: %v", spec.Index, c.waitErr)
	case <-time.After(30 * time.Second):
		err = fmt.Errorf("node %d not ready after 30s", spec.Index)
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = terminate(cmd, true)
	<-c.done
	return nil, err
}

// stop asks the node to stop, and kills its process group if it is still
// running when ctx ends.
func (c *child) stop(ctx context.Context) error {
	_ = terminate(c.cmd, false)
	select {
	case <-c.done:
	case <-ctx.Done():
		_ = terminate(c.cmd, true)
		<-c.done
		return fmt.Errorf("node %d did not stop in time: killed", c.index)
	}
	_ = c.stdin.Close()
	var exit *exec.ExitError
	if c.waitErr != nil && !errors.As(c.waitErr, &exit) {
		return fmt.Errorf("node %d: %w", c.index, c.waitErr)
	}
	return nil
}

// freeAddr returns a loopback address with a port that was free a moment
// ago, for a node's remote to listen on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}
