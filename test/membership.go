package test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub/cluster"
)

// MembershipEvents is an owner actor for a cluster.Membership under test: it
// records every *cluster.Event it is sent.
type MembershipEvents struct {
	PID *actor.PID
	mu  sync.Mutex
	evs []cluster.Event
}

// SpawnMembershipEvents spawns the recording owner on system.
func SpawnMembershipEvents(system *actor.ActorSystem) *MembershipEvents {
	r := &MembershipEvents{}
	r.PID = system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if ev, ok := ctx.Message().(*cluster.Event); ok {
			r.mu.Lock()
			r.evs = append(r.evs, *ev)
			r.mu.Unlock()
		}
	}))
	return r
}

// All is every event recorded so far, in arrival order.
func (r *MembershipEvents) All() []cluster.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]cluster.Event(nil), r.evs...)
}

// Len is the number of events recorded so far.
func (r *MembershipEvents) Len() int { return len(r.All()) }

// Kinds is the kinds of the events for member name, in order.
func (r *MembershipEvents) Kinds(name string) []cluster.EventKind {
	var out []cluster.EventKind
	for _, ev := range r.All() {
		if ev.Member.Name == name {
			out = append(out, ev.Kind)
		}
	}
	return out
}

// OfKind is the events of kind k, in order.
func (r *MembershipEvents) OfKind(k cluster.EventKind) []cluster.Event {
	var out []cluster.Event
	for _, ev := range r.All() {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

func (r *MembershipEvents) String() string {
	var b strings.Builder
	for _, ev := range r.All() {
		b.WriteString(ev.Kind.String() + " " + ev.Member.String() + "; ")
	}
	return b.String()
}

// Wait polls (10 s, then fails) until an event of kind for member name with
// incarnation inc was recorded.
func (r *MembershipEvents) Wait(t testing.TB, name string, kind cluster.EventKind, inc uint64) {
	t.Helper()
	Eventually(t, 10*time.Second, func() bool {
		for _, ev := range r.All() {
			if ev.Kind == kind && ev.Member.Name == name && ev.Member.Incarnation == inc {
				return true
			}
		}
		return false
	}, func() string { return "want " + kind.String() + " " + name + ", got " + r.String() })
}

// EqualKinds reports whether got is want, in order.
func EqualKinds(got []cluster.EventKind, want ...cluster.EventKind) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
