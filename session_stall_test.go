package echopubsub_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
)

// TestSessionStalledOncePerTransition (issue 40, item 5): an owner that
// acks promptly is never reported stalled, however long it then stays idle;
// once it stops acking with deliveries pending it gets exactly one
// SessionStalled, not before StallAfter, shown by SessionStats, the gauge
// echopubsub.session.stalled and one log line; while it stays so nothing
// is repeated (a further delivery included); its next ack brings exactly
// one SessionResumed, and once it acks again nothing more comes.
func TestSessionStalledOncePerTransition(t *testing.T) {
	const stallAfter = 300 * time.Millisecond
	cfg := sessionConfig(100, 200)
	cfg.StallAfter = stallAfter
	m := newMeter(t)
	log, logged := test.CapturingLogger(t, zerolog.InfoLevel)
	nodes, addrs := test.NewNodes(t, 1, log)
	nd := nodes[0]
	nd.Start(t, cfg, staticOf(addrs), echopubsub.WithMeterProvider(m.mp))
	var acking atomic.Bool
	acking.Store(true)
	o := spawnOwner(t, nd, func(env *echopubsub.Envelope) {
		if acking.Load() {
			if _, err := nd.PS.Ack(env.SessionID, env.DeliveryID); err != nil {
				t.Errorf("ack %d: %v", env.DeliveryID, err)
			}
		}
	})
	id := openSession(t, nd, o, []string{"match"})
	stats := func() echopubsub.SessionStats {
		st, err := nd.PS.SessionStats(id)
		if err != nil {
			t.Fatalf("SessionStats: %v", err)
		}
		return st
	}
	stalled := func() int { return countOf[*echopubsub.SessionStalled](o) }
	resumed := func() int { return countOf[*echopubsub.SessionResumed](o) }
	transitions := func() bool { return stalled()+resumed() > 0 }

	// A prompt owner: traffic for 2 StallAfter, then idle for 2 more.
	for i := uint64(1); i <= 12; i++ {
		nd.Broadcast(t, "match", stamp(i))
		time.Sleep(stallAfter / 6) // publishing pace, not a settling wait
	}
	waitEnvelopes(t, o, 12)
	test.Never(t, 2*stallAfter, transitions, func() string { return "a prompt owner was told: " + o.describe() })
	if st := stats(); st.Stalled || st.Pending != 0 {
		t.Fatalf("prompt owner's stats %+v, want not stalled, nothing pending", st)
	}

	// It stops acking with deliveries pending.
	acking.Store(false)
	sent := time.Now() // the clock starts at the delivery of #13, after this
	for i := uint64(13); i <= 15; i++ {
		nd.Broadcast(t, "match", stamp(i))
	}
	waitEnvelopes(t, o, 15)
	test.Never(t, stallAfter/2, transitions, func() string { return "stalled before StallAfter: " + o.describe() })
	test.Eventually(t, 5*time.Second, func() bool { return stalled() == 1 }, o.describe)
	if d := time.Since(sent); d < stallAfter {
		t.Fatalf("SessionStalled %v after the first unacked delivery was sent, want >= StallAfter %v", d, stallAfter)
	}
	n := lastOf[*echopubsub.SessionStalled](o)
	if n.SessionID != id || n.Pending != 3 || n.Quiet < stallAfter || n.Node != nd.Addr {
		t.Fatalf("SessionStalled %+v, want session %s, 3 pending, quiet >= %v, node %s", *n, id, stallAfter, nd.Addr)
	}
	if st := stats(); !st.Stalled || st.Pending != 3 || st.Quiet < stallAfter {
		t.Fatalf("stalled session's stats %+v, want stalled, 3 pending, quiet >= %v", st, stallAfter)
	}
	m.eventuallyWith(t, "echopubsub.session.stalled", "", "", 1)
	test.Eventually(t, 5*time.Second, func() bool { return logged.Count("session stalled") == 1 }, logged.String)

	// While it holds, nothing is repeated, not even for a new delivery.
	nd.Broadcast(t, "match", stamp(16))
	waitEnvelopes(t, o, 16)
	test.Never(t, 3*stallAfter, func() bool { return stalled() != 1 || resumed() != 0 }, o.describe)
	if st := stats(); !st.Stalled {
		t.Fatalf("stats %+v while still not acking, want stalled", st)
	}

	// One ack ends it; acking everything and going on tells nothing more.
	acking.Store(true)
	if _, err := nd.PS.AckFirst(id); err != nil {
		t.Fatalf("AckFirst: %v", err)
	}
	test.Eventually(t, 5*time.Second, func() bool { return resumed() == 1 }, o.describe)
	if r := lastOf[*echopubsub.SessionResumed](o); r.SessionID != id || r.Pending != 3 || r.Quiet < 4*stallAfter {
		t.Fatalf("SessionResumed %+v, want session %s, 3 pending, quiet >= %v", *r, id, 4*stallAfter)
	}
	for nd.PS.Pending(id) > 0 {
		if _, err := nd.PS.AckFirst(id); err != nil {
			t.Fatalf("AckFirst: %v", err)
		}
	}
	if st := stats(); st.Stalled {
		t.Fatalf("stats %+v after acks, want not stalled", st)
	}
	m.eventuallyWith(t, "echopubsub.session.stalled", "", "", 0)
	for i := uint64(17); i <= 20; i++ {
		nd.Broadcast(t, "match", stamp(i))
	}
	waitEnvelopes(t, o, 20)
	test.Never(t, 2*stallAfter, func() bool { return stalled() != 1 || resumed() != 1 }, o.describe)
	if got := strings.Join(o.notices(), " "); got != "*echopubsub.SessionStalled *echopubsub.SessionResumed" {
		t.Fatalf("notices %q, want one SessionStalled then one SessionResumed", got)
	}
	if c := logged.Count("session resumed"); c != 1 {
		t.Fatalf("resume logged %d times, want once", c)
	}
}

// lastOf is the last message of type T the owner got (zero: none).
func lastOf[T any](o *owner) T {
	var last T
	for _, m := range o.all() {
		if v, ok := m.(T); ok {
			last = v
		}
	}
	return last
}

// TestStallAfterDefaultAndValidation: StallAfter defaults to 30s and must
// be > 0; the error names the field and the value.
func TestStallAfterDefaultAndValidation(t *testing.T) {
	cfg := echopubsub.DefaultConfig("t")
	if cfg.StallAfter != 30*time.Second {
		t.Fatalf("default StallAfter %v, want 30s", cfg.StallAfter)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		cfg.StallAfter = d
		want := fmt.Sprintf("echopubsub: config StallAfter must be > 0, got %v", d)
		if err := cfg.Validate(); err == nil || err.Error() != want {
			t.Fatalf("StallAfter %v: Validate() = %v, want %q", d, err, want)
		}
	}
}
