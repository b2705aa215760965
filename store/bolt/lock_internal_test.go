package bolt

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	berrors "go.etcd.io/bbolt/errors"
)

// A file another Open holds is refused with an error naming the file and
// saying that someone else has it open, not bbolt's bare "timeout".
func TestOpenOfAFileAlreadyOpenNamesFileAndHolder(t *testing.T) {
	defer func(w time.Duration) { lockWait = w }(lockWait)
	lockWait = 100 * time.Millisecond // the test's wait, not 5 s: the lock is not going away
	path := filepath.Join(t.TempDir(), "node.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	_, err = Open(path)
	if err == nil {
		t.Fatal("a second Open of an open file: no error")
	}
	for _, want := range []string{`"` + path + `"`, "the file is locked", "another process, or another Open in this one, has it open"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("second Open: %q does not say %q", err, want)
		}
	}
	if !errors.Is(err, berrors.ErrTimeout) {
		t.Errorf("second Open: %v does not wrap bbolt's ErrTimeout", err)
	}
}
