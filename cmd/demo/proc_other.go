//go:build !unix

package main

import "os/exec"

// setProcAttrs does nothing here: a node notices the demo is gone when its
// stdin closes.
func setProcAttrs(*exec.Cmd) {}

// terminate kills the node: there is no SIGTERM to ask politely with.
func terminate(cmd *exec.Cmd, _ bool) error { return cmd.Process.Kill() }
