package echopubsub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/messages"
)

// Store keeps durable streams: for each stream (a topic named durable with
// WithDurableTopics), the rows appended to it, numbered by a cursor. Three
// implementations ship: package store/seglog (embedded, a segmented log in
// one directory per node, one fdatasync per commit: the default, and the
// demo's), module store/bolt (embedded, one bbolt file per node, which opens
// in constant time) and module store/postgres (PostgreSQL shared by the
// cluster). Package store/storetest is the conformance suite every
// Store must pass. A Store validates what it is given: a record needs a
// Stream, a Kind of RecordMessage or RecordGap, and a message record its
// PayloadType.
//
// A node-local Store (Shared false) holds what its node published and
// received. Marking what the node missed with gap rows also needs the
// producer positions that store/bolt and store/seglog record with their
// rows, an interface internal to this module (internal/core.LocalStore):
// another node-local Store has no gap rows.
//
// Cursors: a stream's first row has cursor 1 and each row the previous
// cursor + 1, with no hole: a row is visible to Read only once every row
// below it is. Append is all or nothing.
//
// Implementations must be safe for concurrent use.
type Store interface {
	// Append stores recs (all or none) and sets each one's Cursor. Records
	// of one stream get consecutive cursors in slice order. When Append
	// returns nil the rows are durable (they survive a crash of the
	// process and of the machine, as far as the storage's fsync does).
	Append(ctx context.Context, recs []Record) error
	// Read returns up to limit (> 0) rows of stream whose cursor is >=
	// from (0 reads from the start), in cursor order, and next, the cursor
	// after the last row returned. With no row: next is from (1 for from
	// 0) when nothing at or after from was appended yet, and the stream's
	// end + 1 when every row from from on was removed (Trimmer). A from
	// past the stream's end + 1 is ErrCursorBeyondEnd: such a cursor was
	// not handed out by this store. A stream never appended to is empty:
	// reading it from 0 or 1 returns no rows and next 1. A first row above
	// from, or a next above from with no row, means rows below were
	// removed: the replay and catch-up tell the session (StreamTruncated).
	Read(ctx context.Context, stream string, from uint64, limit int) (recs []Record, next uint64, err error)
	// Shared reports whether every node of the cluster uses this store (a
	// shared database: the publishing node appends each row once, and a
	// cursor means the same row on every node) or it belongs to one node
	// (an embedded file: each node appends what it receives, and a cursor
	// is meaningful only on the node that handed it out).
	Shared() bool
	// Close releases the store. Calls after Close fail.
	Close() error
}

// Trimmer is what a Store adds to enforce a Retention (WithRetention): it
// is an interface of its own, not a method of Store, so that a Store
// written for an earlier release still compiles and runs unchanged when
// nobody asks for retention; Start refuses WithRetention with a store that
// lacks it, naming the store's type, rather than keep rows it was told to
// drop. store/bolt, store/seglog, store/postgres and test.MemStore
// implement it.
//
// The rules every implementation follows (store/storetest checks them):
//
//   - Only the oldest rows of a stream go: Trim removes, per stream, every
//     row at or below one cursor. The rows kept are a contiguous run that
//     ends at the stream's last row, so Read from a removed cursor returns
//     the first kept row, or, with every row removed, no row and next =
//     the stream's end + 1.
//   - Cursors are never reused: the stream's end survives its rows (and a
//     reopen); the next Append continues after it.
//   - MaxRows counts every row (gap rows too); MaxBytes counts the
//     payload bytes (len(Payload)) of the rows kept, and keeps at most that
//     many, even when that leaves no row; MaxAge removes the rows appended
//     more than MaxAge before now. A row with the zero Time (written before
//     the store recorded times) is as old as the first timed row after it:
//     it goes when a later row goes for its age, never on its own.
//   - Appends are never blocked for long: an implementation removes rows in
//     bounded chunks, each its own transaction, and rows of the stream
//     appended meanwhile are kept (they are above the cut).
//   - A node-local store keeps its producer positions and its gap rows
//     working: MarkGap still writes a gap row into a stream whose rows were
//     all removed.
type Trimmer interface {
	// Trim removes from every stream the rows r does not keep (now is
	// the store's clock) and reports, per stream it removed rows from,
	// what it removed. With ctx ended it stops between chunks and returns
	// what it removed so far with ctx's error. A zero r removes nothing.
	Trim(ctx context.Context, r Retention) ([]Trimmed, error)
}

// Trimmed is what one Trim removed from one stream.
type Trimmed struct {
	Stream string
	// Rows and Bytes (payload bytes) removed.
	Rows, Bytes uint64
	// FirstKept is the stream's first cursor still kept: its end + 1 when
	// every row was removed.
	FirstKept uint64
}

// RecordKind is what a stream row holds.
type RecordKind uint8

const (
	// RecordMessage is a broadcast message.
	RecordMessage RecordKind = 1
	// RecordGap marks messages of the stream this node's store does not
	// hold (a node-local store that missed them: see the package doc,
	// "Durable streams"). ReplaySession hands the session a *StreamGap.
	RecordGap RecordKind = 2
)

func (k RecordKind) String() string {
	switch k {
	case RecordMessage:
		return "message"
	case RecordGap:
		return "gap"
	}
	return fmt.Sprintf("RecordKind(%d)", uint8(k))
}

// Record is one row of a stream.
type Record struct {
	Stream string
	// Cursor is set by Append.
	Cursor uint64
	Kind   RecordKind
	// Origin is the node that published the message (for a gap: the
	// producer node whose messages are missing).
	Origin string
	// PayloadType and Payload are the message's full protobuf name and
	// wire bytes (RecordMessage). A gap row whose range is known (which
	// producer cursors it stands for: StreamGap's From and To) carries it
	// here, as a messages.GapRange of PayloadType "echopubsub.v1.GapRange"
	// (a few bytes, counted by Retention.MaxBytes like any payload); one
	// without (written by an earlier build, or counting rows a failing
	// store could not take) has an unknown range.
	PayloadType string
	Payload     []byte
	// Missed is, for a gap, the number of messages missing (0: unknown).
	Missed uint64
	// Reason says why a gap is there.
	Reason string
	// Time is when the row was appended: Append sets it (the store's
	// clock, UTC, to the microsecond) when it is zero. Retention.MaxAge
	// reads it. Rows a store wrote before it recorded times read back
	// with the zero Time (see Trimmer).
	Time time.Time
}

// Store errors.
var (
	// ErrCursorBeyondEnd: a replay cursor past the stream's end + 1. It was
	// not handed out by this store: a cursor of another node's embedded
	// store, or a store that was deleted and created anew. Nothing is
	// skipped on its account: replay from a cursor this store handed out
	// (or from 0 after reloading from a source of truth).
	ErrCursorBeyondEnd = errors.New("echopubsub: replay cursor is beyond the stream's end")
	// ErrStoreClosed: the store was closed.
	ErrStoreClosed = errors.New("echopubsub: store closed")
	// ErrNoStore: ReplaySession on a pubsub started without a store, or a
	// stream that is not durable.
	ErrNoStore = errors.New("echopubsub: no durable store for this stream")
	// ErrUnauthorized wraps the authorizer's refusal (WithAuthorizer).
	ErrUnauthorized = errors.New("echopubsub: not authorized")
	// ErrBadLimit: ReplayOptions.Limit must be > 0.
	ErrBadLimit = errors.New("echopubsub: replay limit must be positive")
)

// WithStore makes the pubsub keep its durable topics (WithDurableTopics) in
// s. The caller owns s: Stop does not close it, so that it can outlive the
// pubsub (or serve a restarted one). Defaults to none. The embedded default
// is package store/seglog (seglog.Open); module store/bolt (bolt.Open) is the
// other embedded store; PostgreSQL is module store/postgres.
func WithStore(s Store) Option { return func(o *options) { o.store = s } }

// WithDurableTopics names the topics whose broadcasts are durable: each is
// appended to its stream (the stream is the topic) before Broadcast
// returns nil, and can be replayed with ReplaySession. A pattern ending in
// '*' names every topic with that prefix ("room:*"); any other pattern is
// one topic. Requires WithStore. Defaults to none.
func WithDurableTopics(patterns ...string) Option {
	return func(o *options) { o.durable = append(o.durable, patterns...) }
}

// WithAuthorizer sets the function ReplaySession asks before it redelivers
// stream rows to a session: a non-nil error refuses (ReplaySession returns
// it wrapped in ErrUnauthorized). Defaults to allowing every session every
// durable stream.
func WithAuthorizer(fn func(sessionID, stream string) error) Option {
	return func(o *options) { o.authorize = fn }
}

// durability is the durable side of one pubsub.
// minStoreTimeout is the least a store call is given (Config.CallTimeout
// when longer): an fsync on a busy disk can take a while, and a durable
// broadcast that gives up too early fails for nothing.
const minStoreTimeout = 5 * time.Second

type durability struct {
	node    string        // this node (set by Start)
	timeout time.Duration // each store call: max(Config.CallTimeout, minStoreTimeout)
	log     zerolog.Logger

	store     Store
	preds     map[uint32][2]uint64 // group -> previous incarnation, final cursor
	exact     map[string]bool
	prefixes  []string
	authorize func(sessionID, stream string) error
	retention Retention // WithRetention (checked: the store is a Trimmer)
	metrics   *core.Metrics
	fault     storeFault // a node-local store whose writes fail (store_fault.go)
	// onGap is called after a gap row was written that no CursorExpired
	// announced (gapWritten); set once the sessions run.
	onGap atomic.Pointer[func()]
}

// gapWritten tells the sessions that the store gained a gap row no notice
// announced (a producer that restarted while this node was away, found
// by Joined; the rows a failing store could not take): their WithFrom
// subscriptions read their streams now, so a live one that reached its
// stream's end learns of it without waiting for the next row.
func (d *durability) gapWritten() {
	if fn := d.onGap.Load(); fn != nil {
		(*fn)()
	}
}

func newDurability(o *options) (*durability, error) {
	if len(o.durable) > 0 && o.store == nil {
		return nil, fmt.Errorf("echopubsub: WithDurableTopics %q needs WithStore", o.durable)
	}
	if err := checkRetention(o); err != nil {
		return nil, err
	}
	d := &durability{store: o.store, exact: map[string]bool{}, authorize: o.authorize, retention: o.retention}
	for _, p := range o.durable {
		switch {
		case p == "" || p == "*":
			return nil, fmt.Errorf("echopubsub: WithDurableTopics pattern %q: must name a topic or a prefix", p)
		case strings.HasPrefix(p, SessionInboxPrefix):
			return nil, fmt.Errorf("echopubsub: WithDurableTopics pattern %q: session inboxes are not streams", p)
		case strings.HasSuffix(p, "*"):
			d.prefixes = append(d.prefixes, strings.TrimSuffix(p, "*"))
		default:
			d.exact[p] = true
		}
	}
	return d, nil
}

// durable reports whether topic is a durable stream.
func (d *durability) durable(topic string) bool {
	if d == nil || d.store == nil {
		return false
	}
	if d.exact[topic] {
		return true
	}
	for _, p := range d.prefixes {
		if strings.HasPrefix(topic, p) {
			return true
		}
	}
	return false
}

func (d *durability) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d.timeout)
}

// IsDurable implements core.Durable.
func (d *durability) IsDurable(topic string) bool { return d.durable(topic) }

// Publish implements core.Durable: a durable broadcast of this node is
// appended (once, by this node: for a shared store the only append) before
// it is queued. DirectBroadcast writes are not durable.
func (d *durability) Publish(ctx context.Context, w *core.Write) error {
	if w.OnlyNode != "" || !d.durable(w.Topic) {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	d.flushFaults() // gap rows a failed store owes go before this row
	recs := []Record{{Stream: w.Topic, Kind: RecordMessage, Origin: d.node, PayloadType: w.PayloadType, Payload: w.Payload}}
	err := d.store.Append(ctx, recs)
	if d.local() != nil && ctx.Err() == nil { // not the caller's deadline (nor a store call that hung)
		d.published(err)
	}
	if err != nil {
		if plant.IgnoreAppendError() {
			return nil
		}
		return fmt.Errorf("echopubsub: durable append to %q: %w", w.Topic, err)
	}
	w.StoreCursor = recs[0].Cursor
	if d.store.Shared() {
		w.SharedCursor = w.StoreCursor
	}
	return nil
}

func (d *durability) local() core.LocalStore[Record] {
	if d == nil || d.store == nil || d.store.Shared() {
		return nil
	}
	l, _ := d.store.(core.LocalStore[Record])
	return l
}

func producerPosition(p core.ProducerPos, retired bool) core.ProducerPosition {
	return core.ProducerPosition{Node: p.Node, Group: p.Group, Incarnation: p.Incarnation, Next: p.Next, Retired: retired}
}

// Received implements core.Durable: a node-local store appends what this
// node received (one transaction per batch, with the producer's position),
// before the batch is acknowledged. A LocalStore that fails does not
// refuse the batch: the rows become gap rows once it recovers
// (store_fault.go).
func (d *durability) Received(p core.ProducerPos, rows []core.Row) error {
	l := d.local()
	if l == nil {
		if len(rows) == 0 || d.store.Shared() {
			return nil
		}
		return d.appendRows(d.store.Append, p, rows)
	}
	return d.write(l, localWrite{rows: rows, pos: producerPosition(p, false)})
}

func (d *durability) appendRows(appendFn func(context.Context, []Record) error, p core.ProducerPos, rows []core.Row) error {
	recs := make([]Record, len(rows))
	for i, r := range rows {
		recs[i] = Record{Stream: r.Topic, Kind: RecordMessage, Origin: p.Node, PayloadType: r.PayloadType, Payload: r.Payload}
	}
	ctx, cancel := d.ctx()
	defer cancel()
	if err := appendFn(ctx, recs); err != nil {
		return err
	}
	for i := range rows {
		rows[i].Cursor = recs[i].Cursor
	}
	return nil
}

// Lost implements core.Durable: a gap row in every stream of a node-local
// store, with ce's count, reason and range.
func (d *durability) Lost(p core.ProducerPos, ce *messages.CursorExpired) error {
	l := d.local()
	if l == nil {
		return nil
	}
	d.log.Warn().Str("producer", p.Node).Uint32("group", p.Group).Uint64("missed", ce.Missed).Str("reason", ce.Reason).
		Msg("durable streams: marking a gap")
	return d.write(l, localWrite{mark: gapRecord(p.Node, ce), pos: producerPosition(p, false)})
}

// gapRecord is the gap row (its Stream left to MarkGap) for what ce tells:
// its count and reason, and its range, when known, as the row's payload
// (messages.GapRange: see Record).
func gapRecord(origin string, ce *messages.CursorExpired) *Record {
	r := &Record{Kind: RecordGap, Origin: origin, Missed: ce.Missed, Reason: ce.Reason}
	if ce.RangeKnown() {
		r.PayloadType = gapRangeType
		r.Payload, _ = proto.Marshal(&messages.GapRange{ProducerIncarnation: ce.ProducerIncarnation, From: ce.From, To: ce.To})
	}
	return r
}

// gapRangeType is the PayloadType of a gap row that carries its range.
const gapRangeType = "echopubsub.v1.GapRange"

// gapNotice is the *StreamGap for gap row r of stream, for session id.
func gapNotice(id, stream string, r *Record) *StreamGap {
	g := &StreamGap{SessionID: id, Stream: stream, Cursor: r.Cursor, Node: r.Origin, Missed: r.Missed, Reason: r.Reason}
	var gr messages.GapRange
	if r.PayloadType == gapRangeType && proto.Unmarshal(r.Payload, &gr) == nil && gr.To != 0 && gr.ProducerIncarnation != 0 {
		g.ProducerIncarnation, g.From, g.To = gr.ProducerIncarnation, gr.From, gr.To
	}
	return g
}

// Joined implements core.Durable: when the worker could not tell (this
// node restarted since it last heard of the producer), the position
// recorded before says whether this node's store missed messages while
// the node was away; and a join below that point (it may reach back a
// little before this node started: see "Joined" in the package doc) goes
// on from it, so that what the store holds is not stored again.
func (d *durability) Joined(p core.ProducerPos, told bool, predInc, predFinal uint64) (uint64, error) {
	l := d.local()
	if l == nil {
		return p.Next, nil
	}
	old, ok, err := d.position(l, p.Node, p.Group)
	reason := ""
	var missed, from uint64
	ranged := false // [from, p.Next) of p.Incarnation
	switch {
	case err != nil && !told:
		reason = "this node's store could not read how far it got in this producer's stream (" + err.Error() + "): what it missed is unknown"
	case told || !ok:
		// The worker told (or knew there was nothing to tell), or this
		// store never heard of the producer: nothing of it was stored
		// here to be continued.
	case old.Incarnation == p.Incarnation:
		if p.Next > old.Next {
			missed, from = p.Next-old.Next, old.Next
			reason = fmt.Sprintf("this node was away while the producer wrote cursors %d to %d", old.Next, p.Next-1)
			ranged = true
		}
		p.Next = max(p.Next, old.Next)
	case old.Retired || (predInc != 0 && predInc == old.Incarnation && old.Next >= predFinal):
		// The previous incarnation ended where this store got to (it
		// retired here, or its node says so from its own store): only
		// what the new one wrote before this node started is missing.
		if p.Next > 0 {
			missed = p.Next
			reason = fmt.Sprintf("this node was away while the producer's new incarnation wrote cursors 0 to %d", p.Next-1)
			ranged = true
		}
	default:
		reason = "the producer restarted while this node was away: what its previous incarnation wrote after this node's last batch is unknown"
	}
	if reason == "" {
		return p.Next, d.write(l, localWrite{pos: producerPosition(p, false)})
	}
	d.log.Warn().Str("producer", p.Node).Uint32("group", p.Group).Uint64("missed", missed).Str("reason", reason).
		Msg("durable streams: marking a gap")
	ce := &messages.CursorExpired{Missed: missed, Reason: reason}
	if ranged {
		ce.ProducerIncarnation, ce.From, ce.To = p.Incarnation, from, p.Next
	}
	if err := d.write(l, localWrite{mark: gapRecord(p.Node, ce), pos: producerPosition(p, false)}); err != nil {
		return p.Next, err
	}
	d.gapWritten() // no subscriber is told (this node restarted): the store tells its sessions
	return p.Next, nil
}

// Retired implements core.Durable.
func (d *durability) Retired(p core.ProducerPos) error {
	l := d.local()
	if l == nil {
		return nil
	}
	return d.write(l, localWrite{pos: producerPosition(p, true)})
}

// selfNode keys this node's own producer records in the positions of a
// LocalStore: where each group's incarnation ended at a graceful Stop.
const selfNode = "\x00self"

// loadPredecessors reads where this node's producers ended last time.
func (d *durability) loadPredecessors(groups int) error {
	d.preds = map[uint32][2]uint64{}
	l := d.local()
	if l == nil {
		return nil
	}
	ctx, cancel := d.ctx()
	defer cancel()
	for g := 0; g < groups; g++ {
		pos, ok, err := l.Position(ctx, selfNode, uint32(g))
		if err != nil {
			return fmt.Errorf("echopubsub: durable store: %w", err)
		}
		if ok && pos.Retired {
			d.preds[uint32(g)] = [2]uint64{pos.Incarnation, pos.Next}
		}
	}
	return nil
}

// Predecessor implements core.Durable.
func (d *durability) Predecessor(group uint32) (uint64, uint64) {
	p := d.preds[group]
	return p[0], p[1]
}

// ended records where this node's producer of group ended (graceful Stop,
// after its drain), and when it last wrote (its lease ends there: see
// store_lease.go): told to peers by its next incarnation.
func (d *durability) ended(group uint32, incarnation, writeCursor uint64, lastWrite time.Time) {
	l := d.local()
	if l == nil || incarnation == 0 {
		return
	}
	ctx, cancel := d.ctx()
	defer cancel()
	pos := core.ProducerPosition{Node: selfNode, Group: group, Incarnation: incarnation, Next: writeCursor, Retired: true}
	if err := l.AppendAt(ctx, nil, pos); err != nil {
		d.log.Warn().Err(err).Uint32("group", group).Msg("durable streams: could not record where this producer ended: peers will mark a gap")
	}
	if err := d.Lease(group, incarnation, lastWrite); err != nil {
		d.log.Warn().Err(err).Uint32("group", group).Msg("durable streams: could not record when this producer last wrote: its lease stands")
	}
}
