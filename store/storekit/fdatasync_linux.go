package storekit

import (
	"os"
	"syscall"
)

// Fdatasync flushes f's data (and the metadata needed to read it back,
// such as its size) to the device: fdatasync(2).
func Fdatasync(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
			}
			return nil
		}
	}
}
