//go:build !linux

package main

import "context"

// stopOnKey is the Linux terminal handling of tty_linux.go; elsewhere
// Ctrl-C stays the terminal's signal (and `go run` reports exit status 1
// after it, golang/go#40467, although the demo exits 0).
func stopOnKey(ctx context.Context) (context.Context, func()) { return ctx, func() {} }
