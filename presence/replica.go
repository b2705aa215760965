package presence

import (
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/presence/internal/wire"
)

// replicaState is what a tracker knows of another node's presences.
type replicaState int

const (
	// live: the replica follows the node's stream change by change.
	live replicaState = iota
	// syncing: the replica asked the node for its whole state and ignores
	// the node's changes until the state arrives (it holds all of them).
	syncing
	// down: the node left (Goodbye) or was silent for DownAfter; the
	// replica holds none of its presences.
	down
)

func (s replicaState) String() string {
	return [...]string{"live", "syncing", "down"}[s]
}

// replica is one other node's presences as this tracker knows them.
type replica struct {
	node     string
	inc, seq uint64 // the node's tracker incarnation; its last change applied
	state    replicaState
	heard    time.Time // last message from the node
	asked    time.Time // last SyncRequest sent (syncing)
	since    time.Time // when it started syncing
	absent   bool      // the membership no longer lists the node
	entries  map[string]*entry
	part     *parts // the state being received, part by part
}

// parts is a node's state arriving in Snapshot parts.
type parts struct {
	inc, seq uint64
	next     uint32
	got      []*wire.Presence
}

// replicas is every other node's replica: the rules for following a node's
// presence stream live here, with no actor, so that they can be tested
// alone. The tracker actor owns it.
type replicas struct {
	v     *view
	nodes map[string]*replica
	log   zerolog.Logger
	// skipChange, when set (planted defects only), makes handle drop a
	// change while advancing past it: a lost Diff the checks must catch.
	skipChange func() bool
}

func newReplicas(v *view, log zerolog.Logger) *replicas {
	return &replicas{v: v, nodes: map[string]*replica{}, log: log}
}

// incarnation is the sender's tracker incarnation of a wire message (0:
// none, a SyncRequest).
func incarnation(m proto.Message) uint64 {
	switch m := m.(type) {
	case *wire.Change:
		return m.Incarnation
	case *wire.Heartbeat:
		return m.Incarnation
	case *wire.Goodbye:
		return m.Incarnation
	case *wire.Snapshot:
		return m.Incarnation
	case *wire.SyncRequest:
		return m.Incarnation
	}
	return 0
}

// handle applies one message of node's presence stream, recording what
// changed in d. It reports whether the node must be asked for its whole
// state. The caller holds the view's lock.
func (rs *replicas) handle(node string, m proto.Message, now time.Time, d diffs) (ask bool) {
	r := rs.nodes[node]
	if r == nil {
		r = &replica{node: node, state: down, entries: map[string]*entry{}}
		rs.nodes[node] = r
	}
	r.heard = now
	if inc := incarnation(m); inc != r.inc {
		// A tracker we have not heard from yet, or a new one on that node
		// (restarted): whatever the old one held is gone. The new one starts
		// at seq 0; a later seq than the next one tells a gap below.
		rs.drop(r, d)
		r.inc, r.seq, r.state, r.part = inc, 0, live, nil
	} else if r.state == down {
		switch m.(type) {
		case *wire.Goodbye:
			return false
		case *wire.Snapshot:
		default:
			rs.log.Info().Str("peer", node).Msg("presence: node is back: asking for its state")
			return rs.resync(r, now)
		}
		r.state = syncing // the state it sends replaces what it had
	}
	switch m := m.(type) {
	case *wire.Change:
		return rs.change(r, m, now, d)
	case *wire.Heartbeat:
		if r.state == live && m.Seq > r.seq {
			rs.log.Warn().Str("peer", node).Uint64("seq", r.seq).Uint64("heartbeat_seq", m.Seq).
				Msg("presence: heartbeat names a change never received: asking for the node's state")
			return rs.resync(r, now)
		}
	case *wire.Goodbye:
		rs.drop(r, d)
		r.state, r.seq, r.part = down, m.Seq, nil
	case *wire.Snapshot:
		return rs.snapshot(r, m, now, d)
	}
	return false
}

// change applies a Change that follows the last one, ignores one already
// applied, and asks for the node's state when one is missing.
func (rs *replicas) change(r *replica, m *wire.Change, now time.Time, d diffs) bool {
	switch {
	case r.state != live || m.Seq <= r.seq:
		return false // syncing: the state will hold it; or a redelivery
	case m.Seq > r.seq+1:
		rs.log.Warn().Str("peer", r.node).Uint64("seq", r.seq).Uint64("got_seq", m.Seq).
			Msg("presence: gap in a node's changes: asking for its state")
		return rs.resync(r, now)
	}
	r.seq = m.Seq
	if rs.skipChange != nil && rs.skipChange() {
		return false
	}
	for _, ref := range m.Leaves {
		if e := r.entries[ref]; e != nil {
			delete(r.entries, ref)
			rs.v.remove(e, d)
		}
	}
	for _, p := range m.Joins {
		if e := newEntry(r.node, p); e != nil && r.entries[e.ref] == nil {
			r.entries[e.ref] = e
			rs.v.add(e, d)
		}
	}
	return false
}

// snapshot collects a node's state part by part and, at the last part,
// replaces what the replica holds with it: the Diff is what differs.
func (rs *replicas) snapshot(r *replica, m *wire.Snapshot, now time.Time, d diffs) bool {
	if m.Part == 0 {
		r.part = &parts{inc: m.Incarnation, seq: m.Seq}
	}
	p := r.part
	if p == nil || p.inc != m.Incarnation || p.seq != m.Seq || p.next != m.Part {
		r.part = nil
		rs.log.Warn().Str("peer", r.node).Uint32("part", m.Part).Msg("presence: a part of a node's state is missing: asking again")
		return rs.resync(r, now)
	}
	p.got = append(p.got, m.Presences...)
	p.next++
	if !m.Last {
		return false
	}
	r.part = nil
	if r.state == live && m.Seq < r.seq {
		return false // older than what the replica follows (cannot happen in one ordered stream)
	}
	fresh := make(map[string]*entry, len(p.got))
	for _, pr := range p.got {
		if e := newEntry(r.node, pr); e != nil {
			fresh[e.ref] = e
		}
	}
	for ref, e := range r.entries {
		if fresh[ref] == nil {
			delete(r.entries, ref)
			rs.v.remove(e, d)
		}
	}
	for ref, e := range fresh {
		if r.entries[ref] == nil {
			r.entries[ref] = e
			rs.v.add(e, d)
		}
	}
	if r.state == syncing {
		rs.log.Info().Str("peer", r.node).Int("presences", len(fresh)).Msg("presence: resynced a node's state")
	}
	r.seq, r.state = m.Seq, live
	return false
}

// expired: the pubsub told this node that it lost messages from node (the
// node's presence stream among them): ask it for its whole state.
func (rs *replicas) expired(node string, now time.Time) bool {
	r := rs.nodes[node]
	if r == nil {
		r = &replica{node: node, state: down, entries: map[string]*entry{}, heard: now}
		rs.nodes[node] = r
	}
	rs.log.Warn().Str("peer", node).Msg("presence: messages from a node were lost: asking for its state")
	return rs.resync(r, now)
}

func (rs *replicas) resync(r *replica, now time.Time) bool {
	if r.state != syncing {
		r.since = now
	}
	r.state, r.asked, r.part = syncing, now, nil
	return true
}

// check applies the deadlines: a node silent for downAfter is down (its
// presences leave); a node asked for its state retryAfter ago is asked
// again (returned in ask), and one asked for downAfter without an answer
// has its presences leave.
func (rs *replicas) check(now time.Time, downAfter, retryAfter time.Duration, d diffs) (ask []string) {
	for node, r := range rs.nodes {
		if r.state == down {
			continue
		}
		if now.Sub(r.heard) >= downAfter {
			rs.log.Warn().Str("peer", node).Int("presences", len(r.entries)).Dur("silent_ms", now.Sub(r.heard)).
				Msg("presence: node silent for DownAfter: its presences leave")
			rs.drop(r, d)
			r.state, r.part = down, nil
			continue
		}
		if r.state != syncing {
			continue
		}
		if len(r.entries) > 0 && now.Sub(r.since) >= downAfter {
			// Asked for DownAfter and no state came (each answer lost, or
			// too large): what the replica holds can no longer be vouched for.
			rs.log.Warn().Str("peer", node).Int("presences", len(r.entries)).Dur("syncing_ms", now.Sub(r.since)).
				Msg("presence: no state from a node for DownAfter: its presences leave until it comes")
			rs.drop(r, d)
		}
		if now.Sub(r.asked) >= retryAfter {
			r.asked = now
			ask = append(ask, node)
		}
	}
	return ask
}

// drop removes every presence the replica holds.
func (rs *replicas) drop(r *replica, d diffs) {
	for ref, e := range r.entries {
		delete(r.entries, ref)
		rs.v.remove(e, d)
	}
}

// newEntry is a peer's presence as an entry, or nil when it is malformed
// (no ref, topic or key: logged by nobody, since a well-behaved peer never
// sends one and a decoded proto string is always UTF-8).
func newEntry(node string, p *wire.Presence) *entry {
	if p.Ref == "" || p.Topic == "" || p.Key == "" {
		return nil
	}
	return &entry{node: node, topic: p.Topic, key: p.Key, ref: p.Ref, meta: p.Meta}
}

// left applies the membership: a node it stopped listing (absent in every
// pool group's view) is down at once, its presences leave. Only the change
// counts: a node that stays absent is not dropped again each time.
func (rs *replicas) left(absent map[string]bool, d diffs) {
	for node, r := range rs.nodes {
		was := r.absent
		r.absent = absent[node]
		if r.absent && !was && r.state != down {
			rs.log.Warn().Str("peer", node).Int("presences", len(r.entries)).
				Msg("presence: node left the membership: its presences leave")
			rs.drop(r, d)
			r.state, r.part = down, nil
		}
	}
}
