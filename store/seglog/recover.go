package seglog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storekit"
)

func segName(id uint32) string { return fmt.Sprintf("%08d.seg", id) }

// segments lists the segment ids in dir, in order.
func segments(fs fileSys, dir string) ([]uint32, error) {
	names, err := fs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []uint32
	for _, name := range names {
		n, ok := strings.CutSuffix(name, ".seg")
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(n, 10, 32)
		if err != nil || id == 0 || segName(uint32(id)) != name {
			return nil, fmt.Errorf("%s: not a segment name (00000001.seg, ...)", filepath.Join(dir, name))
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
	err := s.replayAll()
	if !errors.Is(err, errRepaired) {
		return err
	}
	// The repaired segment replaced the damaged one: replay it all again.
	s.reset()
	s.repair = false // a second damage now is an error
	return s.replayAll()
}

// reset forgets what a replay built (before the next one).
func (s *Store) reset() {
	for id, f := range s.segs {
		_ = f.Close()
		delete(s.segs, id)
	}
	s.streams, s.positions, s.live = map[string]*stream{}, map[posKey]store.ProducerPosition{}, map[uint32]int{}
	s.active, s.activeID, s.size, s.synced, s.firstSeg, s.snapSeg = nil, 0, 0, 0, 0, 0
}

// replayAll is recover's one pass over the segments.
func (s *Store) replayAll() error {
	ids, err := segments(s.fs, s.dir)
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
			var d *damage
			if !errors.As(err, &d) {
				return err
			}
			if err := s.repairAt(d, ids[i+1:]); err != nil {
				return fmt.Errorf("%v: repair failed: %w", d.err, err)
			}
			return errRepaired
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
// active segment. A frame that does not read back is a torn tail
// (cutTail) or damage (damaged).
func (s *Store) replay(id uint32, last bool) error {
	path := filepath.Join(s.dir, segName(id))
	flag := os.O_RDONLY
	if last {
		flag = os.O_RDWR
	}
	f, err := s.fs.OpenFile(path, flag)
	if err != nil {
		return err
	}
	s.segs[id] = f
	b, err := readAll(f)
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
		if err == nil {
			err = s.apply(id, off+frameHeader, body)
		}
		if err != nil {
			return s.damaged(id, f, b, off, last, err)
		}
		off += n
	}
	if last {
		s.active, s.activeID, s.size = f, id, int64(max(off, len(segMagic)))
		// What was read back is on disk before a frame says so (synced).
		if err := f.Datasync(); err != nil {
			return err
		}
		s.synced = s.size
	}
	return nil
}

// laterFrame is a whole frame found after a bad one.
type laterFrame struct {
	off int
	fr  frame
	raw []byte // its body
}

// framesAfter is every whole frame in b past off: each frame that reads
// back (length, checksum, decoding), then the one after it, and past a
// bad one the next offset where one starts.
func framesAfter(b []byte, off int) []laterFrame {
	var out []laterFrame
	for p := off + 1; p+frameHeader <= len(b); {
		body, n, err := frameAt(b[p:])
		if err == nil {
			if fr, derr := decodeFrame(body); derr == nil {
				out = append(out, laterFrame{off: p, fr: fr, raw: body})
				p += n
				continue
			}
		}
		p++
	}
	return out
}

// tornAt reports whether a bad frame at off, with later after it, may be
// what a crash left: the last commits' bytes, written after the last
// fdatasync that returned. It is not when a whole frame after it was
// written once an fdatasync had covered off (its synced): those bytes had
// reached the disk. A frame that does not record synced (frame version
// 1, snapshot version 2) after a bad one is taken as damage.
func tornAt(later []laterFrame, off int) bool {
	for _, l := range later {
		if l.fr.version != frameVersion && l.fr.version != snapshotVersion || l.fr.synced > uint64(off) {
			return false
		}
	}
	return true
}

// damaged handles a frame of segment id at off that does not read back
// (cause): a torn tail when a crash may have left it (the last segment,
// tornAt), else an error naming the file and the offset (ErrDamaged),
// or, with WithRepair, a repair.
func (s *Store) damaged(id uint32, f segFile, b []byte, off int, last bool, cause error) error {
	later := framesAfter(b, off)
	if last && tornAt(later, off) && !errors.Is(cause, errApply) {
		return s.cutTail(f, off, len(b), len(later))
	}
	why := "not the last segment: not a torn tail"
	switch {
	case errors.Is(cause, errApply):
		why = "its checksum holds: not a torn tail"
	case last:
		why = fmt.Sprintf("%d whole frames follow it (from offset %d), written after it had reached the disk: not a torn tail", len(later), later[0].off)
	}
	err := fmt.Errorf("%w: %s offset %d: %v (%s)", ErrDamaged, f.Name(), off, cause, why)
	if !s.repair {
		return fmt.Errorf("%w; nothing was changed: open with seglog.WithRepair(true) to keep the log up to it and tell readers what is lost", err)
	}
	return &damage{id: id, f: f, b: b, off: off, err: err}
}

// ErrDamaged: Open found bytes in the log that a crash cannot have left
// (see the package doc, "Damage"); the error names the file and the
// offset. Open with WithRepair to repair it.
var ErrDamaged = errors.New("seglog: damaged log")

// errApply: a frame whose checksum holds does not fit the index (an
// unknown version, a cursor out of order).
var errApply = errors.New("frame does not fit the log")

// apply indexes one frame (its body at offset bodyOff of segment id), all
// or nothing.
func (s *Store) apply(id uint32, bodyOff int, body []byte) error {
	fr, err := decodeFrame(body)
	if err != nil {
		return fmt.Errorf("%w: %v", errApply, err)
	}
	if fr.snap != nil {
		if err := s.applySnapshot(fr.snap); err != nil {
			return fmt.Errorf("%w: %v", errApply, err)
		}
		s.snapSeg = id
		return nil
	}
	locs := make([]loc, len(fr.rows))
	next := map[string]uint64{}
	for i, r := range fr.rows {
		want, ok := next[r.stream]
		if st := s.streams[r.stream]; !ok && st != nil {
			want = st.end() + 1
		} else if !ok {
			want = 1
			if s.firstSeg > 1 { // its first rows may have been trimmed: checked at the end
				want = r.cursor
			}
		}
		if r.cursor != want {
			return fmt.Errorf("%w: stream %q: cursor %d where %d comes next", errApply, r.stream, r.cursor, want)
		}
		next[r.stream] = want + 1
		rec := body[r.recOff : r.recOff+r.recLen]
		var p storekit.Parsed
		if fr.version == frameVersion {
			p, err = storekit.ParseChecked(rec)
		} else {
			p, err = storekit.ParseRecord(rec)
		}
		if err != nil {
			return fmt.Errorf("%w: stream %q cursor %d: %v", errApply, r.stream, r.cursor, err)
		}
		locs[i] = loc{seg: id, off: uint32(bodyOff + r.recOff), n: uint32(r.recLen), bytes: uint32(len(p.Fields[2])), at: unixNano(p.Time)}
		if fr.version != frameVersion { // Read checks the frame's checksum (readFrameRow)
			locs[i].off, locs[i].n = uint32(bodyOff-frameHeader), uint32(frameHeader+len(body))|locFrame
		}
	}
	for i, r := range fr.rows {
		st := s.index(r.stream, r.cursor)
		st.rows = append(st.rows, locs[i])
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
// whole (frames whole frames after it among what is cut), and fsyncs it;
// logged and counted (echopubsub.store.recovery_cut).
func (s *Store) cutTail(f segFile, off, size, frames int) error {
	s.log.Warn().Str("file", f.Name()).Int("offset", off).Int("bytes", size-off).Int("whole_frames_after", frames).
		Msg("seglog: cutting off a torn tail (the last commits, not on disk whole when the machine stopped: never acknowledged)")
	s.tailCut.Add(context.Background(), int64(size-off), metric.WithAttributes(attribute.String("cause", "torn_tail")))
	if err := f.Truncate(int64(off)); err != nil {
		return err
	}
	if err := f.Datasync(); err != nil {
		return err
	}
	s.active, s.size, s.synced = f, int64(off), int64(off)
	for id, g := range s.segs {
		if g == f {
			s.activeID = id
		}
	}
	return nil
}

// resetSegment writes f's header anew (a segment whose creation a crash
// cut short).
func (s *Store) resetSegment(f segFile) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(segMagic), 0); err != nil {
		return err
	}
	return f.Datasync()
}

// rotate starts the next segment: created with its header, fsynced, and
// its directory entry fsynced, before a frame goes to it.
//
// The segment it seals is fdatasynced first when frames were written to
// it since its last fdatasync (positions alone are not synced by their
// commit): a sealed segment must read back whole (recover).
func (s *Store) rotate() error {
	if s.active != nil && s.synced < s.size {
		if err := s.active.Datasync(); err != nil {
			s.broken = fmt.Errorf("%w: what is on disk is unknown (reopen the store)", err)
			return s.broken
		}
		s.synced = s.size
	}
	id := s.activeID + 1
	path := filepath.Join(s.dir, segName(id))
	f, err := s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return err
	}
	if err := s.resetSegment(f); err != nil {
		_ = f.Close()
		_ = s.fs.Remove(path)
		return err
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		_ = f.Close()
		_ = s.fs.Remove(path)
		return err
	}
	s.mu.Lock()
	s.segs[id] = f
	s.mu.Unlock()
	s.active, s.activeID, s.size, s.synced = f, id, int64(len(segMagic)), int64(len(segMagic))
	return nil
}
