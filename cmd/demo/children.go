package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"

	"github.com/echopubsub/echopubsub/internal/proc"
)

// child is one node process, started by re-executing this binary with
// nodeFlag. Its stdin stays open: the node exits when it closes.
type child struct {
	index   int
	spec    nodeSpec
	proc    *proc.Proc
	control string // the node's HTTP control URL
}

// spawnChild starts a node process, in its own process group (see
// proc.Spec.Group), and waits until it reports ready.
func spawnChild(ctx context.Context, exe string, spec nodeSpec) (*child, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	p, err := proc.Start(ctx, proc.Spec{Name: fmt.Sprintf("node %d", spec.Index), Argv: []string{exe, nodeFlag, string(b)}, Group: true})
	if err != nil {
		return nil, err
	}
	var ready readyLine
	if err := p.Ready(&ready); err != nil {
		_ = p.Kill()
		return nil, fmt.Errorf("node %d: ready line: %w", spec.Index, err)
	}
	return &child{index: spec.Index, spec: spec, proc: p, control: ready.Control}, nil
}

// stop asks the node to stop (SIGTERM to its process group), and kills the
// group if it is still running when ctx ends. A node that exits with a
// non-zero status has logged why: that is not an error of stop.
func (c *child) stop(ctx context.Context) error {
	if err := c.proc.Stop(ctx); err != nil {
		return err
	}
	var exit *exec.ExitError
	if err := c.proc.Err(); err != nil && !errors.As(err, &exit) {
		return fmt.Errorf("node %d: %w", c.index, err)
	}
	return nil
}
