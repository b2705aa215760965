//go:build !linux

package storekit

import "os"

// Fdatasync flushes f to the device (f.Sync: fsync, or F_FULLFSYNC on
// darwin; fdatasync(2) on linux).
func Fdatasync(f *os.File) error { return f.Sync() }
