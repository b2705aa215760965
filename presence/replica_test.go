package presence

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/presence/internal/wire"
)

func pres(ref, key string) *wire.Presence { return &wire.Presence{Ref: ref, Topic: "t", Key: key} }

// steps renders what a step told subscribers: "-ref +ref" per topic.
func steps(d diffs) string {
	var out []string
	for _, df := range d {
		for _, metas := range df.Leaves {
			for _, m := range metas {
				out = append(out, "-"+m.Ref)
			}
		}
		for _, metas := range df.Joins {
			for _, m := range metas {
				out = append(out, "+"+m.Ref)
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// TestReplicaRules walks one replica through the rules of following a
// node's stream: each step is a message, what it must tell, and whether the
// node must be asked for its state.
func TestReplicaRules(t *testing.T) {
	v := newView()
	rs := newReplicas(v, zerolog.Nop())
	t0 := time.Unix(0, 0)
	for i, s := range []struct {
		msg   proto.Message
		tells string
		ask   bool
		state replicaState
	}{
		{&wire.SyncRequest{Incarnation: 7}, "", false, live}, // a new tracker starts at seq 0
		{&wire.Change{Incarnation: 7, Seq: 1, Joins: []*wire.Presence{pres("a", "alice")}}, "+a", false, live},
		{&wire.Change{Incarnation: 7, Seq: 1, Joins: []*wire.Presence{pres("a", "alice")}}, "", false, live}, // redelivered
		{&wire.Heartbeat{Incarnation: 7, Seq: 1}, "", false, live},
		{&wire.Change{Incarnation: 7, Seq: 3, Joins: []*wire.Presence{pres("c", "carol")}}, "", true, syncing}, // seq 2 missing
		{&wire.Change{Incarnation: 7, Seq: 4, Leaves: []string{"a"}}, "", false, syncing},                      // the state holds it
		{&wire.Snapshot{Incarnation: 7, Seq: 4, Part: 0, Presences: []*wire.Presence{pres("b", "bob")}}, "", false, syncing},
		{&wire.Snapshot{Incarnation: 7, Seq: 4, Part: 1, Last: true, Presences: []*wire.Presence{pres("c", "carol")}}, "+b +c -a", false, live},
		{&wire.Heartbeat{Incarnation: 7, Seq: 5}, "", true, syncing},                     // names a change never received
		{&wire.Snapshot{Incarnation: 7, Seq: 5, Part: 1, Last: true}, "", true, syncing}, // part 0 missing
		{&wire.Snapshot{Incarnation: 7, Seq: 5, Part: 0, Last: true, Presences: []*wire.Presence{pres("c", "carol")}}, "-b", false, live},
		{&wire.Heartbeat{Incarnation: 9, Seq: 0}, "-c", false, live}, // a new incarnation: the old one's are gone
		{&wire.Change{Incarnation: 9, Seq: 1, Joins: []*wire.Presence{pres("d", "dave")}}, "+d", false, live},
		{&wire.Goodbye{Incarnation: 9, Seq: 1}, "-d", false, down},
		{&wire.Goodbye{Incarnation: 9, Seq: 1}, "", false, down},     // redelivered
		{&wire.Heartbeat{Incarnation: 9, Seq: 1}, "", true, syncing}, // heard again: asked for its state
	} {
		d := diffs{}
		ask := rs.handle("n", s.msg, t0, d)
		if got := steps(d); got != s.tells || ask != s.ask || rs.nodes["n"].state != s.state {
			t.Fatalf("step %d (%T %v): told %q ask %v state %v, want %q %v %v", i, s.msg, s.msg, got, ask, rs.nodes["n"].state, s.tells, s.ask, s.state)
		}
	}
	if v.count != 0 {
		t.Fatalf("view holds %d presences, want 0", v.count)
	}
}

// TestReplicaDownAfterSilence: a node silent for DownAfter is down (its
// presences leave); one asked for its state is asked again after the retry
// interval; a down node that speaks again is asked for its state, and the
// state restores its presences.
func TestReplicaDownAfterSilence(t *testing.T) {
	v := newView()
	rs := newReplicas(v, zerolog.Nop())
	t0 := time.Unix(0, 0)
	rs.handle("n", &wire.Change{Incarnation: 1, Seq: 1, Joins: []*wire.Presence{pres("a", "alice")}}, t0, diffs{})
	rs.handle("m", &wire.Heartbeat{Incarnation: 2, Seq: 3}, t0, diffs{}) // m: asked (joined late)
	d := diffs{}
	if ask := rs.check(t0.Add(999*time.Millisecond), time.Second, 500*time.Millisecond, d); len(d) != 0 || fmt.Sprint(ask) != "[m]" {
		t.Fatalf("before DownAfter: told %q, asked %v; want nothing, [m] asked again", steps(d), ask)
	}
	if rs.check(t0.Add(time.Second), time.Second, 500*time.Millisecond, d); steps(d) != "-a" || rs.nodes["n"].state != down || rs.nodes["m"].state != down {
		t.Fatalf("at DownAfter: told %q, states %v %v", steps(d), rs.nodes["n"].state, rs.nodes["m"].state)
	}
	d = diffs{}
	if !rs.handle("n", &wire.Heartbeat{Incarnation: 1, Seq: 1}, t0.Add(2*time.Second), d) || len(d) != 0 {
		t.Fatalf("a down node speaking again is not asked for its state")
	}
	rs.handle("n", &wire.Snapshot{Incarnation: 1, Seq: 1, Last: true, Presences: []*wire.Presence{pres("a", "alice")}}, t0.Add(2*time.Second), d)
	if steps(d) != "+a" || rs.nodes["n"].state != live {
		t.Fatalf("the state after coming back told %q, state %v", steps(d), rs.nodes["n"].state)
	}
	d = diffs{}
	if !rs.expired("n", t0.Add(3*time.Second)) || rs.nodes["n"].state != syncing || len(d) != 0 {
		t.Fatalf("CursorExpired does not ask for the state, or tells before it arrives")
	}
	// The node goes on speaking, but its state never comes: after
	// DownAfter of asking, its presences leave; it is still asked.
	rs.handle("n", &wire.Heartbeat{Incarnation: 1, Seq: 1}, t0.Add(3900*time.Millisecond), d)
	if ask := rs.check(t0.Add(3999*time.Millisecond), time.Second, 500*time.Millisecond, d); len(d) != 0 || fmt.Sprint(ask) != "[n]" {
		t.Fatalf("syncing for less than DownAfter: told %q, asked %v", steps(d), ask)
	}
	if rs.check(t0.Add(4*time.Second), time.Second, 500*time.Millisecond, d); steps(d) != "-a" || rs.nodes["n"].state != syncing {
		t.Fatalf("syncing for DownAfter: told %q, state %v; want -a, still syncing", steps(d), rs.nodes["n"].state)
	}
}
