package main

import (
	"context"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// stopOnKey makes Ctrl-C a key the demo reads, not a signal the terminal
// sends, when standard input is a terminal; the returned context ends when
// Ctrl-C is typed (or when ctx ends), and restore puts the terminal back
// (call it before exiting; it is idempotent and also runs at the first
// Ctrl-C, so a second Ctrl-C is a signal again and kills the demo outright).
//
// Why: `go run` marks itself failed (exit status 1) whenever the terminal
// sends it SIGINT, whatever its program's exit status (cmd/go's builder
// sets it on interrupt; golang/go#40467), so `go run ./cmd/demo` stopped
// cleanly with Ctrl-C still reported failure. With the terminal's ISIG off
// no process of the foreground group gets SIGINT: the demo stops its nodes
// itself and exits 0, and so does `go run`. SIGINT and SIGTERM sent by
// other means still stop the demo (signal.NotifyContext in main).
func stopOnKey(ctx context.Context) (context.Context, func()) {
	fd := int(os.Stdin.Fd())
	var old syscall.Termios
	if ioctl(fd, syscall.TCGETS, &old) != nil {
		return ctx, func() {} // not a terminal: signals as usual
	}
	raw := old
	raw.Lflag &^= syscall.ISIG | syscall.ICANON | syscall.ECHO
	raw.Cc[syscall.VMIN], raw.Cc[syscall.VTIME] = 1, 0
	if ioctl(fd, syscall.TCSETS, &raw) != nil {
		return ctx, func() {}
	}
	var once sync.Once
	restore := func() { once.Do(func() { _ = ioctl(fd, syscall.TCSETS, &old) }) }
	ctx, cancel := context.WithCancel(ctx)
	// The reader blocks in read(2) on the terminal until a key comes; it
	// owns nothing and ends with the process (a read on a terminal cannot
	// be interrupted portably, and the demo exits right after stopping).
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := os.Stdin.Read(buf)
			if err != nil {
				return
			}
			for _, b := range buf[:n] {
				if b == 0x03 || b == 0x1c { // Ctrl-C, Ctrl-\ (the keys ISIG turned into signals)
					restore()
					cancel()
					return
				}
			}
		}
	}()
	return ctx, func() { restore(); cancel() }
}

func ioctl(fd int, req uintptr, t *syscall.Termios) error {
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(t))); e != 0 {
		return e
	}
	return nil
}
