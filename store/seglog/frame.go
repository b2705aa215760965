package seglog

import (
	"encoding/binary"
	"errors"
	"hash/crc32"

	"github.com/echopubsub/echopubsub/store"
)

// A segment is segMagic, then frames. A frame is one Append, AppendAt or
// MarkGap call, all or nothing:
//
//	u32 LE  body length (> 0)
//	u32 LE  CRC-32C of the body
//	body:   frameVersion (3)
//	        uvarint synced: the segment's length covered by the last
//	            fdatasync that had returned when the frame was written
//	        uvarint row count, then each row:
//	            uvarint len, stream; uvarint cursor; uvarint len, record
//	            (storekit.AppendRecord: store/bolt's format 3: kind,
//	            append time, origin, payload type, payload, reason,
//	            missed, and the record's own CRC-32C, which Read checks)
//	        one byte 0 (no position) or 1, then the position:
//	            uvarint len, node; uvarint group, incarnation, next;
//	            one byte retired
//
// The cursor of each row is written (not derived on open from the rows
// before it), so that a reader can check that every stream goes on with
// no hole, and so that a trim can drop whole segments from the front.
//
// synced tells a replay what a crash cannot have torn: bytes below it were
// on disk before the frame was written, so a frame there that does not
// read back, with this frame whole after it, is damage (recover.go).
//
// Frames of version 1 (before checksummed records and synced) are still
// read: their rows are format 2 records with no checksum of their own,
// so Read checks the whole frame's (a locFrame index entry).
//
// A trim writes a snapshot frame (its body's first byte snapshotVersion)
// before it removes a segment: what a replay that starts after the
// removed segments needs to know.
//
//	body:   snapshotVersion (4)
//	        uvarint synced (as a frame's)
//	        uvarint stream count, then each stream whose first kept
//	        cursor is above 1: uvarint len, stream; uvarint first kept;
//	        uvarint end (its last cursor: first - 1 when no row is kept)
//	        uvarint position count, then each producer position (as
//	        above, without the presence byte)
//
// Snapshots of version 2, without synced, are still read.
const (
	segMagic          = "EPSLOG\x00\x01"
	frameHeader       = 8
	frameVersion      = 3
	frameVersionV1    = 1
	snapshotVersion   = 4
	snapshotVersionV2 = 2
	// maxFrame bounds one frame's body (one call's rows), so that an
	// offset within a segment fits 32 bits.
	maxFrame = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// frameRow is a decoded row: where its record's bytes are in the body.
type frameRow struct {
	stream string
	cursor uint64
	recOff int // within the body
	recLen int
}

type frame struct {
	version byte
	synced  uint64 // version 3: see the format above
	rows    []frameRow
	pos     *store.ProducerPosition
	snap    *snapshot // a snapshot frame (no rows, no pos)
}

// snapshot is what a snapshot frame records: each trimmed stream's
// bounds, and every producer position.
type snapshot struct {
	streams   []snapStream
	positions []store.ProducerPosition
}

type snapStream struct {
	name       string
	first, end uint64
}

// errTorn: the bytes at this offset are not a whole frame (a write the
// crash cut short, or garbage).
var errTorn = errors.New("not a whole frame")

// frameAt checks the frame at b's start: its body, and the frame's
// length, or errTorn.
func frameAt(b []byte) (body []byte, n int, err error) {
	if len(b) < frameHeader {
		return nil, 0, errTorn
	}
	size := binary.LittleEndian.Uint32(b)
	if size == 0 || size > maxFrame || uint64(size) > uint64(len(b)-frameHeader) {
		return nil, 0, errTorn
	}
	body = b[frameHeader : frameHeader+int(size)]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, 0, errTorn
	}
	return body, frameHeader + int(size), nil
}

// decodeFrame decodes a body whose checksum held; a malformed one is an
// error (never a panic).
func decodeFrame(body []byte) (frame, error) {
	d := decoder{b: body}
	var f frame
	switch f.version = d.byte(); f.version {
	case frameVersion:
		f.synced = d.uvarint()
	case frameVersionV1:
	case snapshotVersion:
		synced := d.uvarint()
		f, err := decodeSnapshot(&d)
		f.version, f.synced = snapshotVersion, synced
		return f, err
	case snapshotVersionV2:
		f, err := decodeSnapshot(&d)
		f.version = snapshotVersionV2
		return f, err
	default:
		return f, errors.New("frame of unknown version")
	}
	n := d.uvarint()
	if n > uint64(len(body)) {
		return f, errors.New("frame row count past its length")
	}
	f.rows = make([]frameRow, 0, n)
	for i := uint64(0); i < n && d.err == nil; i++ {
		var r frameRow
		r.stream = string(d.bytes())
		r.cursor = d.uvarint()
		rec := d.bytes()
		r.recOff, r.recLen = len(body)-len(d.b)-len(rec), len(rec)
		f.rows = append(f.rows, r)
	}
	if d.byte() == 1 {
		p := d.position()
		f.pos = &p
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	return f, d.err
}

// decodeSnapshot decodes a snapshot frame's body past its version byte.
func decodeSnapshot(d *decoder) (frame, error) {
	sn := &snapshot{}
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		return frame{}, errors.New("snapshot stream count past its length")
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		st := snapStream{name: string(d.bytes()), first: d.uvarint(), end: d.uvarint()}
		if st.first < 2 || st.first > st.end+1 {
			d.fail()
		}
		sn.streams = append(sn.streams, st)
	}
	m := d.uvarint()
	if m > uint64(len(d.b)) {
		return frame{}, errors.New("snapshot position count past its length")
	}
	for i := uint64(0); i < m && d.err == nil; i++ {
		sn.positions = append(sn.positions, d.position())
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	return frame{snap: sn}, d.err
}

// position decodes a producer position (frameWriter.position).
func (d *decoder) position() store.ProducerPosition {
	p := store.ProducerPosition{Node: string(d.bytes())}
	g := d.uvarint()
	p.Group, p.Incarnation, p.Next = uint32(g), d.uvarint(), d.uvarint()
	p.Retired = d.byte() == 1
	if g > 0xffffffff {
		d.fail()
	}
	return p
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errors.New("malformed frame")
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// frameWriter appends frames to buf.
type frameWriter struct {
	buf   []byte
	start int // the open frame's first byte
}

func (w *frameWriter) begin(rows int, synced int64) {
	w.start = len(w.buf)
	w.buf = append(w.buf, make([]byte, frameHeader)...)
	w.buf = append(w.buf, frameVersion)
	w.buf = binary.AppendUvarint(w.buf, uint64(synced))
	w.buf = binary.AppendUvarint(w.buf, uint64(rows))
}

// row appends a row's stream and cursor; the caller appends the record
// with rec, which returns where its bytes start in buf.
func (w *frameWriter) row(stream string, cursor uint64, recLen int) int {
	w.buf = binary.AppendUvarint(w.buf, uint64(len(stream)))
	w.buf = append(w.buf, stream...)
	w.buf = binary.AppendUvarint(w.buf, cursor)
	w.buf = binary.AppendUvarint(w.buf, uint64(recLen))
	return len(w.buf)
}

// end appends pos (or its absence) and seals the frame; false: the body
// is over maxFrame (the frame is dropped).
func (w *frameWriter) end(pos *store.ProducerPosition) bool {
	if pos == nil {
		w.buf = append(w.buf, 0)
	} else {
		w.buf = append(w.buf, 1)
		w.position(pos)
	}
	return w.seal()
}

// position appends pos (decoder.position).
func (w *frameWriter) position(pos *store.ProducerPosition) {
	w.buf = binary.AppendUvarint(w.buf, uint64(len(pos.Node)))
	w.buf = append(w.buf, pos.Node...)
	w.buf = binary.AppendUvarint(w.buf, uint64(pos.Group))
	w.buf = binary.AppendUvarint(w.buf, pos.Incarnation)
	w.buf = binary.AppendUvarint(w.buf, pos.Next)
	r := byte(0)
	if pos.Retired {
		r = 1
	}
	w.buf = append(w.buf, r)
}

// snapshot appends sn as one snapshot frame; false: over maxFrame.
func (w *frameWriter) snapshot(sn *snapshot, synced int64) bool {
	w.start = len(w.buf)
	w.buf = append(w.buf, make([]byte, frameHeader)...)
	w.buf = append(w.buf, snapshotVersion)
	w.buf = binary.AppendUvarint(w.buf, uint64(synced))
	w.buf = binary.AppendUvarint(w.buf, uint64(len(sn.streams)))
	for _, st := range sn.streams {
		w.buf = binary.AppendUvarint(w.buf, uint64(len(st.name)))
		w.buf = append(w.buf, st.name...)
		w.buf = binary.AppendUvarint(w.buf, st.first)
		w.buf = binary.AppendUvarint(w.buf, st.end)
	}
	w.buf = binary.AppendUvarint(w.buf, uint64(len(sn.positions)))
	for i := range sn.positions {
		w.position(&sn.positions[i])
	}
	return w.seal()
}

// seal writes the open frame's length and checksum; false: the body is
// over maxFrame (the frame is dropped).
func (w *frameWriter) seal() bool {
	body := w.buf[w.start+frameHeader:]
	if len(body) > maxFrame {
		w.buf = w.buf[:w.start]
		return false
	}
	binary.LittleEndian.PutUint32(w.buf[w.start:], uint32(len(body)))
	binary.LittleEndian.PutUint32(w.buf[w.start+4:], crc32.Checksum(body, castagnoli))
	return true
}
