package seglog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/echopubsub/echopubsub/internal/storekit"
)

func segName(id uint32) string { return fmt.Sprintf("%08d.seg", id) }

// segments lists the segment ids in dir, in order.
func segments(dir string) ([]uint32, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for _, e := range ents {
		n, ok := strings.CutSuffix(e.Name(), ".seg")
		if !ok || e.IsDir() {
			continue
		}
		id, err := strconv.ParseUint(n, 10, 32)
		if err != nil || id == 0 || segName(uint32(id)) != e.Name() {
			return nil, fmt.Errorf("%s: not a segment name (00000001.seg, ...)", filepath.Join(dir, e.Name()))
		}
		ids = append(ids, uint32(id))
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids, nil
}

// recover rebuilds the index from the segments (Open, before the
// committer starts). The rule: every frame of every segment must read
// back whole (length, CRC-32C, decoding) and each row must be its
// stream's next cursor, except at the tail of the last segment, where
// the first frame that is not whole and everything after it is a commit
// that a crash cut short (never fdatasynced, so never acknowledged): it
// is cut off. Anything else is an error naming the file and the offset.
//
// A trim removes the oldest segments once a snapshot frame says what they
// held (trim.go), so a replay that starts past segment 1 may meet a
// stream's first row above cursor 1, or a snapshot that keeps rows a
// later trim removed with their segment. Both are taken on trust while
// replaying, and checked at the end: each stream must hold every row
// from the first cursor its last snapshot keeps (1 with none) to its end.
// A snapshot must also agree with the rows before it on each stream's
// end.
func (s *Store) recover() error {
	ids, err := segments(s.dir)
	if err != nil {
		return err
	}
	s.required = map[string]uint64{}
	for i, id := range ids {
		if i > 0 && id != ids[i-1]+1 {
			return fmt.Errorf("segment %s follows %s: a segment is missing", segName(id), segName(ids[i-1]))
		}
		if i == 0 {
			s.firstSeg = id
		}
		if err := s.replay(id, i == len(ids)-1); err != nil {
			return err
		}
	}
	for _, name := range sortedNames(s.streams) {
		if req, first := max(s.required[name], 1), s.streams[name].first; first > req {
			return fmt.Errorf("stream %q: rows %d..%d are missing (no trim removed them)", name, req, first-1)
		}
	}
	s.required = nil
	if len(ids) == 0 {
		s.firstSeg = 1
		return s.rotate()
	}
	// A crash between a trim's snapshot and its removals left segments
	// that hold no kept row.
	return s.removeSegments()
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// replay reads segment id into the index; the last one becomes the
// active segment.
func (s *Store) replay(id uint32, last bool) error {
	path := filepath.Join(s.dir, segName(id))
	flag := os.O_RDONLY
	if last {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return err
	}
	s.segs[id] = f
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(b) < len(segMagic) && last && strings.HasPrefix(segMagic, string(b)) {
		// Created, not yet fsynced whole when the process died: nothing
		// was ever written to it.
		b = nil
		if err := s.resetSegment(f); err != nil {
			return err
		}
	} else if len(b) < len(segMagic) || string(b[:len(segMagic)]) != segMagic {
		return fmt.Errorf("%s: not a segment of this store (no header)", path)
	}
	off := len(segMagic)
	for off < len(b) {
		body, n, err := frameAt(b[off:])
		if errors.Is(err, errTorn) && last {
			return s.cutTail(f, off, len(b))
		}
		if err != nil {
			return fmt.Errorf("%s offset %d: %w (not the last segment: not a torn tail)", path, off, err)
		}
		if err := s.apply(id, off+frameHeader, body); err != nil {
			return fmt.Errorf("%s offset %d: %w", path, off, err)
		}
		off += n
	}
	if last {
		s.active, s.activeID, s.size = f, id, int64(max(off, len(segMagic)))
	}
	return nil
}

// apply indexes one frame (its body at offset bodyOff of segment id).
func (s *Store) apply(id uint32, bodyOff int, body []byte) error {
	fr, err := decodeFrame(body)
	if err != nil {
		return err
	}
	if fr.snap != nil {
		s.snapSeg = id
		return s.applySnapshot(fr.snap)
	}
	for _, r := range fr.rows {
		st := s.streams[r.stream]
		want := uint64(1)
		if st != nil {
			want = st.end() + 1
		} else if s.firstSeg > 1 { // its first rows may have been trimmed: checked at the end
			want = r.cursor
		}
		if r.cursor != want {
			return fmt.Errorf("stream %q: cursor %d where %d comes next", r.stream, r.cursor, want)
		}
		p, err := storekit.ParseRecord(body[r.recOff : r.recOff+r.recLen])
		if err != nil {
			return fmt.Errorf("stream %q cursor %d: %w", r.stream, r.cursor, err)
		}
		st = s.index(r.stream, r.cursor)
		st.rows = append(st.rows, loc{seg: id, off: uint32(bodyOff + r.recOff), n: uint32(r.recLen),
			bytes: uint32(len(p.Fields[2])), at: unixNano(p.Time)})
		s.live[id]++
	}
	if fr.pos != nil {
		s.positions[posKey{fr.pos.Node, fr.pos.Group}] = *fr.pos
	}
	return nil
}

// applySnapshot applies a trim's snapshot frame: each stream it lists
// keeps its rows from first on, and ends where it says (rows before the
// snapshot that are not here were all in removed segments: the stream
// goes on after its end); every position it lists is recorded.
func (s *Store) applySnapshot(sn *snapshot) error {
	for _, ss := range sn.streams {
		s.required[ss.name] = ss.first
		st := s.streams[ss.name]
		switch {
		case st == nil:
			s.index(ss.name, ss.end+1)
		case st.end() != ss.end:
			return fmt.Errorf("trim snapshot: stream %q ends at cursor %d, but its rows here end at %d", ss.name, ss.end, st.end())
		default:
			s.drop(st, ss.name, ss.first)
		}
	}
	for _, p := range sn.positions {
		s.positions[posKey{p.Node, p.Group}] = p
	}
	return nil
}

// cutTail truncates the last segment at off, the first frame that is not
// whole, and fsyncs it.
func (s *Store) cutTail(f *os.File, off, size int) error {
	s.log.Warn().Str("file", f.Name()).Int("offset", off).Int("bytes", size-off).
		Msg("seglog: cutting off a torn tail (a commit the crash cut short, never acknowledged)")
	if err := f.Truncate(int64(off)); err != nil {
		return err
	}
	if err := storekit.Fdatasync(f); err != nil {
		return err
	}
	s.active, s.size = f, int64(off)
	for id, g := range s.segs {
		if g == f {
			s.activeID = id
		}
	}
	return nil
}

// resetSegment writes f's header anew (a segment whose creation a crash
// cut short).
func (s *Store) resetSegment(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(segMagic), 0); err != nil {
		return err
	}
	return storekit.Fdatasync(f)
}

// rotate starts the next segment: created with its header, fsynced, and
// its directory entry fsynced, before a frame goes to it.
func (s *Store) rotate() error {
	id := s.activeID + 1
	path := filepath.Join(s.dir, segName(id))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := s.resetSegment(f); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	if err := syncDir(s.dir); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	s.mu.Lock()
	s.segs[id] = f
	s.mu.Unlock()
	s.active, s.activeID, s.size = f, id, int64(len(segMagic))
	return nil
}
