package presence

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/presence/internal/wire"
)

// The tracker actor's requests; each is answered with a *reply.
type (
	startReq struct{}
	stopReq  struct{}
	trackReq struct {
		pid        *actor.PID
		topic, key string
		meta       map[string]string
	}
	untrackReq struct {
		pid        *actor.PID
		topic, key string
	}
	updateReq    trackReq
	subscribeReq struct {
		pid   *actor.PID
		topic string
		off   bool
	}
	reply struct{ err error }
	tick  struct{}
	// absentNodes is a look at the membership: the nodes it no longer
	// lists (nil: Stats did not answer in time).
	absentNodes struct{ nodes map[string]bool }
)

// local is a presence this node tracks.
type local struct {
	e   *entry
	pid *actor.PID
}

// trackKey is what a pid may track once.
type trackKey struct{ pid, topic, key string }

func pidKey(p *actor.PID) string { return p.Address + "/" + p.Id }

// trackerActor owns the tracker's state: this node's presences, the
// replicas of the others, the subscribers. Only it writes the view.
type trackerActor struct {
	t        *Tracker
	inc      uint64
	seq      uint64                       // last change sent on the stream
	refs     uint64                       // refs handed out
	mine     map[string]*local            // ref -> presence
	tracked  map[trackKey]*local          // what each pid tracks
	byPID    map[string]map[string]*local // pid -> ref -> presence
	subs     map[string]map[string]*actor.PID
	watched  map[string]bool
	rs       *replicas
	self     *actor.PID
	sched    *scheduler.TimerScheduler
	cancel   scheduler.CancelFunc
	lastBeat time.Time
	lastSeen time.Time // last look at the membership
	looking  bool      // a look is under way
	stopping bool
}

func newTrackerActor(t *Tracker, inc uint64) *trackerActor {
	a := &trackerActor{
		t: t, inc: inc,
		mine: map[string]*local{}, tracked: map[trackKey]*local{}, byPID: map[string]map[string]*local{},
		subs: map[string]map[string]*actor.PID{}, watched: map[string]bool{},
		rs: newReplicas(t.v, t.log),
	}
	a.rs.skipChange = plantedSkipChange()
	return a
}

func (a *trackerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.self = ctx.Self()
		a.sched = scheduler.NewTimerScheduler(ctx.ActorSystem().Root)
		a.cancel = a.sched.SendRepeatedly(a.t.cfg.tick(), a.t.cfg.tick(), ctx.Self(), &tick{})
	case *actor.Stopping:
		if a.cancel != nil {
			a.cancel()
		}
		_ = a.t.ps.Unsubscribe(a.self, a.t.cfg.Topic)
	case *actor.Stopped:
		close(a.t.done)
	case *startReq:
		ctx.Respond(&reply{a.start()})
	case *stopReq:
		ctx.Respond(&reply{a.stop()})
	case *trackReq:
		ctx.Respond(&reply{a.track(ctx, m)})
	case *untrackReq:
		ctx.Respond(&reply{a.untrack(m)})
	case *updateReq:
		ctx.Respond(&reply{a.update(m)})
	case *subscribeReq:
		a.subscribe(ctx, m)
		ctx.Respond(&reply{})
	case *actor.Terminated:
		a.terminated(m.Who)
	case *tick:
		a.tick()
	case *absentNodes:
		a.membership(m)
	case *messages.Delivery:
		a.delivery(m)
	case *messages.CursorExpired:
		if m.Node != a.t.ps.NodeName() { // this node's own stream is not followed: its tracker is the source
			a.ask(a.rs.expired(m.Node, time.Now()), m.Node)
		}
	case *messages.BackPressure:
		// The subscription is unbounded: this cannot happen. Were it to,
		// messages from some node were dropped: resync with every node.
		a.t.log.Error().Str("state", m.State.String()).Msg("presence: tracker told back-pressure: resyncing with every node")
		for node := range a.rs.nodes {
			a.ask(a.rs.expired(node, time.Now()), node)
		}
	}
}

// start subscribes to the stream and asks every node for its state.
func (a *trackerActor) start() error {
	ps := a.t.ps
	if err := ps.Subscribe(a.self, a.t.cfg.Topic, echopubsub.WithMetadata(), echopubsub.WithUnboundedQueue()); err != nil {
		return err
	}
	a.lastBeat = time.Now()
	return ps.BroadcastFrom(a.self, a.t.cfg.Topic, &wire.SyncRequest{Incarnation: a.inc})
}

// stop says Goodbye: every other node drops this node's presences.
func (a *trackerActor) stop() error {
	a.stopping = true
	return a.t.ps.BroadcastFrom(a.self, a.t.cfg.Topic, &wire.Goodbye{Incarnation: a.inc, Seq: a.seq})
}

// send puts a change on the stream. Nothing is applied before it is
// queued, so a node never holds a presence its peers will not hear of. It
// waits for room in a full producer at most half of CallTimeout, so that a
// caller is answered, yes or no, before its own wait ends (this node's
// copy of the change comes back to the tracker, which skips its own).
func (a *trackerActor) send(c *wire.Change) error {
	c.Incarnation, c.Seq = a.inc, a.seq+1
	ctx, cancel := context.WithTimeout(context.Background(), a.t.cfg.CallTimeout/2)
	defer cancel()
	if err := a.t.ps.BroadcastContext(ctx, a.self, a.t.cfg.Topic, c); err != nil {
		return err
	}
	a.seq++
	return nil
}

func (a *trackerActor) track(ctx actor.Context, m *trackReq) error {
	k := trackKey{pidKey(m.pid), m.topic, m.key}
	if a.tracked[k] != nil {
		return fmt.Errorf("%w: %s in %q by %s", ErrAlreadyTracked, m.key, m.topic, m.pid)
	}
	a.refs++
	l := &local{pid: m.pid, e: &entry{node: a.t.ps.NodeName(), topic: m.topic, key: m.key, ref: newRef(a.inc, a.refs), meta: m.meta}}
	if err := a.send(&wire.Change{Joins: []*wire.Presence{wireOf(l.e)}}); err != nil {
		return err
	}
	a.watch(ctx, m.pid)
	d := diffs{}
	a.t.v.mu.Lock()
	a.add(k, l, d)
	a.t.v.mu.Unlock()
	a.tell(d)
	return nil
}

func (a *trackerActor) untrack(m *untrackReq) error {
	k := trackKey{pidKey(m.pid), m.topic, m.key}
	l := a.tracked[k]
	if l == nil {
		return fmt.Errorf("%w: %s in %q by %s", ErrNotTracked, m.key, m.topic, m.pid)
	}
	if err := a.send(&wire.Change{Leaves: []string{l.e.ref}}); err != nil {
		return err
	}
	d := diffs{}
	a.t.v.mu.Lock()
	a.remove(k, l, d)
	a.t.v.mu.Unlock()
	a.tell(d)
	return nil
}

func (a *trackerActor) update(m *updateReq) error {
	k := trackKey{pidKey(m.pid), m.topic, m.key}
	old := a.tracked[k]
	if old == nil {
		return fmt.Errorf("%w: %s in %q by %s", ErrNotTracked, m.key, m.topic, m.pid)
	}
	a.refs++
	l := &local{pid: m.pid, e: &entry{node: old.e.node, topic: m.topic, key: m.key, ref: newRef(a.inc, a.refs), meta: m.meta}}
	if err := a.send(&wire.Change{Leaves: []string{old.e.ref}, Joins: []*wire.Presence{wireOf(l.e)}}); err != nil {
		return err
	}
	d := diffs{}
	a.t.v.mu.Lock()
	a.remove(k, old, d)
	a.add(k, l, d)
	a.t.v.mu.Unlock()
	a.tell(d)
	return nil
}

// add and remove change this node's presences; the caller holds the
// view's lock.
func (a *trackerActor) add(k trackKey, l *local, d diffs) {
	a.mine[l.e.ref] = l
	a.tracked[k] = l
	if a.byPID[k.pid] == nil {
		a.byPID[k.pid] = map[string]*local{}
	}
	a.byPID[k.pid][l.e.ref] = l
	a.t.v.add(l.e, d)
}

func (a *trackerActor) remove(k trackKey, l *local, d diffs) {
	delete(a.mine, l.e.ref)
	delete(a.tracked, k)
	if refs := a.byPID[k.pid]; refs != nil {
		delete(refs, l.e.ref)
		if len(refs) == 0 {
			delete(a.byPID, k.pid)
		}
	}
	a.t.v.remove(l.e, d)
}

// terminated: a tracked process stopped (its presences leave) or a
// subscriber did (it is unsubscribed).
func (a *trackerActor) terminated(who *actor.PID) {
	pk := pidKey(who)
	delete(a.watched, pk)
	for topic, subs := range a.subs {
		delete(subs, pk)
		if len(subs) == 0 {
			delete(a.subs, topic)
		}
	}
	refs := a.byPID[pk]
	if len(refs) == 0 {
		return
	}
	c := &wire.Change{}
	for ref := range refs {
		c.Leaves = append(c.Leaves, ref)
	}
	if err := a.send(c); err != nil {
		// The process is gone either way: this node drops its presences, and
		// the change it could not send leaves a hole in its seq that its
		// next heartbeat names, so every replica asks for its state.
		a.seq++
		a.t.log.Error().Err(err).Int("presences", len(refs)).Msg("presence: could not send the leaves of a stopped process: peers will resync")
	}
	d := diffs{}
	a.t.v.mu.Lock()
	for _, l := range refs {
		a.remove(trackKey{pk, l.e.topic, l.e.key}, l, d)
	}
	a.t.v.mu.Unlock()
	a.tell(d)
}

func (a *trackerActor) watch(ctx actor.Context, pid *actor.PID) {
	if pk := pidKey(pid); !a.watched[pk] {
		a.watched[pk] = true
		ctx.Watch(pid)
	}
}

func (a *trackerActor) subscribe(ctx actor.Context, m *subscribeReq) {
	pk := pidKey(m.pid)
	if m.off {
		if subs := a.subs[m.topic]; subs != nil {
			delete(subs, pk)
			if len(subs) == 0 {
				delete(a.subs, m.topic)
			}
		}
		return
	}
	if a.subs[m.topic] == nil {
		a.subs[m.topic] = map[string]*actor.PID{}
	}
	a.subs[m.topic][pk] = m.pid
	a.watch(ctx, m.pid)
}

// tell sends each topic's Diff to that topic's subscribers.
func (a *trackerActor) tell(d diffs) {
	for topic, df := range d {
		for _, metas := range df.Joins {
			sortMetas(metas)
		}
		for _, metas := range df.Leaves {
			sortMetas(metas)
		}
		for _, pid := range a.subs[topic] {
			a.t.system.Root.Send(pid, df)
		}
	}
}

// tick: heartbeat when due, and the replicas' deadlines.
func (a *trackerActor) tick() {
	now := time.Now()
	if !a.stopping && a.t.ps.Err() == nil && now.Sub(a.lastBeat) >= a.t.cfg.HeartbeatInterval {
		a.lastBeat = now
		if err := a.t.ps.BroadcastFrom(a.self, a.t.cfg.Topic, &wire.Heartbeat{Incarnation: a.inc, Seq: a.seq}); err != nil {
			a.t.log.Warn().Err(err).Msg("presence: heartbeat not sent")
		}
	}
	if !a.looking && now.Sub(a.lastSeen) >= a.t.cfg.HeartbeatInterval {
		a.lastSeen, a.looking = now, true
		go a.lookAtMembership() // ends within HeartbeatInterval/2; answers with *absentNodes
	}
	d := diffs{}
	// DownAfter less one tick: a node is down by DownAfter after its last
	// message, not up to a tick later.
	a.t.v.mu.Lock()
	ask := a.rs.check(now, a.t.cfg.DownAfter-a.t.cfg.tick(), a.t.cfg.SyncRetry, d)
	a.t.v.mu.Unlock()
	a.tell(d)
	for _, node := range ask {
		a.ask(true, node)
	}
}

// lookAtMembership sends the tracker the nodes the pubsub's membership no
// longer lists (absent in every pool group's Stats). It runs on its own
// goroutine, owned by the tracker (one at a time, ended by its timeout):
// Stats asks this node's producers, which may be busy calling an
// unreachable node, and the tracker must not wait for them. When Stats
// does not answer within half a HeartbeatInterval, the next look tries
// again.
func (a *trackerActor) lookAtMembership() {
	ctx, cancel := context.WithTimeout(context.Background(), a.t.cfg.HeartbeatInterval/2)
	defer cancel()
	groups, err := a.t.ps.Stats(ctx)
	msg := &absentNodes{}
	if err == nil && len(groups) > 0 {
		count := map[string]int{}
		for _, g := range groups {
			for _, ns := range g.Nodes {
				if ns.Absent {
					count[ns.Node]++
				}
			}
		}
		msg.nodes = map[string]bool{}
		for node, n := range count {
			msg.nodes[node] = n == len(groups)
		}
	}
	select {
	case <-a.t.done: // stopped meanwhile: no one to tell
	default:
		a.t.system.Root.Send(a.self, msg)
	}
}

// membership applies a look at the membership (nil nodes: Stats did not
// answer).
func (a *trackerActor) membership(m *absentNodes) {
	a.looking = false
	if m.nodes == nil {
		return
	}
	d := diffs{}
	a.t.v.mu.Lock()
	a.rs.left(m.nodes, d)
	a.t.v.mu.Unlock()
	a.tell(d)
}

// delivery is a message of some node's presence stream.
func (a *trackerActor) delivery(m *messages.Delivery) {
	if m.Node == a.t.ps.NodeName() {
		return // this node's own: its tracker is the source
	}
	msg := m.Message
	if incarnation(msg) == 0 {
		// Undecodable, or not a tracker's message: whatever the node sent is
		// not followed any more; ask it for its state.
		a.t.log.Warn().Str("peer", m.Node).Str("type", fmt.Sprintf("%T", m.Message)).Msg("presence: not a presence message on the presence topic")
		a.ask(a.rs.expired(m.Node, time.Now()), m.Node)
		return
	}
	if _, ok := msg.(*wire.SyncRequest); ok {
		a.answer(m.Node)
	}
	d := diffs{}
	a.t.v.mu.Lock()
	ask := a.rs.handle(m.Node, msg, time.Now(), d)
	a.t.v.mu.Unlock()
	a.tell(d)
	a.ask(ask, m.Node)
}

// ask asks node for its whole state (when ask is set).
func (a *trackerActor) ask(ask bool, node string) {
	if !ask {
		return
	}
	if err := a.t.ps.DirectBroadcastFrom(a.self, node, a.t.cfg.Topic, &wire.SyncRequest{Incarnation: a.inc}); err != nil {
		a.t.log.Warn().Err(err).Str("peer", node).Msg("presence: could not ask a node for its state (asking again after SyncRetry)")
	}
}

// answer sends node this node's whole state, in parts, on the stream:
// after every change before it and before every change after it.
func (a *trackerActor) answer(node string) {
	if a.stopping {
		return
	}
	budget := a.t.ps.Config().MaxBatchBytes / 4
	part := &wire.Snapshot{Incarnation: a.inc, Seq: a.seq}
	size := 0
	for _, l := range a.mine {
		p := wireOf(l.e)
		n := proto.Size(p)
		if len(part.Presences) > 0 && (len(part.Presences) == a.t.cfg.SnapshotPart || size+n > budget) {
			if !a.sendPart(node, part) {
				return
			}
			part, size = &wire.Snapshot{Incarnation: a.inc, Seq: a.seq, Part: part.Part + 1}, 0
		}
		part.Presences = append(part.Presences, p)
		size += n
	}
	part.Last = true
	a.sendPart(node, part)
}

func (a *trackerActor) sendPart(node string, part *wire.Snapshot) bool {
	if err := a.t.ps.DirectBroadcastFrom(a.self, node, a.t.cfg.Topic, part); err != nil {
		a.t.log.Warn().Err(err).Str("peer", node).Msg("presence: could not send this node's state (the node asks again)")
		return false
	}
	return true
}

func wireOf(e *entry) *wire.Presence {
	return &wire.Presence{Ref: e.ref, Topic: e.topic, Key: e.key, Meta: e.meta}
}
