// Package cluster tells EchoPubSub which nodes exist. It stands in for the
// `:pg` process groups of the Elixir original: producers learn the nodes to
// deliver to from a Membership, and react to its events.
//
// Three implementations sit side by side behind one interface:
//
//   - Static (static.go): a fixed list of advertised addresses, the embedded
//     default. It needs no external service; a listed node counts as joined
//     from its first successful registration handshake, and liveness comes
//     from that handshake and from protoactor's remote endpoint events.
//   - Consul (package cluster/consul): service registration with a TTL
//     check, discovery by blocking queries on healthy instances.
//   - DNS (package cluster/dns): a Kubernetes headless Service's address or
//     SRV records, resolved on an interval.
package cluster

import (
	"context"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// Member is one node of the pubsub cluster.
type Member struct {
	// Address is the node's advertised protoactor remote address
	// (host:port). It is also its node name unless Name says otherwise.
	Address string
	// Name is the node name EchoPubSub uses in CursorExpired and Delivery.
	Name string
	// Incarnation changes when the node restarts (0 = not known yet).
	Incarnation uint64
}

func (m Member) String() string {
	return fmt.Sprintf("%s(inc %d)", m.Name, m.Incarnation)
}

// EventKind says what changed for a member.
type EventKind uint8

const (
	// Joined: the member is new, or came back after Left.
	Joined EventKind = iota + 1
	// Left: the member is no longer listed. Producers keep its read cursor
	// for a while (Config.ForgetAfter) so a brief absence loses nothing.
	Left
	// Updated: the member is still listed but changed; a new Incarnation
	// means the node restarted.
	Updated
	// Reachable: the transport to the member came (back) up: a good moment
	// to retry without waiting for the retry interval.
	Reachable
	// Listed: the membership sent its first complete member list (a Joined
	// for each member). Sent once, with an empty Member; a pubsub is not
	// ready (Health) before it.
	Listed
)

func (k EventKind) String() string {
	switch k {
	case Joined:
		return "joined"
	case Left:
		return "left"
	case Updated:
		return "updated"
	case Reachable:
		return "reachable"
	case Listed:
		return "listed"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is delivered as a message to the actor that owns the membership.
type Event struct {
	Kind   EventKind
	Member Member
}

// Env is what a Membership gets when it starts.
type Env struct {
	System *actor.ActorSystem
	// Self is this node. Its Address is the system's advertised address.
	Self Member
	// Service is the pubsub Name: members of different pubsubs never mix.
	Service string
	// Owner receives every *Event.
	Owner *actor.PID
	Log   zerolog.Logger
}

// Membership is the node list a pubsub delivers to.
//
// Ordering: the events for one member reach Owner in the order they
// happened, and Start sends a Joined for every member already known before
// any later event. Once the first complete list was sent (at once in Start,
// or when the backing service first answered), one Listed follows it. Events for different members carry no order between them.
// Owner may see a Joined for a member it already knows (after a reconnect to
// the backing service); it must treat that as Updated.
//
// Concurrency: Start and Stop are called once each, in that order, by the
// pubsub supervisor; Members may be called from any goroutine at any time.
// Events are sent with Send (never blocking the membership's goroutines on
// the owner), and no event is sent after Stop returns. An implementation
// never panics: a failing backing service is logged once per state change
// and retried with backoff.
type Membership interface {
	// Start begins tracking members and sending events to env.Owner.
	Start(env Env) error
	// Members is the current member list, Self included.
	Members() []Member
	// Stop leaves the cluster (deregistering where that applies) and stops
	// every goroutine the membership started. It is idempotent.
	Stop(ctx context.Context) error
}
