package seglog

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storekit"
)

// maxSpan is the most one read of adjacent rows fetches: rows of one
// stream that sit close together in a segment (other streams' rows
// between them are read and skipped) come in one pread.
const maxSpan = 1 << 20

// Read implements store.Store. It sees rows once they are on disk,
// in cursor order with no hole.
func (s *Store) Read(ctx context.Context, name string, from uint64, limit int) ([]store.Record, uint64, error) {
	from, err := storekit.ReadFrom(ctx, from, limit)
	if err != nil {
		return nil, 0, err
	}
	for {
		recs, next, err := s.read(name, from, limit)
		if !errors.Is(err, errSegmentGone) {
			return recs, next, err
		}
		// A trim removed the segment under this read: the rows it held
		// are no longer kept, so read again from the first kept.
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
	}
}

// errSegmentGone: a segment was closed under a read, by a trim (not by
// Close).
var errSegmentGone = errors.New("segment removed by a trim")

func (s *Store) read(name string, from uint64, limit int) ([]store.Record, uint64, error) {
	var err error
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, 0, store.ErrStoreClosed
	}
	var locs []loc
	var files []segFile
	st := s.streams[name]
	if st != nil && from < st.first {
		from = st.first
	}
	end := uint64(0)
	if st != nil {
		end = st.end()
	}
	if err := storekit.BeyondEnd(name, from, end); err != nil {
		s.mu.RUnlock()
		return nil, 0, err
	}
	if st != nil && from <= end {
		i := from - st.first
		locs = append(locs, st.rows[i:i+min(uint64(limit), end-from+1)]...)
		files = make([]segFile, len(locs))
		for j, l := range locs {
			if files[j] = s.segs[l.seg]; files[j] == nil { // never: a segment goes once no row in the index is in it
				s.mu.RUnlock()
				return nil, 0, fmt.Errorf("echopubsub: seglog: stream %q cursor %d: its segment %s is gone", name, from+uint64(j), segName(l.seg))
			}
		}
	}
	s.mu.RUnlock()
	out := make([]store.Record, 0, len(locs))
	for i := 0; i < len(locs); {
		j := i + 1 // rows i..j-1: one pread
		for j < len(locs) && locs[j].seg == locs[i].seg && locs[j].off > locs[j-1].off &&
			(locs[i].n|locs[j].n)&locFrame == 0 && locs[j].off+locs[j].n-locs[i].off <= maxSpan {
			j++
		}
		if out, err = readSpan(out, files[i], locs[i:j], name, from+uint64(i)); err != nil {
			if errors.Is(err, store.ErrStoreClosed) {
				s.mu.RLock()
				closed := s.closed
				s.mu.RUnlock()
				if !closed {
					return nil, 0, errSegmentGone
				}
			}
			return nil, 0, err
		}
		i = j
	}
	return out, from + uint64(len(out)), nil
}

// locFrame flags a loc's n: off and n are its whole frame's, a version 1
// frame, whose rows have no checksum of their own: Read checks the
// frame's (readFrameRow).
const locFrame = 1 << 31

// readSpan reads rows locs (of one segment, in file order) with one pread
// and appends them, cursors from cursor on, each checked against its
// checksum: a damaged one is an error naming the file and the offset.
func readSpan(out []store.Record, f segFile, locs []loc, name string, cursor uint64) ([]store.Record, error) {
	if locs[0].n&locFrame != 0 {
		return readFrameRow(out, f, locs[0], name, cursor)
	}
	base := locs[0].off
	last := locs[len(locs)-1]
	buf := make([]byte, last.off+last.n-base)
	if _, err := f.ReadAt(buf, int64(base)); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return nil, store.ErrStoreClosed
		}
		return nil, fmt.Errorf("echopubsub: seglog read %s offset %d: %w", f.Name(), base, err)
	}
	for k, l := range locs {
		r, err := storekit.DecodeRecord(buf[l.off-base:l.off-base+l.n], true)
		if err != nil {
			return nil, fmt.Errorf("echopubsub: seglog read %s offset %d (stream %q cursor %d): %w", f.Name(), l.off, name, cursor+uint64(k), err)
		}
		r.Stream, r.Cursor = name, cursor+uint64(k)
		out = append(out, r)
	}
	return out, nil
}

// readFrameRow reads the row (name, cursor) of the version 1 frame at l
// and appends it, once the frame's checksum held.
func readFrameRow(out []store.Record, f segFile, l loc, name string, cursor uint64) ([]store.Record, error) {
	buf := make([]byte, l.n&^locFrame)
	if _, err := f.ReadAt(buf, int64(l.off)); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return nil, store.ErrStoreClosed
		}
		return nil, fmt.Errorf("echopubsub: seglog read %s offset %d: %w", f.Name(), l.off, err)
	}
	fail := func(err error) error {
		return fmt.Errorf("echopubsub: seglog read %s offset %d (stream %q cursor %d): %w", f.Name(), l.off, name, cursor, err)
	}
	body, _, err := frameAt(buf)
	if err != nil {
		return nil, fail(fmt.Errorf("%w: the frame's checksum does not match", storekit.ErrChecksum))
	}
	fr, err := decodeFrame(body)
	if err != nil {
		return nil, fail(err)
	}
	for _, r := range fr.rows {
		if r.stream == name && r.cursor == cursor {
			rec, err := storekit.DecodeRecord(body[r.recOff:r.recOff+r.recLen], false)
			if err != nil {
				return nil, fail(err)
			}
			rec.Stream, rec.Cursor = name, cursor
			return append(out, rec), nil
		}
	}
	return nil, fail(errors.New("the frame holds no such row"))
}

// Close waits for queued appends to commit, stops the committer and
// closes the files. Idempotent.
func (s *Store) Close() error {
	s.commits.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.closeFiles()
}

// closeFiles closes the segments and releases the lock (under mu, or in
// Open).
func (s *Store) closeFiles() error {
	var first error
	for id, f := range s.segs {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
		delete(s.segs, id)
	}
	if err := s.lock.Close(); err != nil && first == nil {
		first = err
	}
	return first
}
