//go:build !unix

package seglog

import "os"

// lockDir opens dir's LOCK file; outside unix there is no flock: keeping
// two stores off one directory is the caller's business.
func lockDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

// syncDir does nothing outside unix (a directory cannot be fsynced there).
func syncDir(string) error { return nil }
