//go:build unix

package seglog

import (
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive lock on dir's LOCK file (flock): a second
// process (or a second Open in this one) is refused, not let in to write
// the same segments.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%s is locked (another store has this directory open): %w", path, err)
	}
	return f, nil
}

// syncDir fsyncs directory dir, so that a file created in it is there
// after a power loss.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
