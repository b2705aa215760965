package echopubsub

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/echopubsub/echopubsub/internal/catchup"
	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/internal/session"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/store"
)

// A WithFrom subscription (a follow) is one session's position in one
// durable stream. The session actor owns it. The stored/live merge (what
// is delivered, held aside, dropped as a duplicate, read from the store,
// and where the handover to live and its *CaughtUp go) is m, a pure
// catchup.Merge: see package internal/catchup. The follow adds what the
// merge leaves to its owner: the reads, the timers and the session's room.
//
//   - Reading: the actor reads pages from m.Next() and hands their rows to
//     the session through its pressure rules (session.Engine.Catch: never
//     above SoftQueue; a row that does not fit waits for acks, nothing is
//     skipped).
//   - Live: a live envelope above Next waits aside (up to catchUpAhead)
//     while a hole is open; a hole still open after holeWait (a gap row, a
//     row lost on the way), or too many envelopes aside, makes it read
//     from the store from Next. Most often the hole is another producer's
//     row still on its way (producers batch independently, so live order
//     across producers is not cursor order).
//
// Gap rows become *StreamGap and rows the store no longer keeps one
// *StreamTruncated (the rule is store.Truncation), in cursor
// order with the rows. The first time a follow goes live it hands the
// session one *CaughtUp, behind the last row it read and before the first
// live envelope; a later reading (a hole, a session out of room) goes live
// again without one. An envelope without a cursor (a DirectBroadcast,
// which is not stored) is delivered as it comes.
type follow struct {
	topic   string
	gen     uint64 // the subscription it belongs to (subSpec.gen)
	context map[string]string
	m       *catchup.Merge[*Envelope]
	// hole is the timer of the wait for the hole at m.Next() to fill,
	// armed when an envelope first goes aside.
	hole  *time.Timer
	holeN *catchUpHole // the message hole sends: an older one is stale
	// retry is the pending timer of a read that failed or came too early;
	// backoff its next delay, reset when a row or notice is handed over.
	retry   *time.Timer
	backoff time.Duration
	// track is the subscription's named consumer (WithConsumer; nil:
	// none): every envelope handed over and every gap row and truncation
	// passed enters it, in cursor order (passCaught).
	track *consumerTrack
	// roomWait: a row was NoRoom (the session at SoftQueue with RoomWait
	// 0): the follow reads again when the engine says acks made room
	// (sessionRoom), not after a timer.
	roomWait bool
	// liveSeen: a live envelope of the stream with a store cursor reached
	// the session actor (admit): the node's store held the stream before
	// anything that comes after it in the actor's mailbox (storeTells).
	liveSeen bool
}

// CaughtUp tells a session that its WithFrom subscription to Stream is
// live: the catch-up handed over every row the store held from the
// subscription's cursor up to Cursor (the last row it read, a message or
// a gap row; WithFrom's cursor - 1 when there was none), and what comes
// next is the live stream, from Cursor + 1 on. It arrives once per
// WithFrom subscription (subscribing again WithFrom starts a new
// catch-up, with its own), in order with the envelopes: after the last
// one read from the store and before the first live one. Later readings
// from the store (a live envelope ahead of a hole, an owner out of room)
// are the live stream's own repair and send none. A notice, not a
// delivery: nothing to ack.
type CaughtUp struct {
	SessionID string
	Stream    string
	Cursor    uint64
}

// paused reports whether f waits (for its retry timer, or for room)
// before it reads again.
func (f *follow) paused() bool { return f.retry != nil || f.roomWait }

// followGen numbers WithFrom subscriptions, so that the session actor
// tells a new one (a catch-up from a new cursor) from the one it follows.
var followGen atomic.Uint64

// catchUpAhead is the most live envelopes a follow keeps aside while a
// hole waits to fill; one more and it reads from the store instead.
const catchUpAhead = 256

// holeSlack is what holeWait adds to the pubsub's BatchInterval (the
// longest a producer holds a message back, so how far live order can
// trail cursor order) before a hole is read from the store.
const holeSlack = 50 * time.Millisecond

// catchUpPage is the most rows one catch-up read asks the store for; the
// actor reads the next page once the previous one is handed over.
const catchUpPage = 256

// Catch-up retry delays: a failed read, one that did not yet see a row a
// live envelope claimed, or a row refused for a full reservation table, is
// tried again after a pause that doubles while nothing is handed over. (A
// session out of room is not a guess: its acks wake the catch-up.)
const (
	catchUpRetryMin = 10 * time.Millisecond
	catchUpRetryMax = time.Second
)

// caught is a catch-up row or notice (row true) or a live envelope of a
// followed stream, as the session actor holds it until the engine takes it.
type caught struct {
	f      *follow
	row    bool
	cursor uint64      // the row's (a StreamTruncated: the cursor it was read from)
	env    *Envelope   // a message
	notice interface{} // *StreamGap, *StreamTruncated, *CaughtUp
}

// catchUpStart makes the session actor begin following topic's subscription
// gen (sent by SessionSubscribe; the first live delivery does the same).
type catchUpStart struct {
	topic string
	gen   uint64
}

// catchUpStep reads the next page of a reading follow.
type catchUpStep struct{}

// catchUpRetry ends a follow's retry pause.
type catchUpRetry struct{ f *follow }

// catchUpHole: a follow's hole stayed open for holeWait.
type catchUpHole struct {
	f    *follow
	next uint64 // the hole's first cursor
}

// following returns topic's follow for subscription spec, creating or
// replacing it for a new WithFrom subscription; nil when spec has none.
func (a *sessionActor) following(topic string, spec subSpec) *follow {
	f := a.follows[topic]
	if f != nil && (!spec.catchUp || f.gen != spec.gen) {
		a.unfollow(f)
		f = nil
	}
	if f == nil && spec.catchUp {
		// spec.from was checked by SessionSubscribe.
		f = &follow{topic: topic, gen: spec.gen, context: spec.context, track: spec.track,
			m: catchup.New[*Envelope](plant.ResumeFrom(max(spec.from, 1)), catchUpAhead)}
		a.follows[topic] = f
		a.pump()
	}
	return f
}

func (a *sessionActor) unfollow(f *follow) {
	if f.retry != nil {
		f.retry.Stop()
	}
	f.stopHole()
	if a.follows[f.topic] == f {
		delete(a.follows, f.topic)
	}
}

// current reports whether f's subscription is still the one
// it follows (the session may have unsubscribed or subscribed anew).
func (a *sessionActor) current(f *follow) bool {
	spec, ok := (*a.rec.subs.Load())[f.topic]
	if !ok || !spec.catchUp || spec.gen != f.gen {
		a.unfollow(f)
		return false
	}
	return a.follows[f.topic] == f
}

// admit asks f's merge about a live envelope with cursor c (before the
// actor builds it): catchup.Deliver or catchup.Aside, it is to be built
// and passed to followed; anything else drops it.
func (a *sessionActor) admit(f *follow, c uint64) catchup.Verdict {
	f.liveSeen = true
	v := f.m.Live(c)
	if v == catchup.Read { // too many aside: the reading reaches them all
		f.stopHole()
		a.pump()
	}
	return v
}

// followed hands on a live envelope admit let through: v says whether it
// is next (then what it lets out of aside follows it) or waits aside until
// the hole before it fills.
func (a *sessionActor) followed(f *follow, env *Envelope, v catchup.Verdict) {
	if v == catchup.Aside {
		f.m.Aside(env.Cursor, env)
		if f.hole == nil {
			a.armHole(f)
		}
		return
	}
	a.hand(&caught{f: f, cursor: env.Cursor, env: env})
	for _, e := range f.released() {
		a.hand(&caught{f: f, cursor: e.Cursor, env: e})
	}
}

// armHole starts the wait for the hole at f.m.Next() to fill.
func (a *sessionActor) armHole(f *follow) {
	self, root, hole := a.self, a.ps.rt.System.Root, &catchUpHole{f: f, next: f.m.Next()}
	f.holeN = hole
	f.hole = time.AfterFunc(a.ps.rt.Cfg.BatchInterval+holeSlack, func() { root.Send(self, hole) })
}

// released returns the envelopes aside that are now next, in cursor
// order; the hole's wait ends with the last.
func (f *follow) released() []*Envelope {
	out := f.m.Released()
	if f.m.Ahead() == 0 {
		f.stopHole()
	}
	return out
}

// holeStayed: the hole at h.next did not fill in time; read it.
func (a *sessionActor) holeStayed(h *catchUpHole) {
	f := h.f
	if f.holeN != h || !a.current(f) || f.m.Reading() {
		return // stale: the hole filled, or a newer wait replaced this one
	}
	f.hole, f.holeN = nil, nil
	if f.m.HoleStayed(h.next) { // that hole filled, a newer one is open: give it its time
		a.armHole(f)
		return
	}
	a.pump() // the merge reads from next
}

// stopHole ends the wait for a hole (it filled, or the merge reads).
func (f *follow) stopHole() {
	if f.hole != nil {
		f.hole.Stop()
		f.hole, f.holeN = nil, nil
	}
}

// storeTells reports whether a CursorExpired of this node is the store's
// to tell this session, which then does not get it: every subscription of
// the session follows its stream (WithFrom), and the store holds what the
// node missed of each, as rows or as gap rows. A shared store holds every
// row (the publishing node appended it before it was sent); a node-local
// store that records positions (store.LocalStore) wrote a gap row into
// every stream it holds before the worker told the notice, unless its
// writes are failing (the gap row comes later: the session is told now);
// a followed stream was held then if a live envelope of it reached this
// actor before the notice (the worker stores a batch before it delivers
// it, and marks the gap before it tells): otherwise the store may never
// have held it, so it has no gap row, and the session is told (rows read
// from the store prove nothing: they may have been appended after the
// gap row). A follow whose catchUpStart is still on its way is made here,
// as a live envelope would. The rows then reach the session in cursor
// order through its follows (readFollows), with StreamGap and
// StreamTruncated where the store has no row. Only a notice whose every
// entry a store keeps (ce.AllStored: the producer marks the writes no
// store keeps, a DirectBroadcast to this node or a request to a session
// here, and says whether the lost range held one) is withheld: one that
// held such a write, or one of an older node that does not say, is handed
// to the session.
func (a *sessionActor) storeTells(ce *messages.CursorExpired) bool {
	d := a.ps.dur
	if !ce.AllStored || d == nil || d.Store == nil {
		return false
	}
	shared := d.Store.Shared()
	if !shared && (d.Local() == nil || d.Failing()) {
		return false
	}
	subs := *a.rec.subs.Load()
	for _, spec := range subs {
		if !spec.catchUp {
			return false
		}
	}
	for topic, spec := range subs {
		if f := a.following(topic, spec); !shared && !f.liveSeen {
			return false
		}
	}
	return len(subs) > 0
}

// catchUpRead makes a session actor's follows read their streams
// (readAllFollows).
type catchUpRead struct{}

// readAllFollows makes every session's WithFrom subscriptions read their
// streams from where they are (durability.gapWritten).
func (ps *PubSub) readAllFollows() {
	ps.sess.engine.Each(func(s *session.Session) {
		if rec, ok := s.Attached.(*sessionRec); ok {
			if pid := rec.actor.Load(); pid != nil {
				ps.rt.System.Root.Send(pid, &catchUpRead{})
			}
		}
	})
}

// readFollows makes every live follow read from the store, so that what
// the node missed (rows of a shared store, a node-local store's gap row)
// reaches the session now, not when the next live row shows the hole.
func (a *sessionActor) readFollows() {
	for _, f := range a.follows {
		if !f.m.Reading() {
			f.stopHole()
			f.m.Read() // what is aside is dropped: the reading reaches it
		}
	}
	a.pump()
}

// pump queues one catchUpStep when a follow is reading and nothing is
// held (a held row waits for room: the next page is read after it).
func (a *sessionActor) pump() {
	if a.stepQueued || len(a.held) > 0 {
		return
	}
	for _, f := range a.follows {
		if f.m.Reading() && !f.paused() {
			a.stepQueued = true
			a.ps.rt.System.Root.Send(a.self, &catchUpStep{})
			return
		}
	}
}

// step reads one page for a reading follow and hands it over.
func (a *sessionActor) step() {
	a.stepQueued = false
	if len(a.held) > 0 {
		return
	}
	var f *follow
	for _, g := range a.follows {
		if g.m.Reading() && !g.paused() && a.current(g) {
			f = g
			break
		}
	}
	if f == nil {
		return
	}
	defer a.pump()
	ctx, cancel := a.ps.dur.Ctx()
	from := f.m.Next()
	rows, next, err := a.ps.dur.Store.Read(ctx, f.topic, from, catchUpPage)
	cancel()
	if err != nil {
		ev := a.ps.rt.Log.Warn()
		if errors.Is(err, ErrCursorBeyondEnd) {
			ev = a.ps.rt.Log.Error() // the store was replaced under the subscription
		}
		ev.Err(err).Str("session", a.s.ID()).Str("stream", f.topic).Uint64("from", from).
			Msg("session catch-up: store read failed: trying again")
		a.pause(f)
		return
	}
	// next moves past each row before it is handed: a row the engine
	// takes at once must find itself below next (see passCaught).
	if first, cut := store.Truncation(from, rows, next); cut {
		f.m.Truncated(first)
		if !plant.DropTruncatedNotice() {
			a.hand(&caught{f: f, row: true, cursor: from, notice: &StreamTruncated{SessionID: a.s.ID(), Stream: f.topic,
				From: from, FirstKept: first}})
		}
	}
	for i := range rows {
		r := &rows[i]
		f.m.Row(r.Cursor)
		if r.Kind == RecordGap {
			if plant.DropGapNotice() {
				continue
			}
			a.hand(&caught{f: f, row: true, cursor: r.Cursor, notice: gapNotice(a.s.ID(), f.topic, r)})
		} else {
			if plant.SkipCatchUpRow() {
				continue
			}
			env := a.ps.replayEnvelope(a.s.ID(), f.topic, a.rec.format, r)
			env.Context = f.context
			a.hand(&caught{f: f, row: true, cursor: r.Cursor, env: env})
		}
		if f.paused() { // parked (passCaught): the rest is read again after the pause
			return
		}
	}
	if f.paused() {
		return
	}
	claimed := f.m.Claimed()
	end, mark, owed := f.m.Page(next, len(rows) < catchUpPage, f.backoff < catchUpRetryMax)
	switch end {
	case catchup.More:
		return
	case catchup.Wait:
		a.pause(f) // a live envelope named a row this read did not see yet
		return
	case catchup.LiveUnseen:
		a.ps.rt.Log.Error().Str("session", a.s.ID()).Str("stream", f.topic).Uint64("claimed", claimed).
			Uint64("next", f.m.Next()).
			Msg("session catch-up: a live envelope named a row the store does not hold; going live")
	}
	f.backoff = 0
	if owed {
		a.hand(&caught{f: f, row: true, cursor: mark, notice: &CaughtUp{SessionID: a.s.ID(), Stream: f.topic, Cursor: mark}})
	}
}

// pause retries f's reading after its backoff.
func (a *sessionActor) pause(f *follow) {
	f.backoff = min(max(2*f.backoff, catchUpRetryMin), catchUpRetryMax)
	self, root := a.self, a.ps.rt.System.Root
	f.retry = time.AfterFunc(f.backoff, func() { root.Send(self, &catchUpRetry{f: f}) })
}

// passCaught hands a catch-up row or a followed live envelope to the
// engine; false: held, pass it again after room.
func (a *sessionActor) passCaught(c *caught) bool {
	if !a.current(c.f) {
		return true // the subscription it belonged to is gone
	}
	if c.f.m.Stale(c.cursor, c.row) {
		// a live envelope at or past where a reading begins (it reaches
		// it), or a row read before the follow went back (parked)
		return true
	}
	if c.notice != nil {
		if _, ok := c.notice.(*CaughtUp); ok {
			if !c.f.m.TakeCaughtUp() {
				return true
			}
		}
		if a.ps.sess.engine.Notify(a.s, c.notice) && c.f.track != nil {
			switch n := c.notice.(type) {
			case *StreamGap: // nothing to ack: the consumer has passed it
				c.f.track.passed(n.Cursor)
			case *StreamTruncated: // the rows below FirstKept are gone: passed
				c.f.track.passed(n.FirstKept - 1)
			}
		}
		c.f.backoff = 0
		return true
	}
	build := func(id uint64) interface{} {
		c.env.DeliveryID = id
		if c.f.track != nil { // entered before the owner can ack it (build runs before the send)
			c.f.track.delivered(id, c.env.Cursor)
		}
		return c.env
	}
	if !c.row {
		switch a.ps.sess.engine.Pace(a.s, true, build) {
		case session.Held:
			return false
		case session.Refused: // the node's table is full: the store keeps it for later
			c.f.m.Rewind(c.env.Cursor)
			c.f.stopHole()
			a.pump()
		}
		return true
	}
	switch a.ps.sess.engine.Catch(a.s, build) {
	case session.Delivered:
		c.f.backoff = 0
	case session.Held:
		return false
	case session.NoRoom:
		// Without RoomWait the session is at SoftQueue: the follow goes
		// back to this row and reads it again when acks made room (the
		// engine's sessionRoom); the rows held after it are passed over
		// (cursor >= next), and the session's other topics go on
		// meanwhile.
		c.f.m.Rewind(c.cursor) // reading: nothing is aside
		c.f.stopHole()
		c.f.roomWait = true
	case session.Refused:
		// The node's reservation table is full: as for NoRoom, but other
		// sessions' acks make room there, so it reads again after a pause.
		c.f.m.Rewind(c.cursor)
		c.f.stopHole()
		a.pause(c.f)
	}
	return true
}

// roomMade: the engine says the session has room (sessionRoom); a follow
// that waits for it reads again.
func (a *sessionActor) roomMade() {
	for _, f := range a.follows {
		f.roomWait = false
	}
}

// stopFollowing stops every follow's timers (the actor is stopping).
func (a *sessionActor) stopFollowing() {
	for _, f := range a.follows {
		a.unfollow(f)
	}
}
