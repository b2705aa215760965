package echopubsub_test

import (
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// soakSession is one session of the soak: an owner actor that acks (or
// not) and checks, as it receives them, what the session guarantees:
//
//   - its own count of delivered, unacknowledged durable deliveries, and
//     the pending count each Ack returns, never exceed HardQueue;
//   - delivery ids increase by exactly one;
//   - nothing it acknowledged is delivered again, and nothing twice;
//   - nothing arrives after SessionClosed.
//
// Everything it receives also goes to the shared test.Checker, which
// checks that nothing unacknowledged is lost without a notice (see
// observe).
type soakSession struct {
	name  string
	ps    *echopubsub.PubSub
	id    string
	hard  int
	never bool // never acks
	hoard bool // acks all it holds only when told the table is full, or at half HardQueue
	rng   *rand.Rand
	check *test.Checker
	nodes map[string]string // publisher -> node address

	mu          sync.Mutex
	outstanding []uint64          // delivered, not acked, in order
	keys        map[uint64]string // delivery id -> stamp, until acked
	acked       map[string]bool
	seen        map[string]bool
	lastID      uint64
	closed      bool
	closeReason messages.SessionCloseReason
	delivered   int
	notices     map[string]int
	violations  []string
	// ackErrs: acks that failed. An envelope already in the mailbox when
	// the session closed fails to ack (ErrUnknownSession), so they are
	// violations only for a session that stayed open.
	ackErrs []string
}

func (s *soakSession) ackFailed(what string) {
	if len(s.ackErrs) < 20 {
		s.ackErrs = append(s.ackErrs, s.name+": "+what)
	}
}

func (s *soakSession) fail(format string, args ...interface{}) {
	if len(s.violations) < 20 {
		s.violations = append(s.violations, fmt.Sprintf(s.name+": "+format, args...))
	}
}

func (s *soakSession) receive(ctx actor.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch m := ctx.Message().(type) {
	case *echopubsub.Envelope:
		s.envelope(m)
	case *messages.SessionClosed:
		if s.closed {
			s.fail("second SessionClosed")
		}
		s.closed, s.closeReason = true, m.Reason
		s.outstanding = nil
		s.observe(m)
	case *messages.SessionPressure, *messages.CursorExpired, *messages.BackPressure:
		if s.closed {
			s.fail("%T after SessionClosed", m)
		}
		s.notices[word(m)]++
		s.observe(m)
		if p, ok := m.(*messages.SessionPressure); ok && s.hoard &&
			p.State == messages.SessionPressureState_SESSION_PRESSURE_STATE_RESERVATIONS_FULL {
			s.ackAll()
		}
	}
}

// observe feeds the checker. A session is told of a loss by CursorExpired
// and BackPressure, as a subscriber is, and also by SessionPressure
// RESERVATIONS_FULL (deliveries refused from there) and SessionClosed
// (nothing more from there): those two count as the checker's DROPPING.
func (s *soakSession) observe(msg interface{}) {
	switch m := msg.(type) {
	case *messages.SessionClosed:
		msg = &messages.BackPressure{State: messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING}
	case *messages.SessionPressure:
		if m.State != messages.SessionPressureState_SESSION_PRESSURE_STATE_RESERVATIONS_FULL {
			return
		}
		msg = &messages.BackPressure{State: messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING}
	case *echopubsub.Envelope:
		st := m.Event.(*testpb.Stamp)
		msg = &messages.Delivery{Node: s.nodes[st.Publisher], Topic: m.Topic, Message: st}
	}
	s.check.Observe(s.name, msg)
}

func (s *soakSession) envelope(env *echopubsub.Envelope) {
	st := env.Event.(*testpb.Stamp)
	key := fmt.Sprintf("%s#%d", st.Publisher, st.Seq)
	switch {
	case s.closed:
		s.fail("%s delivered after SessionClosed", key)
	case s.acked[key]:
		s.fail("%s delivered again (as %d) after it was acked", key, env.DeliveryID)
	case s.seen[key]:
		s.fail("%s delivered twice", key)
	case env.DeliveryID != s.lastID+1:
		s.fail("delivery id %d after %d", env.DeliveryID, s.lastID)
	}
	s.seen[key] = true
	s.keys[env.DeliveryID] = key
	s.lastID = env.DeliveryID
	s.delivered++
	s.observe(env)
	s.outstanding = append(s.outstanding, env.DeliveryID)
	if len(s.outstanding) > s.hard {
		s.fail("%d delivered and not acked, HardQueue is %d", len(s.outstanding), s.hard)
	}
	if s.hoard && len(s.outstanding) >= s.hard/2 {
		s.ackAll()
	}
	if s.never || s.hoard {
		return
	}
	// Ack with a random delay: sometimes not now, sometimes a random
	// subset out of order, sometimes the oldest with AckFirst; always
	// enough to stay well under HardQueue.
	if s.rng.Intn(3) > 0 && len(s.outstanding) < 20 {
		return
	}
	n := 1 + s.rng.Intn(len(s.outstanding))
	s.rng.Shuffle(len(s.outstanding), func(i, j int) { s.outstanding[i], s.outstanding[j] = s.outstanding[j], s.outstanding[i] })
	batch := s.outstanding[:n]
	if s.rng.Intn(10) == 0 {
		res, err := s.ps.AckMany(s.id, batch)
		if err != nil || len(res.Unknown) > 0 || res.Pending > s.hard {
			s.ackFailed(fmt.Sprintf("AckMany: %+v, %v", res, err))
		}
	} else {
		for _, id := range batch {
			if p, err := s.ps.Ack(s.id, id); err != nil || p > s.hard {
				s.ackFailed(fmt.Sprintf("Ack(%d) = %d, %v", id, p, err))
			}
		}
	}
	s.markAcked(batch)
	s.outstanding = append([]uint64(nil), s.outstanding[n:]...)
}

// waitAckers is a publisher's flow control, as an application would do on
// SessionPressure: it holds the next burst while an acking session is above
// soft (the ackers run on a shared, busy machine; without it a starved
// acker could be disconnected, which is correct but not this test's point).
// Never-ackers and hoarders do not hold publishers.
// It runs on a publisher goroutine, so it reports instead of failing.
func waitAckers(sessions []*soakSession, soft int) error {
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range sessions {
		for !s.never && !s.hoard && s.ps.Pending(s.id) > soft {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s still above SoftQueue after 20s: pending %d", s.name, s.ps.Pending(s.id))
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

func soakState(sessions []*soakSession, check *test.Checker) string {
	out := ""
	for _, s := range sessions {
		s.mu.Lock()
		out += fmt.Sprintf("\n%s: delivered %d, closed %v, outstanding %d, pending %d, highest %d/%d/%d", s.name, s.delivered, s.closed,
			len(s.outstanding), s.ps.Pending(s.id), check.Highest(s.name, "p0"), check.Highest(s.name, "p1"), check.Highest(s.name, "p2"))
		s.mu.Unlock()
	}
	return out
}

func soakViolations(sessions []*soakSession) []string {
	var out []string
	for _, s := range sessions {
		s.mu.Lock()
		out = append(out, s.violations...)
		s.mu.Unlock()
	}
	return out
}

// ackAll acks everything the session holds, in AckMany calls of 1000.
func (s *soakSession) ackAll() {
	for len(s.outstanding) > 0 {
		n := min(len(s.outstanding), 1000)
		batch := s.outstanding[:n]
		if res, err := s.ps.AckMany(s.id, batch); err != nil || len(res.Unknown) > 0 {
			s.ackFailed(fmt.Sprintf("AckMany: %+v, %v", res, err))
		}
		s.markAcked(batch)
		s.outstanding = s.outstanding[n:]
	}
}

// markAcked remembers the stamps of acked ids (the session remembers which
// stamp each delivery id carried).
func (s *soakSession) markAcked(ids []uint64) {
	for _, id := range ids {
		if k, ok := s.keys[id]; ok {
			s.acked[k] = true
			delete(s.keys, id)
		}
	}
}

// TestSessionSoakThreeNodes: three nodes, a publisher on each, sessions on
// each node acking with random delays and one per node that never acks
// (it reaches HardQueue and is disconnected); the node-wide reservation
// table is small enough to fill now and then; node 2 is cut off twice,
// once shorter than the buffer covers (replayed on heal) and once longer
// (its sessions are told CursorExpired). It checks the session guarantees
// above and, at the end, that every session still open got every message
// or was told, and that a closed one was told.
func TestSessionSoakThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("soak")
	}
	const perPublisher, burst = 5000, 20
	cfg := fastConfig()
	cfg.BufferSize = 1024
	// HardQueue is above what an acker can be handed at once: a replay
	// after a cut (up to BufferSize from each of two producers) on top of
	// what flow control lets through.
	cfg.SoftQueue, cfg.HardQueue = 200, 3000
	// 4 sessions a node: the table fills when the never-acker and the
	// hoarder hold 3300 together; the hoarder then releases all it holds.
	cfg.MaxDeliveryReservations = 3300
	// The never-acker and the hoarder (which acks at half HardQueue only)
	// acknowledge nothing at SoftQueue: a short RoomWait lets them stall at
	// once and fill the table, as this soak is about; the ackers are paced.
	cfg.RoomWait = 20 * time.Millisecond
	nodes := test.StartCluster(t, 3, cfg)
	check := test.NewChecker()
	pubNode := map[string]string{}
	for i, nd := range nodes {
		pubNode[fmt.Sprintf("p%d", i)] = nd.Addr
	}
	var sessions []*soakSession
	for i, nd := range nodes {
		for j := 0; j < 4; j++ {
			s := &soakSession{name: fmt.Sprintf("n%d/s%d", i, j), ps: nd.PS, hard: cfg.HardQueue, never: j == 2, hoard: j == 3,
				rng: rand.New(rand.NewSource(int64(i*10 + j))), check: check, nodes: pubNode,
				keys: map[uint64]string{}, acked: map[string]bool{}, seen: map[string]bool{}, notices: map[string]int{}}
			check.AddSubscriber(s.name, 0) // subscribed before anything is published
			pid := nd.System.Root.Spawn(actor.PropsFromFunc(s.receive))
			s.id = openSession(t, nd, &owner{PID: pid}, []string{"soak"})
			sessions = append(sessions, s)
		}
	}
	// A sampler reads every session's Pending while the soak runs.
	stop := make(chan struct{})
	var sampled sync.WaitGroup
	var maxPending int
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			for _, s := range sessions {
				if p := s.ps.Pending(s.id); p > maxPending {
					maxPending = p
				}
			}
		}
	}()
	start := time.Now()
	lastAt := make([]atomic.Int64, len(nodes)) // each publisher's last broadcast time
	var pubs sync.WaitGroup
	for i, nd := range nodes {
		pubs.Add(1)
		go func(i int, nd *test.Node) {
			defer pubs.Done()
			for seq := uint64(1); seq <= perPublisher; seq++ {
				now := time.Now().UnixNano()
				check.Published(fmt.Sprintf("p%d", i), nd.Addr, 0, seq, now) // Broadcast(nil): group 0
				lastAt[i].Store(now)
				if err := nd.PS.Broadcast(nil, "soak", &testpb.Stamp{Publisher: fmt.Sprintf("p%d", i), Seq: seq}); err != nil {
					t.Errorf("broadcast: %v", err)
					return
				}
				if i == 0 {
					switch seq { // p0 writes 500 (replayed), then 1500 (> BufferSize: expired) while node 2 is cut off
					case 1000, 3000:
						test.Partition(nodes, 2)
					case 1500, 4500:
						test.Heal(nodes)
					}
				}
				if seq%burst == 0 { // load shape: bursts, and flow control
					time.Sleep(time.Millisecond)
					if err := waitAckers(sessions, cfg.SoftQueue); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}(i, nd)
	}
	pubs.Wait()
	for i := range nodes {
		p := fmt.Sprintf("p%d", i)
		at := lastAt[i].Load()
		test.Eventually(t, 30*time.Second, func() bool { return check.Behind(p, perPublisher, at) == 0 },
			func() string {
				return fmt.Sprintf("%d sessions behind on %s: %+v; %v; %s", check.Behind(p, perPublisher, at), p, check.Report().Counts,
					soakViolations(sessions), soakState(sessions, check))
			})
	}
	close(stop)
	sampled.Wait()
	check.Finish()
	rep := check.Report()
	closedByHardQueue, delivered, notices, openAckers := 0, 0, map[string]int{}, map[string]int{}
	for _, s := range sessions {
		s.mu.Lock()
		for _, v := range s.violations {
			t.Error(v)
		}
		for _, v := range s.ackErrs {
			if !s.closed {
				t.Error(v)
			}
		}
		if s.never && s.closed && s.closeReason == messages.SessionCloseReason_SESSION_CLOSE_REASON_HARD_QUEUE {
			closedByHardQueue++
		}
		if !s.never && s.closed {
			// Correct (it was told), but on a starved machine only: an
			// acker is disconnected only if its owner could not keep up.
			t.Logf("%s acks, yet was closed (%v)", s.name, s.closeReason)
		} else if !s.never && !s.hoard {
			openAckers[s.name[:2]]++
		}
		delivered += s.delivered
		for k, v := range s.notices {
			notices[k] += v
		}
		s.mu.Unlock()
	}
	for _, v := range rep.Violations {
		t.Errorf("checker: %v", v)
	}
	if !rep.OK() || rep.Counts.Duplicates != 0 {
		t.Errorf("checker counts %+v", rep.Counts)
	}
	if maxPending > cfg.HardQueue {
		t.Errorf("Pending read %d, HardQueue is %d", maxPending, cfg.HardQueue)
	}
	if notices["SESSION_PRESSURE_STATE_RESERVATIONS_FULL"] < len(nodes) {
		t.Errorf("every node's table fills (never-acker + hoarder), yet %d RESERVATIONS_FULL notices", notices["SESSION_PRESSURE_STATE_RESERVATIONS_FULL"])
	}
	if notices["CursorExpired"] == 0 {
		t.Errorf("node 2 was cut off for more than the buffer holds, yet no session was told CursorExpired")
	}
	if len(openAckers) != len(nodes) {
		t.Errorf("want an acking session open to the end on every node, got %v", openAckers)
	}
	if closedByHardQueue < len(nodes) {
		t.Errorf("%d never-acking sessions were disconnected, want %d", closedByHardQueue, len(nodes))
	}
	t.Logf("%v: %d envelopes to %d sessions, max pending read %d, notices %v, %d disconnected; checker %+v",
		time.Since(start).Round(time.Millisecond), delivered, len(sessions), maxPending, notices, closedByHardQueue, rep.Counts)
}
