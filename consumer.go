package echopubsub

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/store"
)

// Durable consumers (WithConsumer): a named consumer of a stream has a
// committed cursor, kept by the store with the stream (store.ConsumerStore),
// that a later subscription with the same name resumes after. This file
// is the pubsub's side: the names in use on this node, each subscription's
// ack tracking (consumerTrack) and the goroutine that writes commits to
// the store (consumerBook.run).

// Consumer errors.
var (
	// ErrBadConsumerName: a consumer name must be 1 to 128 bytes of
	// [A-Za-z0-9._-]; the error names the value (store.CheckConsumerName).
	ErrBadConsumerName = store.ErrBadConsumerName
	// ErrConsumerBusy: a session of this node follows the consumer already
	// (one session at a time per name; close it or unsubscribe first).
	ErrConsumerBusy = errors.New("echopubsub: consumer is in use by another session")
	// ErrConsumerFrom: WithFrom given with WithConsumer for a consumer
	// that exists and resumes elsewhere (WithFrom only places a new
	// consumer, or repeats where an existing one resumes).
	ErrConsumerFrom = errors.New("echopubsub: WithFrom conflicts with the consumer's committed cursor")
	// ErrNoConsumerStore: the store does not keep named consumers (it does
	// not implement store.ConsumerStore).
	ErrNoConsumerStore = errors.New("echopubsub: the store does not keep named consumers")
)

// WithConsumer names the subscription a durable consumer of the stream
// (the topic must be durable: WithDurableTopics; the class ClassDurable):
// its committed cursor, the last row up to which every envelope was
// acknowledged (gap rows and rows no longer kept count as passed), is
// kept by the store with the stream, survives restarts, and a later
// SessionSubscribe with the same name resumes after it: the subscription
// is a WithFrom catch-up from the committed cursor + 1 (rows the store no
// longer kept arrive as one *StreamTruncated, as for WithFrom). A new
// name starts at the stream's end (live: what is published from now on),
// or at WithFrom's cursor when given; WithFrom with an existing name must
// be the cursor it resumes at (committed + 1), else ErrConsumerFrom:
// moving a consumer is DeleteConsumer, then subscribe anew.
//
// Retention (WithRetention) keeps every row a named consumer has not
// committed, except what Retention.MaxBytes, a hard cap, removes: that
// consumer gets a *StreamTruncated from the committed cursor + 1 when it
// resumes (exactly the rows it lost). A consumer that is never used again
// holds its stream's rows until DeleteConsumer. Commits reach the store
// shortly after the acks (coalesced, at most one store write in flight
// per pubsub); Stop writes the last ones. After a crash the consumer
// resumes from the last commit the store took: envelopes acked after it
// come again (at-least-once), none is skipped.
//
// One session at a time uses a name on a node (ErrConsumerBusy). On a
// shared store (PostgreSQL) the name and its cursor are the cluster's; on
// a node-local store (store/seglog, store/bolt) the node's, as its
// cursors are. Names: 1 to 128 bytes of [A-Za-z0-9._-]
// (ErrBadConsumerName). The store must implement store.ConsumerStore
// (ErrNoConsumerStore). Subscribing again to the topic with the same name
// only changes the other options; a different name is refused: unsubscribe
// first. Defaults to no name (the subscription keeps no cursor).
func WithConsumer(name string) SessionSubscribeOption {
	return func(s *subSpec) { s.consumer, s.consumerSet = name, true }
}

// ConsumerInfo is one named consumer of a stream (PubSub.Consumers).
type ConsumerInfo struct {
	Name string
	// Cursor is the committed cursor: the consumer resumes at Cursor + 1.
	Cursor uint64
	// Lag is the rows of the stream after Cursor (its end - Cursor).
	Lag uint64
	// LastAck is when Cursor last moved (or the consumer was created).
	LastAck time.Time
	// SessionID is the session of this node that follows it ("": none).
	SessionID string
}

// Consumers lists stream's named consumers (by name), with the cursors
// this node committed and not yet written to the store included. Errors:
// ErrNoConsumerStore, the store's.
func (ps *PubSub) Consumers(stream string) ([]ConsumerInfo, error) {
	cs, err := ps.consumerStore()
	if err != nil {
		return nil, err
	}
	ctx, cancel := ps.dur.Ctx()
	defer cancel()
	stored, end, err := cs.Consumers(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("echopubsub: consumers of %q: %w", stream, err)
	}
	out := make([]ConsumerInfo, 0, len(stored))
	for _, c := range stored {
		info := ConsumerInfo{Name: c.Name, Cursor: c.Cursor, LastAck: c.Time}
		if t := ps.cons.active(stream, c.Name); t != nil {
			cursor, at := t.committedAt()
			if cursor > info.Cursor {
				info.Cursor, info.LastAck = cursor, at
			}
			info.SessionID = t.session
		}
		if end > info.Cursor {
			info.Lag = end - info.Cursor
		}
		out = append(out, info)
	}
	return out, nil
}

// DeleteConsumer forgets stream's consumer name: it holds no row any more,
// and a later WithConsumer(name) starts anew. Errors: ErrBadConsumerName,
// ErrConsumerBusy (a session of this node follows it), ErrNoConsumerStore,
// the store's. Deleting a name that does not exist does nothing.
func (ps *PubSub) DeleteConsumer(stream, name string) error {
	if err := store.CheckConsumerName(name); err != nil {
		return err
	}
	cs, err := ps.consumerStore()
	if err != nil {
		return err
	}
	if t := ps.cons.active(stream, name); t != nil {
		return fmt.Errorf("%w: consumer %q of %q, session %s", ErrConsumerBusy, name, stream, t.session)
	}
	// Under the writer's lock: a commit of the name queued before cannot
	// land after the delete and bring it back.
	ps.cons.wmu.Lock()
	defer ps.cons.wmu.Unlock()
	ps.cons.forget(stream, name)
	ctx, cancel := ps.dur.Ctx()
	defer cancel()
	if err := cs.DeleteConsumer(ctx, stream, name); err != nil {
		return fmt.Errorf("echopubsub: delete consumer %q of %q: %w", name, stream, err)
	}
	return nil
}

func (ps *PubSub) consumerStore() (store.ConsumerStore, error) {
	if ps.stopped() {
		return nil, ErrStopped
	}
	if ps.dur.Store == nil {
		return nil, fmt.Errorf("%w: no store (WithStore)", ErrNoStore)
	}
	cs, ok := ps.dur.Store.(store.ConsumerStore)
	if !ok {
		return nil, fmt.Errorf("%w: %T does not implement store.ConsumerStore", ErrNoConsumerStore, ps.dur.Store)
	}
	return cs, nil
}

// subscribeConsumer applies SessionSubscribe's consumer rules to spec:
// a WithConsumer is placed (placeConsumer); a subscription that had a
// name and is subscribed again without one keeps it, unless it asks for
// WithFrom. placed: a new name was claimed for spec.track.
func (ps *PubSub) subscribeConsumer(id, topic string, spec *subSpec, prev subSpec, already bool) (placed bool, err error) {
	if spec.consumerSet {
		err := ps.placeConsumer(id, topic, spec, prev, already)
		return err == nil && spec.track != prev.track, err
	}
	if already && prev.track != nil {
		if spec.catchUp {
			return false, fmt.Errorf("echopubsub: session %s follows %q as consumer %q: unsubscribe before WithFrom without it", id, topic, prev.track.name)
		}
		spec.consumer, spec.consumerSet, spec.track = prev.consumer, true, prev.track
	}
	return false, nil
}

// consumerAcked tells session id's consumers that deliveryID was acked.
func (ps *PubSub) consumerAcked(id string, deliveryID uint64) {
	s := ps.sess.engine.Get(id)
	if s == nil {
		return
	}
	for _, spec := range *s.Attached.(*sessionRec).subs.Load() {
		if spec.track != nil {
			spec.track.acked(deliveryID)
		}
	}
}

// releaseConsumers ends the claims of a closed session's subscriptions.
func (ps *PubSub) releaseConsumers(rec *sessionRec) {
	for _, spec := range *rec.subs.Load() {
		if spec.track != nil {
			ps.cons.release(spec.track)
		}
	}
}

// placeConsumer resolves spec's consumer for session id on topic (its
// checks, then where it starts) and claims the name; the caller releases
// it (consumerBook.release) when the subscription fails or ends.
// prev is the topic's current subscription of the session, if any.
func (ps *PubSub) placeConsumer(id, topic string, spec *subSpec, prev subSpec, already bool) error {
	name := spec.consumer
	if err := store.CheckConsumerName(name); err != nil {
		return err
	}
	if already && prev.track != nil {
		if prev.track.name != name {
			return fmt.Errorf("echopubsub: session %s follows %q as consumer %q: unsubscribe before naming it %q", id, topic, prev.track.name, name)
		}
		if spec.catchUp && spec.from != prev.track.resumeAt() {
			return fmt.Errorf("%w: consumer %q of %q resumes at %d, WithFrom(%d)", ErrConsumerFrom, name, topic, prev.track.resumeAt(), spec.from)
		}
		spec.track, spec.catchUp = prev.track, false // the options change; it goes on from where it is
		return nil
	}
	if already && prev.catchUp {
		return fmt.Errorf("echopubsub: session %s follows %q WithFrom: unsubscribe before naming it consumer %q", id, topic, name)
	}
	switch {
	case spec.class != ClassDurable:
		return fmt.Errorf("echopubsub: WithConsumer(%q) needs ClassDurable (its cursor moves on acks), got %s", name, spec.class)
	case !ps.dur.IsDurable(topic):
		return fmt.Errorf("%w: WithConsumer(%q) on %q", ErrNoStore, name, topic)
	}
	cs, err := ps.consumerStore()
	if err != nil {
		return err
	}
	ctx, cancel := ps.dur.Ctx()
	defer cancel()
	stored, end, err := cs.Consumers(ctx, topic)
	if err != nil {
		return fmt.Errorf("echopubsub: WithConsumer(%q) on %q: %w", name, topic, err)
	}
	t := &consumerTrack{book: ps.cons, stream: topic, name: name, session: id}
	if err := ps.cons.claim(t); err != nil {
		return err
	}
	found := false
	for _, c := range stored {
		if c.Name == name {
			t.committed, t.at, found = c.Cursor, c.Time, true
		}
	}
	t.committed = max(t.committed, ps.cons.pending(topic, name)) // a commit of an earlier session not yet written
	switch {
	case found && spec.catchUp && max(spec.from, 1) != t.resumeAt():
		ps.cons.release(t)
		return fmt.Errorf("%w: consumer %q of %q resumes at %d (committed %d), WithFrom(%d)", ErrConsumerFrom, name, topic, t.resumeAt(), t.committed, spec.from)
	case !found && spec.catchUp:
		t.committed = max(spec.from, 1) - 1
	case !found:
		t.committed = end // a new consumer begins with what is published from now on
	}
	if !found {
		t.at = time.Now()
		if err := cs.CommitConsumer(ctx, topic, name, t.committed); err != nil {
			ps.cons.release(t)
			return fmt.Errorf("echopubsub: WithConsumer(%q) on %q: %w", name, topic, err)
		}
	}
	t.top = t.committed
	spec.track, spec.catchUp, spec.from = t, true, t.resumeAt()
	return nil
}

// consumerBook is the pubsub's named consumers on this node: who follows
// each (one session per name), and the commits the store has not taken
// yet, written by one goroutine (run), started by Start and ended by Stop
// after the sessions, so that the last acks reach the store.
type consumerBook struct {
	ps *PubSub
	// tracked counts the subscriptions with a name: Ack looks for a
	// consumer only when it is not 0.
	tracked atomic.Int64

	named map[string]bool // Config.ConsumerMetrics
	// wmu is held by each flush, and by DeleteConsumer around its delete.
	wmu sync.Mutex

	mu     sync.Mutex
	byName map[consumerKey]*consumerTrack
	dirty  map[consumerKey]uint64 // the newest commit of each, not yet written
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

type consumerKey struct{ stream, name string }

func newConsumerBook(ps *PubSub) *consumerBook {
	b := &consumerBook{ps: ps, named: map[string]bool{}, byName: map[consumerKey]*consumerTrack{},
		dirty: map[consumerKey]uint64{}, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for _, n := range ps.cfg.ConsumerMetrics {
		b.named[n] = true
	}
	ps.rt.Metrics.SetConsumerUnacked(b.unacked)
	return b
}

// label is name's metric attribute: itself when Config.ConsumerMetrics
// lists it, else core.ConsumerOther (bounded cardinality).
func (b *consumerBook) label(name string) string {
	if b.named[name] {
		return name
	}
	return core.ConsumerOther
}

// unacked reports each followed consumer's rows handed over and not yet
// committed (the echopubsub.consumer.unacked gauge).
func (b *consumerBook) unacked(observe func(label string, n int64)) {
	b.mu.Lock()
	tracks := make([]*consumerTrack, 0, len(b.byName))
	for _, t := range b.byName {
		tracks = append(tracks, t)
	}
	b.mu.Unlock()
	for _, t := range tracks {
		t.mu.Lock()
		n := int64(t.top - t.committed)
		t.mu.Unlock()
		observe(b.label(t.name), n)
	}
}

// any reports whether a subscription of this node has a name (Ack looks
// for consumers only then). Safe on nil.
func (b *consumerBook) any() bool { return b != nil && b.tracked.Load() != 0 }

// claim makes t the name's follower on this node (ErrConsumerBusy: taken).
func (b *consumerBook) claim(t *consumerTrack) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := consumerKey{t.stream, t.name}
	if o := b.byName[k]; o != nil {
		return fmt.Errorf("%w: consumer %q of %q, session %s", ErrConsumerBusy, t.name, t.stream, o.session)
	}
	b.byName[k] = t
	b.tracked.Add(1)
	return nil
}

// release ends t's claim (its subscription failed, was unsubscribed, or
// its session closed). Its commits so far stay queued for the store.
func (b *consumerBook) release(t *consumerTrack) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := consumerKey{t.stream, t.name}
	if b.byName[k] == t {
		delete(b.byName, k)
		b.tracked.Add(-1)
	}
}

// active is the name's follower on this node (nil: none).
func (b *consumerBook) active(stream, name string) *consumerTrack {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.byName[consumerKey{stream, name}]
}

// pending is the name's commit not yet written (0: none).
func (b *consumerBook) pending(stream, name string) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dirty[consumerKey{stream, name}]
}

// forget drops the name's unwritten commit (DeleteConsumer).
func (b *consumerBook) forget(stream, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.dirty, consumerKey{stream, name})
}

// committed queues cursor as the name's commit and wakes the writer.
func (b *consumerBook) committed(stream, name string, cursor uint64) {
	b.mu.Lock()
	k := consumerKey{stream, name}
	b.dirty[k] = max(b.dirty[k], cursor)
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// consumerRetry is how long the writer waits after the store refused a
// commit before it tries again.
const consumerRetry = time.Second

// run writes queued commits until stop, then writes what is left once.
func (b *consumerBook) run(cs store.ConsumerStore) {
	defer close(b.done)
	var retry <-chan time.Time
	for {
		select {
		case <-b.kick:
		case <-retry:
		case <-b.stop:
			b.flush(cs)
			return
		}
		retry = nil
		if !b.flush(cs) {
			retry = time.After(consumerRetry)
		}
	}
}

// flush writes every queued commit; false: one failed (it stays queued).
func (b *consumerBook) flush(cs store.ConsumerStore) bool {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.mu.Lock()
	batch := b.dirty
	b.dirty = map[consumerKey]uint64{}
	b.mu.Unlock()
	keys := make([]consumerKey, 0, len(batch))
	for k := range batch {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].stream+"\x00"+keys[i].name < keys[j].stream+"\x00"+keys[j].name })
	ok := true
	for _, k := range keys {
		ctx, cancel := b.ps.dur.Ctx()
		err := cs.CommitConsumer(ctx, k.stream, k.name, batch[k])
		cancel()
		if err != nil {
			ok = false
			b.ps.rt.Log.Warn().Err(err).Str("stream", k.stream).Str("consumer", k.name).Uint64("cursor", batch[k]).
				Msg("durable consumer: the store did not take a commit; trying again")
			b.mu.Lock()
			b.dirty[k] = max(b.dirty[k], batch[k])
			b.mu.Unlock()
			continue
		}
		b.ps.rt.Metrics.ConsumerCommitted(b.label(k.name))
	}
	return ok
}

// close ends run after its last flush (Stop, after the sessions). Safe
// when run never started.
func (b *consumerBook) close(started bool) {
	close(b.stop)
	if started {
		<-b.done
	}
}

// consumerTrack is one named subscription's acks: the envelopes it was
// handed (delivery id, cursor), in cursor order, from the oldest not yet
// committed. An ack marks its entry; the committed cursor moves over the
// acked entries at the head. Gap rows and a truncation enter as passed.
// The session actor adds entries (under the session's lock, before the
// owner can see the envelope), Ack marks them: mu orders the two.
type consumerTrack struct {
	book                  *consumerBook
	stream, name, session string

	mu        sync.Mutex
	q         []trackEntry
	top       uint64 // the highest cursor entered
	committed uint64
	at        time.Time // when committed last moved
}

// trackEntry is one envelope (id > 0) or a passed cursor (a gap row, a
// truncation: acked from the start). key is id, or for a passed cursor the
// id before it, so keys never go down along q (Ack searches by key).
type trackEntry struct {
	key, id, cursor uint64
	acked           bool
}

func (t *consumerTrack) resumeAt() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.committed + 1
}

func (t *consumerTrack) committedAt() (uint64, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.committed, t.at
}

// delivered enters envelope id at cursor (the session actor, under the
// session's lock, before the owner gets it).
func (t *consumerTrack) delivered(id, cursor uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cursor <= t.top {
		return // not after what was entered: the stream's order was not kept; nothing to commit past
	}
	t.top = cursor
	t.q = append(t.q, trackEntry{key: id, id: id, cursor: cursor})
}

// passed enters cursor as passed (a gap row, or the last row a
// truncation removed) and commits what it completes.
func (t *consumerTrack) passed(cursor uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cursor <= t.top {
		return
	}
	var key uint64
	if n := len(t.q); n > 0 {
		key = t.q[n-1].key
	}
	t.top = cursor
	t.q = append(t.q, trackEntry{key: key, cursor: cursor, acked: true})
	t.advance()
}

// acked marks delivery id (Ack, AckMany, AckFirst released it) and
// commits what it completes; an id it never entered changes nothing.
func (t *consumerTrack) acked(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := sort.Search(len(t.q), func(i int) bool { return t.q[i].key >= id })
	if i == len(t.q) || t.q[i].id != id {
		return
	}
	t.q[i].acked = true
	t.advance()
}

// advance commits over the acked entries at the head (mu held).
func (t *consumerTrack) advance() {
	n := 0
	for n < len(t.q) && t.q[n].acked {
		n++
	}
	if n == 0 {
		return
	}
	t.committed, t.at = t.q[n-1].cursor, time.Now()
	t.q = append(t.q[:0], t.q[n:]...)
	t.book.committed(t.stream, t.name, t.committed)
}
