package echopubsub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/store"
)

// The contract of durable streams is package store: these are its names
// as this package has always had them (aliases: the same types and
// values).
type (
	// Store keeps durable streams: see store.Store.
	Store = store.Store
	// Trimmer is what a Store adds to enforce a Retention: see
	// store.Trimmer.
	Trimmer = store.Trimmer
	// Trimmed is what one Trim removed from one stream: see store.Trimmed.
	Trimmed = store.Trimmed
	// RecordKind is what a stream row holds: see store.RecordKind.
	RecordKind = store.RecordKind
	// Record is one row of a stream: see store.Record.
	Record = store.Record
	// Retention bounds what the store keeps of each durable stream: see
	// store.Retention.
	Retention = store.Retention
)

// Record kinds: see store.RecordMessage and store.RecordGap.
const (
	RecordMessage = store.RecordMessage
	RecordGap     = store.RecordGap
)

// Store errors.
var (
	// ErrCursorBeyondEnd is store.ErrCursorBeyondEnd: a replay cursor past
	// the stream's end + 1, not handed out by this store.
	ErrCursorBeyondEnd = store.ErrCursorBeyondEnd
	// ErrStoreClosed is store.ErrStoreClosed: the store was closed.
	ErrStoreClosed = store.ErrStoreClosed
	// ErrBadLimit is store.ErrBadLimit: ReplayOptions.Limit must be > 0.
	ErrBadLimit = store.ErrBadLimit
	// ErrNoStore: ReplaySession on a pubsub started without a store, or a
	// stream that is not durable.
	ErrNoStore = errors.New("echopubsub: no durable store for this stream")
	// ErrUnauthorized wraps the authorizer's refusal (WithAuthorizer).
	ErrUnauthorized = errors.New("echopubsub: not authorized")
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

func (d *durability) local() store.LocalStore {
	if d == nil || d.store == nil || d.store.Shared() {
		return nil
	}
	l, _ := d.store.(store.LocalStore)
	return l
}

func producerPosition(p core.ProducerPos, retired bool) store.ProducerPosition {
	return store.ProducerPosition{Node: p.Node, Group: p.Group, Incarnation: p.Incarnation, Next: p.Next, Retired: retired}
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
// store.
func (d *durability) Lost(p core.ProducerPos, missed uint64, reason string) error {
	l := d.local()
	if l == nil {
		return nil
	}
	d.log.Warn().Str("producer", p.Node).Uint32("group", p.Group).Uint64("missed", missed).Str("reason", reason).
		Msg("durable streams: marking a gap")
	return d.write(l, localWrite{mark: &Record{Kind: RecordGap, Origin: p.Node, Missed: missed, Reason: reason}, pos: producerPosition(p, false)})
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
	var missed uint64
	switch {
	case err != nil && !told:
		reason = "this node's store could not read how far it got in this producer's stream (" + err.Error() + "): what it missed is unknown"
	case told || !ok:
		// The worker told (or knew there was nothing to tell), or this
		// store never heard of the producer: nothing of it was stored
		// here to be continued.
	case old.Incarnation == p.Incarnation:
		if p.Next > old.Next {
			missed = p.Next - old.Next
			reason = fmt.Sprintf("this node was away while the producer wrote cursors %d to %d", old.Next, p.Next-1)
		}
		p.Next = max(p.Next, old.Next)
	case old.Retired || (predInc != 0 && predInc == old.Incarnation && old.Next >= predFinal):
		// The previous incarnation ended where this store got to (it
		// retired here, or its node says so from its own store): only
		// what the new one wrote before this node started is missing.
		if p.Next > 0 {
			missed = p.Next
			reason = fmt.Sprintf("this node was away while the producer's new incarnation wrote cursors 0 to %d", p.Next-1)
		}
	default:
		reason = "the producer restarted while this node was away: what its previous incarnation wrote after this node's last batch is unknown"
	}
	if reason == "" {
		return p.Next, d.write(l, localWrite{pos: producerPosition(p, false)})
	}
	d.log.Warn().Str("producer", p.Node).Uint32("group", p.Group).Uint64("missed", missed).Str("reason", reason).
		Msg("durable streams: marking a gap")
	return p.Next, d.write(l, localWrite{mark: &Record{Kind: RecordGap, Origin: p.Node, Missed: missed, Reason: reason}, pos: producerPosition(p, false)})
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
	pos := store.ProducerPosition{Node: selfNode, Group: group, Incarnation: incarnation, Next: writeCursor, Retired: true}
	if err := l.AppendAt(ctx, nil, pos); err != nil {
		d.log.Warn().Err(err).Uint32("group", group).Msg("durable streams: could not record where this producer ended: peers will mark a gap")
	}
	if err := d.Lease(group, incarnation, lastWrite); err != nil {
		d.log.Warn().Err(err).Uint32("group", group).Msg("durable streams: could not record when this producer last wrote: its lease stands")
	}
}
