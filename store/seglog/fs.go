package seglog

import (
	"io"
	"os"

	"github.com/echopubsub/echopubsub/store/storekit"
)

// fileSys is what the store does to its directory: the operating
// system's (osFS), or, in the power-loss tests, a layer that keeps what
// an fdatasync covered apart from what it did not (crashfs_test.go). It
// is chosen at Open: an interface call per write and per fdatasync, next
// to the system calls themselves.
type fileSys interface {
	// OpenFile opens name (os.OpenFile's flags, mode 0o600).
	OpenFile(name string, flag int) (segFile, error)
	// ReadDir lists the names in dir.
	ReadDir(dir string) ([]string, error)
	Remove(name string) error
	// Rename replaces newName with oldName's file, atomically.
	Rename(oldName, newName string) error
	// SyncDir makes dir's entries (files created or removed) durable.
	SyncDir(dir string) error
}

// segFile is an open segment.
type segFile interface {
	io.ReaderAt
	io.WriterAt
	Truncate(size int64) error
	// Datasync is fdatasync(2): what was written is on disk when it
	// returns nil.
	Datasync() error
	Size() (int64, error)
	Name() string
	// Close; a ReadAt after it fails with os.ErrClosed.
	Close() error
}

type osFS struct{}

func (osFS) OpenFile(name string, flag int) (segFile, error) {
	f, err := os.OpenFile(name, flag, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (osFS) Remove(name string) error { return os.Remove(name) }

func (osFS) Rename(oldName, newName string) error { return os.Rename(oldName, newName) }

func (osFS) SyncDir(dir string) error { return syncDir(dir) }

type osFile struct{ *os.File }

func (f osFile) Datasync() error { return storekit.Fdatasync(f.File) }

func (f osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// readAll reads f whole.
func readAll(f segFile) ([]byte, error) {
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}
