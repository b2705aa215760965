// Package durable is the durable-stream engine of a pubsub: it
// implements core.Durable over a store.Store (what a node appends, what
// it received, its producer positions and gap rows, a failing node-local
// store, producer leases) and keeps the store to its Retention
// (TrimLoop). The root package builds one Engine per pubsub from its
// options (WithStore, WithDurableTopics, WithAuthorizer, WithRetention)
// and reads streams through it (ReplaySession, catch-ups).
package durable

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/store"
)

// MinStoreTimeout is the least a store call is given (Config.CallTimeout
// when longer): an fsync on a busy disk can take a while, and a durable
// broadcast that gives up too early fails for nothing.
const MinStoreTimeout = 5 * time.Second

// Options is what the root's options say of durable streams.
type Options struct {
	Store     store.Store
	Durable   []string // WithDurableTopics
	Authorize func(sessionID, stream string) error
	Retention store.Retention
	// InboxPrefix is echopubsub.SessionInboxPrefix: no stream begins with it.
	InboxPrefix string
}

// Engine is the durable side of one pubsub.
type Engine struct {
	Node    string        // this node (set by Start)
	Timeout time.Duration // each store call: max(Config.CallTimeout, MinStoreTimeout)
	Log     zerolog.Logger

	Store     store.Store
	preds     map[uint32][2]uint64 // group -> previous incarnation, final cursor
	exact     map[string]bool
	prefixes  []string
	Authorize func(sessionID, stream string) error
	Retention store.Retention // WithRetention (checked: the store is a store.Trimmer)
	Metrics   *core.Metrics
	fault     fault // a node-local store whose writes fail (fault.go)
	// onGap is called after a gap row was written that no CursorExpired
	// announced (gapWritten); set by OnGap once the sessions run.
	onGap atomic.Pointer[func()]
}

// OnGap sets what gapWritten calls: the sessions' WithFrom subscriptions
// read their streams.
func (d *Engine) OnGap(fn func()) { d.onGap.Store(&fn) }

// gapWritten tells the sessions that the store gained a gap row no notice
// announced (a producer that restarted while this node was away, found
// by Joined; the rows a failing store could not take): their WithFrom
// subscriptions read their streams now, so a live one that reached its
// stream's end learns of it without waiting for the next row.
func (d *Engine) gapWritten() {
	if fn := d.onGap.Load(); fn != nil {
		(*fn)()
	}
}

// Failing reports whether a node-local store's writes fail now (its gap
// rows are written once it recovers).
func (d *Engine) Failing() bool { return d.fault.failing.Load() }

// gapRecord is the gap row (its Stream left to MarkGap) for what ce tells:
// its count and reason, and its range, when known, as the row's payload
// (messages.GapRange: see store.Record).
func gapRecord(origin string, ce *messages.CursorExpired) *store.Record {
	r := &store.Record{Kind: store.RecordGap, Origin: origin, Missed: ce.Missed, Reason: ce.Reason}
	if ce.RangeKnown() {
		r.PayloadType = messages.GapRangeType
		r.Payload, _ = proto.Marshal(&messages.GapRange{ProducerIncarnation: ce.ProducerIncarnation, From: ce.From, To: ce.To})
	}
	return r
}

// New checks o (errors name the option and the value) and returns the
// engine; Start sets Node, Timeout, Log and Metrics.
func New(o Options) (*Engine, error) {
	if len(o.Durable) > 0 && o.Store == nil {
		return nil, fmt.Errorf("echopubsub: WithDurableTopics %q needs WithStore", o.Durable)
	}
	if err := checkRetention(o.Retention, o.Store); err != nil {
		return nil, err
	}
	d := &Engine{Store: o.Store, exact: map[string]bool{}, Authorize: o.Authorize, Retention: o.Retention}
	for _, p := range o.Durable {
		switch {
		case p == "" || p == "*":
			return nil, fmt.Errorf("echopubsub: WithDurableTopics pattern %q: must name a topic or a prefix", p)
		case strings.HasPrefix(p, o.InboxPrefix):
			return nil, fmt.Errorf("echopubsub: WithDurableTopics pattern %q: session inboxes are not streams", p)
		case strings.HasSuffix(p, "*"):
			d.prefixes = append(d.prefixes, strings.TrimSuffix(p, "*"))
		default:
			d.exact[p] = true
		}
	}
	return d, nil
}

// IsDurable reports whether topic is a durable stream (core.Durable).
func (d *Engine) IsDurable(topic string) bool {
	if d == nil || d.Store == nil {
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

// Ctx bounds one store call (Timeout).
func (d *Engine) Ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d.Timeout)
}

// Publish implements core.Durable: a durable broadcast of this node is
// appended (once, by this node: for a shared store the only append) before
// it is queued. DirectBroadcast writes are not durable.
func (d *Engine) Publish(ctx context.Context, w *core.Write) error {
	if w.OnlyNode != "" || !d.IsDurable(w.Topic) {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	d.flushFaults() // gap rows a failed store owes go before this row
	recs := []store.Record{{Stream: w.Topic, Kind: store.RecordMessage, Origin: d.Node, PayloadType: w.PayloadType, Payload: w.Payload}}
	err := d.Store.Append(ctx, recs)
	if d.Local() != nil && ctx.Err() == nil { // not the caller's deadline (nor a store call that hung)
		d.published(err)
	}
	if err != nil {
		if plant.IgnoreAppendError() {
			return nil
		}
		return fmt.Errorf("echopubsub: durable append to %q: %w", w.Topic, err)
	}
	w.StoreCursor = recs[0].Cursor
	if d.Store.Shared() {
		w.SharedCursor = w.StoreCursor
	}
	return nil
}

func (d *Engine) Local() store.LocalStore {
	if d == nil || d.Store == nil || d.Store.Shared() {
		return nil
	}
	l, _ := d.Store.(store.LocalStore)
	return l
}

func producerPosition(p core.ProducerPos, retired bool) store.ProducerPosition {
	return store.ProducerPosition{Node: p.Node, Group: p.Group, Incarnation: p.Incarnation, Next: p.Next, Retired: retired}
}

// Received implements core.Durable: a node-local store appends what this
// node received (one transaction per batch, with the producer's position),
// before the batch is acknowledged. A LocalStore that fails does not
// refuse the batch: the rows become gap rows once it recovers
// (fault.go).
func (d *Engine) Received(p core.ProducerPos, rows []core.Row) error {
	l := d.Local()
	if l == nil {
		if len(rows) == 0 || d.Store.Shared() {
			return nil
		}
		return d.appendRows(d.Store.Append, p, rows)
	}
	return d.write(l, localWrite{rows: rows, pos: producerPosition(p, false)})
}

func (d *Engine) appendRows(appendFn func(context.Context, []store.Record) error, p core.ProducerPos, rows []core.Row) error {
	recs := make([]store.Record, len(rows))
	for i, r := range rows {
		recs[i] = store.Record{Stream: r.Topic, Kind: store.RecordMessage, Origin: p.Node, PayloadType: r.PayloadType, Payload: r.Payload}
	}
	ctx, cancel := d.Ctx()
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
func (d *Engine) Lost(p core.ProducerPos, ce *messages.CursorExpired) error {
	l := d.Local()
	if l == nil {
		return nil
	}
	d.Log.Warn().Str("producer", p.Node).Uint32("group", p.Group).Uint64("missed", ce.Missed).Str("reason", ce.Reason).
		Msg("durable streams: marking a gap")
	return d.write(l, localWrite{mark: gapRecord(p.Node, ce), pos: producerPosition(p, false)})
}

// Joined implements core.Durable: when the worker could not tell (this
// node restarted since it last heard of the producer), the position
// recorded before says whether this node's store missed messages while
// the node was away; and a join below that point (it may reach back a
// little before this node started: see "Joined" in the package doc) goes
// on from it, so that what the store holds is not stored again.
func (d *Engine) Joined(p core.ProducerPos, told bool, predInc, predFinal uint64) (uint64, error) {
	l := d.Local()
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
	d.Log.Warn().Str("producer", p.Node).Uint32("group", p.Group).Uint64("missed", missed).Str("reason", reason).
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
func (d *Engine) Retired(p core.ProducerPos) error {
	l := d.Local()
	if l == nil {
		return nil
	}
	return d.write(l, localWrite{pos: producerPosition(p, true)})
}

// selfNode keys this node's own producer records in the positions of a
// LocalStore: where each group's incarnation ended at a graceful Stop.
const selfNode = "\x00self"

// loadPredecessors reads where this node's producers ended last time.
func (d *Engine) LoadPredecessors(groups int) error {
	d.preds = map[uint32][2]uint64{}
	l := d.Local()
	if l == nil {
		return nil
	}
	ctx, cancel := d.Ctx()
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
func (d *Engine) Predecessor(group uint32) (uint64, uint64) {
	p := d.preds[group]
	return p[0], p[1]
}

// ended records where this node's producer of group ended (graceful Stop,
// after its drain), and when it last wrote (its lease ends there: see
// lease.go): told to peers by its next incarnation.
func (d *Engine) Ended(group uint32, incarnation, writeCursor uint64, lastWrite time.Time) {
	l := d.Local()
	if l == nil || incarnation == 0 {
		return
	}
	ctx, cancel := d.Ctx()
	defer cancel()
	pos := store.ProducerPosition{Node: selfNode, Group: group, Incarnation: incarnation, Next: writeCursor, Retired: true}
	if err := l.AppendAt(ctx, nil, pos); err != nil {
		d.Log.Warn().Err(err).Uint32("group", group).Msg("durable streams: could not record where this producer ended: peers will mark a gap")
	}
	if err := d.Lease(group, incarnation, lastWrite); err != nil {
		d.Log.Warn().Err(err).Uint32("group", group).Msg("durable streams: could not record when this producer last wrote: its lease stands")
	}
}
