package stream

import (
	"unsafe"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/ringbuf"
)

// store is a producer's buffer in compact form: the ring (ringbuf: cursors,
// write times and every decision) holds one 20-byte record per message by
// value; payload bytes live in shared segments; topics and payload types are
// interned. A buffered message costs its payload plus 28 bytes (record and
// write time), with no heap object of its own for the GC to scan. Owned by
// the producer actor; not safe for concurrent use.
type store struct {
	ring   *ringbuf.Ring[record]
	topics interner
	types  interner
	// segs holds the payload segments in cursor order; segs[0] has id
	// segBase. A segment is dropped once its last message is overwritten.
	segs    []*segment
	segBase uint32
	// extras holds the rare per-message options (exclude, only node, a
	// shared store's cursor), by cursor; dropped with the message.
	extras map[uint64]extra
	// size is the batch bytes (entrySize) of every message written.
	size uint64
}

// BytesPerMessage is what a buffered message costs beyond its payload: its
// record and write time in the ring, allocated for every slot at start.
// Payload bytes add their own length (64 KiB segments leave at most one
// payload's worth unused at each segment's end). BenchmarkStoreHeap
// measures it; TestStoreHeapPerMessage holds the store to it.
const BytesPerMessage = int(unsafe.Sizeof(record{})) + 8

// entrySize is what one message counts towards MaxBatchBytes.
func entrySize(topic string, payload []byte, exclude, onlyNode string) int {
	return len(payload) + len(topic) + len(exclude) + len(onlyNode) + 8
}

// record is 20 bytes: the ring holds it by value.
type record struct {
	seg, off uint32
	size     uint32 // payload bytes; the top bit marks a message with extras
	topic    uint32
	typ      uint32
}

const extraBit = 1 << 31

func (r record) hasExtra() bool { return r.size&extraBit != 0 }
func (r record) len() uint32    { return r.size &^ extraBit }

type extra struct {
	exclude, onlyNode string
	// stored is the message's row in the cluster's shared store (0: none):
	// it travels with the message (core.Write.SharedCursor).
	stored uint64
	// trace is the trace context it was published in (core.Write.Trace,
	// never modified; nil: none).
	trace *core.Trace
}

type segment struct {
	buf  []byte
	last uint64 // cursor of the last message stored in it
}

// segmentSize is the capacity of a payload segment; a larger payload gets a
// segment of its own size.
const segmentSize = 64 << 10

func newStore(capacity int) (*store, error) {
	r, err := ringbuf.New[record](capacity)
	if err != nil {
		return nil, err
	}
	return &store{ring: r, topics: newInterner(), types: newInterner(), extras: map[uint64]extra{}}, nil
}

// write buffers e, written at time at (see ringbuf.WriteAt), and returns its
// cursor. The payload is copied: e may be dropped afterwards.
func (s *store) write(e *core.Write, at int64) (uint64, error) {
	c := s.ring.WriteCursor()
	if uint64(s.ring.Cap()) <= c { // the write overwrites the oldest message
		s.evict(c - uint64(s.ring.Cap()))
	}
	rec := record{topic: s.topics.acquire(e.Topic), typ: s.types.acquire(e.PayloadType), size: uint32(len(e.Payload))}
	rec.seg, rec.off = s.appendPayload(e.Payload, c)
	if e.Exclude != "" || e.OnlyNode != "" || e.SharedCursor != 0 || e.Trace != nil {
		rec.size |= extraBit
		s.extras[c] = extra{exclude: e.Exclude, onlyNode: e.OnlyNode, stored: e.SharedCursor, trace: e.Trace}
	}
	if _, err := s.ring.WriteAt(rec, at); err != nil {
		s.release(c, rec) // not stored: give back what it took (its bytes stay in the segment)
		return 0, err
	}
	s.size += uint64(entrySize(e.Topic, e.Payload, e.Exclude, e.OnlyNode) + e.Trace.Size())
	return c, nil
}

// appendPayload copies p into the newest segment (or a new one) and returns
// where it is.
func (s *store) appendPayload(p []byte, c uint64) (seg, off uint32) {
	n := len(s.segs)
	if n == 0 || len(s.segs[n-1].buf)+len(p) > cap(s.segs[n-1].buf) {
		size := segmentSize
		if len(p) > size {
			size = len(p)
		}
		s.segs = append(s.segs, &segment{buf: make([]byte, 0, size)})
		n++
	}
	sg := s.segs[n-1]
	off = uint32(len(sg.buf))
	sg.buf = append(sg.buf, p...)
	sg.last = c
	return s.segBase + uint32(n-1), off
}

// evict releases what the message at cursor c holds, before its slot is
// reused.
func (s *store) evict(c uint64) {
	rec, err := s.ring.At(c)
	if err != nil {
		return
	}
	s.release(c, rec)
	for len(s.segs) > 0 && s.segs[0].last <= c { // every message in it is gone
		s.segs[0] = nil
		s.segs = s.segs[1:]
		s.segBase++
	}
}

func (s *store) release(c uint64, rec record) {
	s.topics.release(rec.topic)
	s.types.release(rec.typ)
	if rec.hasExtra() {
		delete(s.extras, c)
	}
}

// at returns the message with cursor c while it is buffered. The payload
// aliases the segment: read it before the message is overwritten.
func (s *store) at(c uint64) (topic, typ string, payload []byte, ex extra, err error) {
	rec, err := s.ring.At(c)
	if err != nil {
		return "", "", nil, extra{}, err
	}
	topic, typ, payload, ex = s.entry(c, rec)
	return topic, typ, payload, ex, nil
}

// entry is the message with cursor c whose ring record is rec (from At, or
// a run of records from Ring.Span); the same aliasing as at.
func (s *store) entry(c uint64, rec record) (topic, typ string, payload []byte, ex extra) {
	sg := s.segs[rec.seg-s.segBase]
	end := rec.off + rec.len()
	payload = sg.buf[rec.off:end:end]
	if rec.hasExtra() {
		ex = s.extras[c]
	}
	return s.topics.strs[rec.topic], s.types.strs[rec.typ], payload, ex
}

// interner maps strings to small ids, counting references, so a buffered
// message stores a topic as 4 bytes. The last string looked up is cached:
// a run of messages on one topic costs a string comparison each.
type interner struct {
	ids     map[string]uint32
	strs    []string
	refs    []int32
	free    []uint32
	lastStr string
	lastID  uint32
	hasLast bool
}

func newInterner() interner { return interner{ids: map[string]uint32{}} }

func (in *interner) acquire(s string) uint32 {
	if in.hasLast && s == in.lastStr {
		in.refs[in.lastID]++
		return in.lastID
	}
	id, ok := in.ids[s]
	if !ok {
		if n := len(in.free); n > 0 {
			id, in.free = in.free[n-1], in.free[:n-1]
			in.strs[id], in.refs[id] = s, 0
		} else {
			id = uint32(len(in.strs))
			in.strs, in.refs = append(in.strs, s), append(in.refs, 0)
		}
		in.ids[s] = id
	}
	in.refs[id]++
	in.lastStr, in.lastID, in.hasLast = s, id, true
	return id
}

func (in *interner) release(id uint32) {
	in.refs[id]--
	if in.refs[id] > 0 {
		return
	}
	delete(in.ids, in.strs[id])
	if in.hasLast && in.lastID == id {
		in.hasLast = false
	}
	in.strs[id] = ""
	in.free = append(in.free, id)
}
