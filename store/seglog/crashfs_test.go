package seglog

import (
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// crashFS is a fileSys that loses power: every file keeps what the last
// fdatasync made durable apart from the operations since (volatile), and
// a directory's entries (files created or removed) are durable once
// SyncDir returned. From its crashAt-th mutating operation on, every one
// fails (the machine stopped); image then builds the storage a restart
// finds: the durable state, with the operations no fdatasync covered
// dropped, applied in part with the next one torn at a byte, or applied
// only in some of their 512-byte sectors (the disk wrote them in another
// order).
type crashFS struct {
	mu      sync.Mutex
	files   map[string]*memFile // the entries now
	durable map[string]*memFile // the entries as of the last SyncDir
	ops     int
	crashAt int // 0: never
	crashed bool
}

type memFile struct {
	name    string
	data    []byte // what a read sees
	synced  []byte // what the last fdatasync made durable
	pending []fileOp
}

// fileOp is a write (data at off) or a truncate (to size) no fdatasync
// covered yet.
type fileOp struct {
	off  int64
	data []byte
	size int64 // a truncate: -1 for a write
}

var errPowerLost = errors.New("crashfs: the machine lost power")

func newCrashFS(crashAt int) *crashFS {
	return &crashFS{files: map[string]*memFile{}, durable: map[string]*memFile{}, crashAt: crashAt}
}

// step counts a mutating operation; false: the machine has stopped (at
// this one or before). Under mu.
func (c *crashFS) step() bool {
	if c.crashed {
		return false
	}
	c.ops++
	if c.ops == c.crashAt {
		c.crashed = true
		return false
	}
	return true
}

func (c *crashFS) Ops() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops
}

func (c *crashFS) OpenFile(name string, flag int) (segFile, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.files[name]
	switch {
	case f != nil && flag&os.O_EXCL != 0:
		return nil, fmt.Errorf("open %s: %w", name, os.ErrExist)
	case f == nil && flag&os.O_CREATE == 0:
		return nil, fmt.Errorf("open %s: %w", name, os.ErrNotExist)
	case f == nil:
		if !c.step() {
			return nil, errPowerLost
		}
		f = &memFile{name: name}
		c.files[name] = f
	}
	if flag&os.O_TRUNC != 0 {
		if !c.step() {
			return nil, errPowerLost
		}
		f.apply(fileOp{size: 0})
	}
	return &memHandle{fs: c, f: f}, nil
}

func (c *crashFS) ReadDir(dir string) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name := range c.files {
		if filepath.Dir(name) == dir {
			out = append(out, filepath.Base(name))
		}
	}
	sort.Strings(out)
	return out, nil
}

func (c *crashFS) Remove(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.step() {
		return errPowerLost
	}
	if c.files[name] == nil {
		return fmt.Errorf("remove %s: %w", name, os.ErrNotExist)
	}
	delete(c.files, name)
	return nil
}

func (c *crashFS) Rename(oldName, newName string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.step() {
		return errPowerLost
	}
	f := c.files[oldName]
	if f == nil {
		return fmt.Errorf("rename %s: %w", oldName, os.ErrNotExist)
	}
	delete(c.files, oldName)
	f.name = newName
	c.files[newName] = f
	return nil
}

func (c *crashFS) SyncDir(string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.step() {
		return errPowerLost
	}
	c.durable = map[string]*memFile{}
	for name, f := range c.files {
		c.durable[name] = f
	}
	return nil
}

// image is the storage a restart finds (see crashFS); seed chooses how
// the operations no fdatasync covered fare, per file.
func (c *crashFS) image(seed int64) *crashFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	rng := rand.New(rand.NewSource(seed))
	out := newCrashFS(0)
	for name, f := range c.durable {
		g := &memFile{name: name, data: append([]byte(nil), f.synced...)}
		switch mode := rng.Intn(3); {
		case mode == 1 && len(f.pending) > 0: // a prefix, the next one torn
			k := rng.Intn(len(f.pending))
			for _, op := range f.pending[:k] {
				g.apply(op)
			}
			if op := f.pending[k]; op.size < 0 {
				op.data = op.data[:rng.Intn(len(op.data)+1)]
				g.apply(op)
			}
		case mode == 2: // each sector of each write, or not
			for _, op := range f.pending {
				if op.size >= 0 {
					g.apply(op)
					continue
				}
				for s := op.off &^ 511; s < op.off+int64(len(op.data)); s += 512 {
					if rng.Intn(2) == 0 {
						lo, hi := max(s, op.off), min(s+512, op.off+int64(len(op.data)))
						g.apply(fileOp{off: lo, data: op.data[lo-op.off : hi-op.off], size: -1})
					}
				}
			}
		}
		g.synced = append([]byte(nil), g.data...)
		out.files[name], out.durable[name] = g, g
	}
	return out
}

// killImage is the storage after the process alone died (kill -9): the
// page cache keeps every write, but what no fdatasync covered is still
// not durable (a power loss later drops or tears it), and directory
// entries not synced are still not durable.
func (c *crashFS) killImage() *crashFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := newCrashFS(0)
	copies := map[*memFile]*memFile{}
	cp := func(f *memFile) *memFile {
		if g := copies[f]; g != nil {
			return g
		}
		g := &memFile{name: f.name, data: append([]byte(nil), f.data...), synced: append([]byte(nil), f.synced...),
			pending: append([]fileOp(nil), f.pending...)}
		copies[f] = g
		return g
	}
	for name, f := range c.files {
		out.files[name] = cp(f)
	}
	for name, f := range c.durable {
		out.durable[name] = cp(f)
	}
	return out
}

// apply applies op to f's data.
func (f *memFile) apply(op fileOp) {
	if op.size >= 0 {
		if op.size < int64(len(f.data)) {
			f.data = f.data[:op.size]
		} else {
			f.data = append(f.data, make([]byte, op.size-int64(len(f.data)))...)
		}
		return
	}
	if end := op.off + int64(len(op.data)); end > int64(len(f.data)) {
		f.data = append(f.data, make([]byte, end-int64(len(f.data)))...)
	}
	copy(f.data[op.off:], op.data)
}

type memHandle struct {
	fs     *crashFS
	f      *memFile
	closed bool
}

func (h *memHandle) ReadAt(b []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.closed {
		return 0, os.ErrClosed
	}
	if off >= int64(len(h.f.data)) {
		return 0, io.EOF
	}
	n := copy(b, h.f.data[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (h *memHandle) WriteAt(b []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.closed {
		return 0, os.ErrClosed
	}
	if !h.fs.step() {
		return 0, errPowerLost
	}
	op := fileOp{off: off, data: append([]byte(nil), b...), size: -1}
	h.f.apply(op)
	h.f.pending = append(h.f.pending, op)
	return len(b), nil
}

func (h *memHandle) Truncate(size int64) error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if !h.fs.step() {
		return errPowerLost
	}
	op := fileOp{size: size}
	h.f.apply(op)
	h.f.pending = append(h.f.pending, op)
	return nil
}

func (h *memHandle) Datasync() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if !h.fs.step() {
		return errPowerLost
	}
	h.f.synced = append(h.f.synced[:0], h.f.data...)
	h.f.pending = nil
	return nil
}

func (h *memHandle) Size() (int64, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	return int64(len(h.f.data)), nil
}

func (h *memHandle) Name() string { return h.f.name }

func (h *memHandle) Close() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	h.closed = true
	return nil
}
