package echopubsub

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/core"
)

// ErrNoQuorum: every node asked by a BroadcastAwait with AwaitQuorum(n)
// answered, and fewer than n of them delivered (the others were told
// CursorExpired, or were not owed the message). The error names both
// counts; the Receipt says which node did what.
var ErrNoQuorum = errors.New("echopubsub: quorum not reached")

// DeliveryStatus is what one node did with a message sent by
// BroadcastAwait, as the sender's producer learnt it from that node's
// acknowledgements.
type DeliveryStatus uint8

// The statuses in a Receipt. Delivered, Expired, NotOwed, NotStored and
// Unknown are final;
// Pending and Unreachable are what was known when the call's context ended.
const (
	// Pending: no answer from the node covers the message yet (its batch
	// is on the way, or the node was still being joined).
	Pending DeliveryStatus = DeliveryStatus(core.Pending)
	// Delivered: the message is in the mailbox of every subscriber of its
	// topic on the node (a bounded subscriber whose queue was full dropped
	// it and was told BackPressure, as any delivery does); on a durable
	// topic the node's store took it first. Not that a subscriber
	// processed it: for that, use sessions and their acks.
	Delivered DeliveryStatus = DeliveryStatus(core.Delivered)
	// Unreachable: the last call to the node failed, or it left the
	// membership. The message is still owed to it while the sender's
	// buffer holds it: a later BroadcastAwait may find it delivered.
	Unreachable DeliveryStatus = DeliveryStatus(core.Unreachable)
	// Expired: the node's subscribers were told *messages.CursorExpired for
	// a range that holds the message (the node fell behind the buffer).
	Expired DeliveryStatus = DeliveryStatus(core.Expired)
	// NotOwed: the node restarted after the message was written and was
	// joined past it: its new pubsub was never owed it (see "Joined" in
	// the package doc), so nobody there was told.
	NotOwed DeliveryStatus = DeliveryStatus(core.NotOwed)
	// NotStored (AwaitStored only): the node delivered the message, but did
	// not say its durable store appended it: its store is failing (the
	// rows become gap rows, see the durable store's fault path), it runs
	// without a store, it is of an earlier build, or the answer that
	// covered the message was not its batch's own ack. Never Stored.
	NotStored DeliveryStatus = DeliveryStatus(core.NotStored)
	// Unknown: the node's answers cannot tell whether it got the message:
	// its batch's ack was lost, then it fell behind the buffer, and its
	// answer to the Expire did not say where it stood (a retried Expire,
	// or a node of an earlier build). Not a claim that it was lost.
	Unknown DeliveryStatus = DeliveryStatus(core.Unknown)
)

func (s DeliveryStatus) String() string {
	switch s {
	case Pending:
		return "pending"
	case Delivered:
		return "delivered"
	case Unreachable:
		return "unreachable"
	case Expired:
		return "expired"
	case NotOwed:
		return "not_owed"
	case NotStored:
		return "not_stored"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("DeliveryStatus(%d)", uint8(s))
}

// NodeReceipt is one node's part of a Receipt.
type NodeReceipt struct {
	// Node is the member's address.
	Node   string
	Status DeliveryStatus
	// Stored: AwaitStored was asked and the node's ack said its durable
	// store appended the message's batch (Status Delivered); a node that
	// delivered without saying so is NotStored. This node: its status is
	// set at write time (for a store shared by the cluster, the sender's
	// append before BroadcastAwait queued the message is that row).
	Stored bool
}

// Receipt says where a message sent by BroadcastAwait arrived.
type Receipt struct {
	// Node, Group, Incarnation and Cursor are the message's place in its
	// producer's stream: the cursor a *messages.Delivery carries, and the
	// one a *messages.CursorExpired range would name. Cursor is 0 and
	// Taken false when the call ended before the producer took it.
	Node        string
	Group       uint32
	Incarnation uint64
	Cursor      uint64
	Taken       bool
	// Nodes are the nodes asked (every member at the call), sorted by
	// address; this node is one of them.
	Nodes []NodeReceipt
}

// Count is the number of nodes in status s.
func (r Receipt) Count(s DeliveryStatus) int {
	n := 0
	for _, nr := range r.Nodes {
		if nr.Status == s {
			n++
		}
	}
	return n
}

// Status is node's status in the receipt, and false when node was not
// asked.
func (r Receipt) Status(node string) (DeliveryStatus, bool) {
	for _, nr := range r.Nodes {
		if nr.Node == node {
			return nr.Status, true
		}
	}
	return Pending, false
}

// AwaitOption configures one BroadcastAwait.
type AwaitOption func(*awaitOptions)

type awaitOptions struct {
	quorum    int // 0: every member
	quorumSet bool
	stored    bool
}

// AwaitAll waits until every member at the call has answered for the
// message: delivered, or told CursorExpired, or (restarted) not owed it.
// It is the default. The last of AwaitAll and AwaitQuorum given counts.
func AwaitAll() AwaitOption {
	return func(o *awaitOptions) { o.quorum, o.quorumSet = 0, false }
}

// AwaitQuorum waits until n members (this node included) delivered the
// message. n must be between 1 and the number of members at the call.
func AwaitQuorum(n int) AwaitOption {
	return func(o *awaitOptions) { o.quorum, o.quorumSet = n, true }
}

// AwaitStored is for a durable topic (WithDurableTopics): it asks for the
// append on the nodes waited for, and the receipt's Stored says it. Every
// member's worker appends a durable message to its store before it
// delivers and acknowledges it, so the wait is the delivery's; what the
// option adds is the check that the topic is durable (an error otherwise)
// and Stored. Defaults to off.
func AwaitStored() AwaitOption { return func(o *awaitOptions) { o.stored = true } }

// BroadcastAwait is Broadcast that waits until the message is in the
// subscribers' mailboxes on the nodes asked for (AwaitAll, the default, or
// AwaitQuorum), or until ctx ends, and says per node what happened (see
// Receipt and DeliveryStatus). It costs nothing on any node but this one:
// the answers are the acknowledgements every broadcast gets, and a plain
// Broadcast pays nothing for this call's existence.
//
// ctx bounds the whole call, the wait for room in a full producer
// included. When ctx ends first, BroadcastAwait returns what was known so
// far (a cut node shows as Unreachable once a call to it failed) and an
// error wrapping ctx.Err(); the message, once queued, is still delivered
// like any other. With AwaitQuorum(n), when every node answered and fewer
// than n delivered, the error wraps ErrNoQuorum.
func (ps *PubSub) BroadcastAwait(ctx context.Context, from *actor.PID, topic string, msg proto.Message, opts ...AwaitOption) (Receipt, error) {
	if ctx == nil {
		return Receipt{}, fmt.Errorf("echopubsub: BroadcastAwait needs a context, got nil")
	}
	var o awaitOptions
	for i, opt := range opts {
		if opt == nil {
			return Receipt{}, fmt.Errorf("echopubsub: BroadcastAwait option %d is nil", i)
		}
		opt(&o)
	}
	nodes := ps.rt.Members()
	if o.quorumSet && (o.quorum < 1 || o.quorum > len(nodes)) {
		return Receipt{}, fmt.Errorf("echopubsub: AwaitQuorum(%d): n must be between 1 and the %d members", o.quorum, len(nodes))
	}
	if o.stored && (ps.dur == nil || !ps.dur.IsDurable(topic)) {
		return Receipt{}, fmt.Errorf("echopubsub: AwaitStored: topic %q is not durable on this node (WithDurableTopics)", topic)
	}
	a := core.NewAwait(nodes, o.quorum)
	if o.stored {
		a.AskStored()
	}
	if err := ps.publish(core.Wait{Ctx: ctx}, from, topic, msg, audience{await: a}); err != nil {
		return Receipt{}, err
	}
	var err error
	select {
	case <-a.Done():
	case <-ctx.Done():
		err = fmt.Errorf("echopubsub: BroadcastAwait on %q: %w", topic, ctx.Err())
	case <-ps.rt.Done():
		err = fmt.Errorf("echopubsub: BroadcastAwait on %q: %w", topic, ps.rt.Err())
	}
	a.Cancel() // its producer drops it (a settled one is dropped already)
	r := receiptOf(a.Snapshot(), o.stored)
	if err == nil && o.quorum > 0 && r.Count(Delivered) < o.quorum {
		err = fmt.Errorf("%w: %d of %d nodes delivered the message on %q, AwaitQuorum(%d)",
			ErrNoQuorum, r.Count(Delivered), len(r.Nodes), topic, o.quorum)
	}
	return r, err
}

func receiptOf(s core.AwaitSnapshot, stored bool) Receipt {
	r := Receipt{Node: s.Node, Group: s.Group, Incarnation: s.Incarnation, Cursor: s.Cursor, Taken: s.Taken}
	for _, n := range s.Nodes {
		st := DeliveryStatus(n.Status)
		r.Nodes = append(r.Nodes, NodeReceipt{Node: n.Addr, Status: st, Stored: stored && st == Delivered})
	}
	sort.Slice(r.Nodes, func(i, j int) bool { return r.Nodes[i].Node < r.Nodes[j].Node })
	return r
}
