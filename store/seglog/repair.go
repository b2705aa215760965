package seglog

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storekit"
)

// damage is a frame that does not read back where a crash cannot have
// left one (Store.damaged), to repair (WithRepair).
type damage struct {
	id  uint32
	f   segFile
	b   []byte // the segment
	off int
	err error // what Open would have returned without WithRepair
}

func (d *damage) Error() string { return d.err.Error() }

// minRowBytes is the least a row of stream name takes in a frame: its
// name's length, the name, the cursor, the record's length, and the
// smallest record (storekit.AppendRecord of empty fields). A bad region
// of n bytes held at most n / minRowBytes rows of the stream.
func minRowBytes(name string) int { return 3 + len(name) + 19 }

// event is what a repair finds past the damage, in log order: a whole
// frame, or bytes that read back as none (unknown: any row may have been
// in them).
type event struct {
	fr      *frame
	body    []byte
	unknown int
}

// walkFrames is every frame of b from off on, in order, with the bytes
// between them that are not a whole frame.
func walkFrames(b []byte, off int) []event {
	var out []event
	bad := 0
	for p := off; p < len(b); {
		if body, n, err := frameAt(b[p:]); err == nil {
			if fr, err := decodeFrame(body); err == nil {
				if bad > 0 {
					out = append(out, event{unknown: bad})
					bad = 0
				}
				out = append(out, event{fr: &fr, body: body})
				p += n
				continue
			}
		}
		bad++
		p++
	}
	if bad > 0 {
		out = append(out, event{unknown: bad})
	}
	return out
}

// errRepaired: repairAt replaced the damaged segment; Open replays again.
var errRepaired = errors.New("seglog: repaired")

// repairAt repairs the damage d (WithRepair; Open, before the committer
// starts): the index holds every frame before it. It writes the repaired
// segment: d's segment up to the damage, then, per stream, every cursor
// it cannot rule out was handed out past the damage: the rows of the
// whole frames it found there again (their records are intact), and a
// gap row for each other one (Missed 1 for a cursor that was handed out;
// 0, unknown, for one past every cursor found, which bytes that read back
// as nothing may have held), and the last position of each producer. No
// cursor is then handed out for a second row, and a reader is told of
// each row lost (*StreamGap).
//
// Crash-safe in this order: the repaired segment is written to a .repair
// file and fdatasynced; the bytes it replaces (the damaged segment's
// from d.off, the segments after it: rest) are copied to .cut files; the
// .repair file is renamed over the damaged segment; then the segments
// after it are removed, each step made durable (directory fsync) before
// the next. A crash before the rename leaves the damage as it was; after
// it, the segments not yet removed repeat cursors of the repaired one,
// which the next Open (with WithRepair) repairs by removing them.
func (s *Store) repairAt(d *damage, rest []uint32) error {
	events := walkFrames(d.b, d.off)
	moved := len(d.b) - d.off
	path := filepath.Join(s.dir, segName(d.id))
	cuts := map[string][]byte{fmt.Sprintf("%s.%d.cut", path, d.off): d.b[d.off:]}
	var restFiles []string
	for _, id := range rest {
		p := filepath.Join(s.dir, segName(id))
		f, err := s.fs.OpenFile(p, os.O_RDONLY)
		if err != nil {
			return err
		}
		b, err := readAll(f)
		_ = f.Close()
		if err != nil {
			return err
		}
		if len(b) < len(segMagic) || string(b[:len(segMagic)]) != segMagic {
			events = append(events, event{unknown: len(b)})
		} else {
			events = append(events, walkFrames(b, len(segMagic))...)
		}
		moved += len(b)
		restFiles = append(restFiles, p)
		cuts[p+".cut"] = b
	}
	repaired, err := s.repaired(d, events, moved)
	if err != nil {
		return err
	}
	if err := s.writeFile(path+".repair", repaired); err != nil {
		return err
	}
	for _, p := range sortedNames(cuts) {
		if err := s.writeFile(p, cuts[p]); err != nil {
			return err
		}
	}
	if err := s.fs.Rename(path+".repair", path); err != nil {
		return err
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return err
	}
	for _, p := range restFiles {
		if err := s.fs.Remove(p); err != nil {
			return err
		}
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return err
	}
	s.log.Warn().Err(d.err).Int("bytes_moved", moved).Int("bytes_written", len(repaired)-d.off).
		Msg("seglog: repaired damage (WithRepair): the log is kept up to it, what followed is in .cut files, and a gap row stands for each row lost")
	s.tailCut.Add(context.Background(), int64(moved), metric.WithAttributes(attribute.String("cause", "repair")))
	return nil
}

// repaired is the repaired segment: d's up to the damage, then what
// salvage finds in events, encoded as appends after the index as it
// stands (the frames before the damage).
func (s *Store) repaired(d *damage, events []event, moved int) ([]byte, error) {
	recs, pos := s.salvage(d, events, moved)
	s.w.buf, s.activeID, s.size, s.synced = s.w.buf[:0], d.id, int64(d.off), int64(d.off)
	next := map[string]uint64{}
	for len(recs) > 0 {
		n := min(len(recs), 1024)
		if _, err := s.encode(&storekit.LocalAppend{Recs: recs[:n]}, next, nil); err != nil {
			return nil, err
		}
		recs = recs[n:]
	}
	for i := range pos {
		if _, err := s.encode(&storekit.LocalAppend{Pos: &pos[i]}, next, nil); err != nil {
			return nil, err
		}
	}
	out := append(d.b[:d.off:d.off], s.w.buf...)
	s.w.buf = nil
	return out, nil
}

// salvage is what a repair appends for events (the log past the damage
// d): per stream, from its end in the index on, each row found again or
// a gap row; and the last producer position of each producer found.
//
// Every row past a stream's end was in the moved bytes, so no stream
// gets more than moved / minRowBytes cursors: a cursor past that, read
// from the damaged frame (its checksum failed) or crafted, is not one.
func (s *Store) salvage(d *damage, events []event, moved int) ([]store.Record, []store.ProducerPosition) {
	f := s.find(d, events)
	names := map[string]bool{}
	for n := range s.streams {
		names[n] = true
	}
	for n := range f.seen {
		names[n] = true
	}
	reason := fmt.Sprintf("seglog repair: lost to damage at %s offset %d", d.f.Name(), d.off)
	var out []store.Record
	for _, name := range sortedNames(names) {
		end := uint64(0)
		if st := s.streams[name]; st != nil {
			end = st.end()
		}
		last, ok := f.lastAt[name]
		if !ok {
			last = -2
		}
		hw := max(f.seen[name], end)
		for _, u := range f.unknown { // rows of the stream may have been there
			if u.at > last {
				hw += uint64(u.n / minRowBytes(name))
			}
		}
		hw = min(hw, end+uint64(moved/minRowBytes(name)))
		for c := end + 1; c <= hw; c++ {
			if r, ok := f.intact[name][c]; ok {
				out = append(out, r)
				continue
			}
			g := store.Record{Stream: name, Kind: store.RecordGap, Reason: reason, Time: time.Now()}
			if c <= f.seen[name] {
				g.Missed = 1
			}
			out = append(out, g)
		}
	}
	pos := make([]store.ProducerPosition, 0, len(f.positions))
	for _, p := range f.positions {
		pos = append(pos, p)
	}
	sort.Slice(pos, func(i, j int) bool {
		return pos[i].Node < pos[j].Node || pos[i].Node == pos[j].Node && pos[i].Group < pos[j].Group
	})
	return out, pos
}

// found is what a repair found past the damage.
type found struct {
	intact    map[string]map[uint64]store.Record // rows still whole, by stream and cursor
	seen      map[string]uint64                  // per stream, the highest cursor found
	lastAt    map[string]int                     // per stream, the event it was found in last (-1: the damaged frame)
	unknown   []struct{ at, n int }              // bytes that read back as no frame: event, length
	positions map[posKey]store.ProducerPosition  // the last of each producer
}

// find collects what events (and the damaged frame, when its rows go on
// from the index: its checksum failed, anything else in it is not taken
// as a row) hold.
func (s *Store) find(d *damage, events []event) found {
	f := found{intact: map[string]map[uint64]store.Record{}, seen: map[string]uint64{}, lastAt: map[string]int{},
		positions: map[posKey]store.ProducerPosition{}}
	if body, ok := damagedBody(d.b[d.off:]); ok {
		if fr, err := decodeFrame(body); err == nil && fr.snap == nil && s.continues(fr.rows) {
			for _, r := range fr.rows {
				f.seen[r.stream], f.lastAt[r.stream] = max(f.seen[r.stream], r.cursor), -1
			}
			if len(events) > 0 && events[0].unknown > 0 { // the frame's bytes are accounted for
				rest := events[0].unknown - frameHeader - len(body)
				events = events[1:]
				if rest > 0 {
					events = append([]event{{unknown: rest}}, events...)
				}
			}
		}
	}
	for i, e := range events {
		if e.fr == nil {
			f.unknown = append(f.unknown, struct{ at, n int }{i, e.unknown})
			continue
		}
		if e.fr.pos != nil {
			f.positions[posKey{e.fr.pos.Node, e.fr.pos.Group}] = *e.fr.pos
		}
		for _, p := range snapPositions(e.fr) {
			f.positions[posKey{p.Node, p.Group}] = p
		}
		for _, r := range e.fr.rows {
			rec, err := storekit.DecodeRecord(e.body[r.recOff:r.recOff+r.recLen], false)
			if err != nil {
				continue // a gap row stands for it
			}
			if f.intact[r.stream] == nil {
				f.intact[r.stream] = map[uint64]store.Record{}
			}
			rec.Stream = r.stream
			f.intact[r.stream][r.cursor] = rec
			f.seen[r.stream], f.lastAt[r.stream] = max(f.seen[r.stream], r.cursor), i
		}
	}
	return f
}

// continues reports whether rows, each of a stream in the index, go on
// from its end with no hole.
func (s *Store) continues(rows []frameRow) bool {
	next := map[string]uint64{}
	for _, r := range rows {
		st := s.streams[r.stream]
		if st == nil {
			return false
		}
		want, ok := next[r.stream]
		if !ok {
			want = st.end() + 1
		}
		if r.cursor != want {
			return false
		}
		next[r.stream] = want + 1
	}
	return true
}

func snapPositions(fr *frame) []store.ProducerPosition {
	if fr.snap == nil {
		return nil
	}
	return fr.snap.positions
}

// damagedBody is the body a frame at b's start says it has, its checksum
// unchecked.
func damagedBody(b []byte) ([]byte, bool) {
	if len(b) < frameHeader {
		return nil, false
	}
	n := int(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
	if n <= 0 || n > len(b)-frameHeader {
		return nil, false
	}
	return b[frameHeader : frameHeader+n], true
}

// writeFile writes b to path (created or replaced), fdatasyncs it, and
// fsyncs the directory.
func (s *Store) writeFile(path string, b []byte) error {
	f, err := s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Datasync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return s.fs.SyncDir(s.dir)
}
