package messages

import (
	"errors"
	"fmt"
	"unicode/utf8"
	"unsafe"
)

// ErrBadBatch is wrapped by Batch.Validate's errors.
var ErrBadBatch = errors.New("messages: malformed batch")

// AddEntry appends e to the batch's columns. The payload bytes are copied
// into the batch, which is then independent of e.
func (b *Batch) AddEntry(e *Entry) {
	b.Add(e.Topic, e.PayloadType, e.Payload, e.Exclude, e.OnlyNode, 0)
	b.SetTrace(e.Traceparent, e.Tracestate)
}

// Add appends one entry to the batch's columns. storeCursor is the entry's
// row in a shared durable store (0: none).
func (b *Batch) Add(topic, payloadType string, payload []byte, exclude, onlyNode string, storeCursor uint64) {
	i := uint32(len(b.PayloadSize))
	b.TopicIndex = append(b.TopicIndex, intern(&b.Topics, topic))
	b.TypeIndex = append(b.TypeIndex, intern(&b.PayloadTypes, payloadType))
	b.PayloadSize = append(b.PayloadSize, uint32(len(payload)))
	b.Payloads = append(b.Payloads, payload...)
	if exclude != "" || onlyNode != "" || storeCursor != 0 {
		b.Options = append(b.Options, &EntryOption{Index: i, Exclude: bytesOf(exclude), OnlyNode: bytesOf(onlyNode), StoreCursor: storeCursor})
	}
}

// SetTrace sets the W3C trace context (traceparent, tracestate) of the
// entry Add appended last; nothing when traceparent is "" (the entry was
// not published in a trace).
func (b *Batch) SetTrace(traceparent, tracestate string) {
	n := len(b.PayloadSize)
	if traceparent == "" || n == 0 {
		return
	}
	i := uint32(n - 1)
	var o *EntryOption
	if k := len(b.Options); k > 0 && b.Options[k-1].Index == i {
		o = b.Options[k-1]
	} else {
		o = &EntryOption{Index: i}
		b.Options = append(b.Options, o)
	}
	o.Traceparent, o.Tracestate = bytesOf(traceparent), bytesOf(tracestate)
}

// bytesOf is s as a new byte slice, nil for "" (an absent field).
func bytesOf(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// intern returns name's index in *table, appending it if new. Batches hold
// few distinct names, and the last one is the usual hit.
func intern[T ~string | ~[]byte](table *[]T, name string) uint32 {
	t := *table
	if n := len(t); n > 0 && string(t[n-1]) == name {
		return uint32(n - 1)
	}
	for i, s := range t {
		if string(s) == name {
			return uint32(i)
		}
	}
	*table = append(t, T(name))
	return uint32(len(t))
}

// str is b as a string without a copy. A batch's name bytes are never
// written after it is built or decoded (each its own allocation), so the
// strings handed out stay what they were, as payloads alias the batch too.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// BadTopics reports which of the batch's topics (by index in Topics) are
// not valid UTF-8; nil, without allocating, when every one is (always, from
// a producer of this build: Broadcast refuses such a topic). A topic that
// is not UTF-8 has no subscriber on a node of this build either (every
// subscribe path refuses it), so its entries have nobody to reach: the
// worker acknowledges them without delivering or storing them, and says so.
// They travel as bytes (see the .proto) so that such an entry, from a bug
// or an older build, is one entry the worker passes over, not a batch that
// cannot be decoded and wedges the producer's stream.
func (b *Batch) BadTopics() []bool {
	var bad []bool
	for i, t := range b.Topics {
		if !utf8.Valid(t) {
			if bad == nil {
				bad = make([]bool, len(b.Topics))
			}
			bad[i] = true
		}
	}
	return bad
}

// Len is the number of entries in the batch.
func (b *Batch) Len() int { return len(b.PayloadSize) }

// Validate checks that the columns agree: every index in range, payload
// sizes adding up, options naming existing entries in order, and the cursor
// range not overflowing. A batch from a peer is validated before use.
func (b *Batch) Validate() error {
	n := len(b.PayloadSize)
	if len(b.TopicIndex) != n || len(b.TypeIndex) != n {
		return fmt.Errorf("%w: %d payload sizes, %d topic indexes, %d type indexes", ErrBadBatch, n, len(b.TopicIndex), len(b.TypeIndex))
	}
	if b.FirstCursor+uint64(n) < b.FirstCursor {
		return fmt.Errorf("%w: cursor range overflows: first %d, %d entries", ErrBadBatch, b.FirstCursor, n)
	}
	var total uint64
	for i := 0; i < n; i++ {
		if int(b.TopicIndex[i]) >= len(b.Topics) || int(b.TypeIndex[i]) >= len(b.PayloadTypes) {
			return fmt.Errorf("%w: entry %d names topic %d of %d, type %d of %d", ErrBadBatch, i, b.TopicIndex[i], len(b.Topics), b.TypeIndex[i], len(b.PayloadTypes))
		}
		total += uint64(b.PayloadSize[i])
	}
	if total != uint64(len(b.Payloads)) {
		return fmt.Errorf("%w: payload sizes add up to %d, payloads hold %d bytes", ErrBadBatch, total, len(b.Payloads))
	}
	last := -1
	for _, o := range b.Options {
		if o == nil || int(o.Index) >= n || int(o.Index) <= last {
			return fmt.Errorf("%w: entry options out of range or order", ErrBadBatch)
		}
		last = int(o.Index)
	}
	return nil
}

// Cursor walks a validated batch entry by entry without allocating.
type Cursor struct {
	b      *Batch
	i, off int
	opt    int
	// stored is the store cursor of the entry Next returned last.
	stored uint64
	// traceparent and tracestate are its trace context (nil: none).
	traceparent, tracestate []byte
}

// Entries returns a Cursor at the batch's first entry. Validate first.
func (b *Batch) Entries() Cursor { return Cursor{b: b} }

// Next returns the next entry's fields; ok is false after the last one.
// payload aliases the batch's bytes.
func (c *Cursor) Next() (topic string, typeIndex uint32, payload []byte, exclude, onlyNode string, ok bool) {
	b := c.b
	if c.i >= len(b.PayloadSize) {
		return "", 0, nil, "", "", false
	}
	c.stored, c.traceparent, c.tracestate = 0, nil, nil
	size := int(b.PayloadSize[c.i])
	payload = b.Payloads[c.off : c.off+size : c.off+size]
	topic, typeIndex = str(b.Topics[b.TopicIndex[c.i]]), b.TypeIndex[c.i]
	if c.opt < len(b.Options) && int(b.Options[c.opt].Index) == c.i {
		o := b.Options[c.opt]
		exclude, onlyNode, c.stored = str(o.Exclude), str(o.OnlyNode), o.StoreCursor
		c.traceparent, c.tracestate = o.Traceparent, o.Tracestate
		c.opt++
	}
	c.i++
	c.off += size
	return topic, typeIndex, payload, exclude, onlyNode, true
}

// StoreCursor is the shared store's cursor of the entry Next returned last
// (0: none).
func (c *Cursor) StoreCursor() uint64 { return c.stored }

// Trace is the W3C trace context (traceparent, tracestate) of the entry
// Next returned last, as the peer sent it (not checked: see
// core.CheckTrace); nil when it was published outside a trace. The bytes
// alias the batch.
func (c *Cursor) Trace() (traceparent, tracestate []byte) { return c.traceparent, c.tracestate }

// TopicIndex is the index in Topics of the topic of the entry Next returned
// last (see BadTopics).
func (c *Cursor) TopicIndex() uint32 { return c.b.TopicIndex[c.i-1] }

// PayloadType is the batch's payload type name i, as a string (no copy).
func (b *Batch) PayloadType(i uint32) string { return str(b.PayloadTypes[i]) }

// Entry returns entry i as a value (tests and tools; the hot path uses
// Entries). The batch must be valid.
func (b *Batch) Entry(i int) *Entry {
	c := b.Entries()
	for j := 0; ; j++ {
		topic, ti, payload, exclude, only, ok := c.Next()
		if !ok {
			return nil
		}
		if j == i {
			tp, ts := c.Trace()
			return &Entry{Topic: topic, PayloadType: b.PayloadType(ti), Payload: payload, Exclude: exclude, OnlyNode: only,
				Traceparent: string(tp), Tracestate: string(ts)}
		}
	}
}
