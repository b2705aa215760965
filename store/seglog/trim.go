package seglog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/echopubsub/echopubsub/store"
)

var _ store.Trimmer = (*Store)(nil)

// trimOp is one Trim through the group commit: the committer decides and
// applies it between two commits, so that it sees a stream's rows as
// appends leave them, and fills in out and err.
type trimOp struct {
	ctx context.Context // ended before the committer reaches it: nothing is done
	r   store.Retention
	now time.Time
	out []store.Trimmed
	err error
}

// Trim implements store.Trimmer. It runs on the committer between
// two commits, and never reads a record: the index holds each row's
// payload length and append time. What it removes is gone from Read at
// once; on disk, it writes a snapshot frame (each trimmed stream's first
// kept cursor, every producer position) and fdatasyncs it, then deletes
// the oldest segments that no longer hold a kept row. It is one step:
// with ctx ended before the committer reaches it, nothing is removed;
// once begun it runs to its end (a caller whose ctx ends meanwhile gets
// ctx's error, not the figures). A segment that
// still holds one row kept is kept whole: the disk is freed a segment at
// a time (WithSegmentSize), from the oldest.
func (s *Store) Trim(ctx context.Context, r store.Retention) ([]store.Trimmed, error) {
	if r == (store.Retention{}) {
		return nil, nil
	}
	op := &trimOp{ctx: ctx, r: r, now: time.Now()}
	if err := s.commits.Submit(ctx, &item{trim: op}); err != nil {
		if !errors.Is(err, store.ErrStoreClosed) && ctx.Err() == nil {
			err = fmt.Errorf("echopubsub: seglog trim: %w", err)
		}
		return nil, err
	}
	return op.out, op.err
}

// trim decides and applies r (committer only): the rows removed leave the
// index only once the snapshot that says so is on disk.
func (s *Store) trim(r store.Retention, now time.Time) ([]store.Trimmed, error) {
	cuts := s.cuts(r, now)
	if len(cuts) == 0 && (s.firstSeg >= s.activeID || s.live[s.firstSeg] > 0) {
		return nil, nil
	}
	// With no row to cut, a snapshot still goes first when the oldest
	// segment holds no kept row (positions only, or rows an earlier trim
	// cut): it records every position, so that segment can go.
	if err := s.begin(); err != nil {
		return nil, err
	}
	if !s.w.snapshot(s.snapshot(cuts), s.synced) {
		return nil, fmt.Errorf("echopubsub: seglog trim: the snapshot is over %d bytes", maxFrame)
	}
	if err := s.write(true); err != nil {
		return nil, fmt.Errorf("echopubsub: seglog trim: %w", err)
	}
	s.snapSeg = s.activeID
	out := make([]store.Trimmed, 0, len(cuts))
	s.mu.Lock()
	for _, name := range sortedKeys(cuts) {
		out = append(out, s.drop(s.streams[name], name, cuts[name]+1))
	}
	s.mu.Unlock()
	if err := s.removeSegments(); err != nil {
		// The rows are trimmed (the snapshot is on disk); their space is
		// not freed yet: the next trim, or Open, tries again.
		s.log.Error().Err(err).Str("dir", s.dir).Msg("seglog: removing trimmed segments failed")
	}
	return out, nil
}

// cuts is, per stream r trims, the highest cursor to remove
// (store.Retention.Cut), read from the index (committer only: it alone changes
// the index).
func (s *Store) cuts(r store.Retention, now time.Time) map[string]uint64 {
	out := map[string]uint64{}
	for name, st := range s.streams {
		rows, first := st.rows, st.first
		walk := func(down bool) func(func(store.TrimRow) bool) {
			return func(yield func(store.TrimRow) bool) {
				for k := range rows {
					i := k
					if down {
						i = len(rows) - 1 - k
					}
					row := store.TrimRow{Cursor: first + uint64(i), Bytes: uint64(rows[i].bytes)}
					if rows[i].at != 0 {
						row.Time = time.Unix(0, rows[i].at)
					}
					if !yield(row) {
						return
					}
				}
			}
		}
		if cut := r.CutHeld(now, first, st.end(), s.held(name), walk(false), walk(true)); cut >= first {
			out[name] = cut
		}
	}
	return out
}

// snapshot is what the log must say once cuts are applied: every stream
// whose first kept cursor is above 1, and every producer position.
func (s *Store) snapshot(cuts map[string]uint64) *snapshot {
	sn := &snapshot{}
	for name, st := range s.streams {
		first := st.first
		if c, ok := cuts[name]; ok {
			first = c + 1
		}
		if first > 1 {
			sn.streams = append(sn.streams, snapStream{name: name, first: first, end: st.end()})
		}
	}
	sort.Slice(sn.streams, func(i, j int) bool { return sn.streams[i].name < sn.streams[j].name })
	for _, p := range s.positions {
		sn.positions = append(sn.positions, p)
	}
	sort.Slice(sn.positions, func(i, j int) bool {
		a, b := sn.positions[i], sn.positions[j]
		return a.Node < b.Node || (a.Node == b.Node && a.Group < b.Group)
	})
	return sn
}

// drop removes st's rows below first from the index (under mu, or in
// Open) and says what it removed.
func (s *Store) drop(st *stream, name string, first uint64) store.Trimmed {
	t := store.Trimmed{Stream: name, FirstKept: first}
	if first <= st.first {
		t.FirstKept = st.first
		return t
	}
	k := min(first-st.first, uint64(len(st.rows)))
	for _, l := range st.rows[:k] {
		t.Rows++
		t.Bytes += uint64(l.bytes)
		s.live[l.seg]--
	}
	// A copy, so that the removed rows' index is freed.
	st.rows = append([]loc(nil), st.rows[k:]...)
	st.first = first
	return t
}

// removeSegments deletes the oldest segments that hold no kept row, up
// to the one that holds the last snapshot (what a replay of the segments
// after the removed ones needs: the trimmed streams' bounds, every
// position), oldest first, so that the segments left are still a run
// with no hole (recover). A segment after the last snapshot stays even
// with no row: its frames may hold the only record of a position.
// Committer only, or Open.
func (s *Store) removeSegments() error {
	removed := false
	for s.firstSeg < s.snapSeg && s.firstSeg < s.activeID && s.live[s.firstSeg] <= 0 {
		id := s.firstSeg
		s.mu.Lock()
		f := s.segs[id]
		delete(s.segs, id)
		s.mu.Unlock()
		if f != nil {
			_ = f.Close() // a Read that holds it retries (Read)
		}
		if err := s.fs.Remove(filepath.Join(s.dir, segName(id))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		delete(s.live, id)
		s.firstSeg++
		removed = true
	}
	if removed {
		return s.fs.SyncDir(s.dir)
	}
	return nil
}

func sortedKeys(m map[string]uint64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// unixNano is t as a loc's at (0: the zero Time).
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
