package echopubsub

import "github.com/echopubsub/echopubsub/messages"

// Dedupe remembers the last Window keys it saw, to drop redeliveries.
//
// EchoPubSub is at-least-once: a batch whose acknowledgement is lost is sent
// again. Workers skip entries they already delivered while they know the
// producer, so most redeliveries never reach a subscriber; but a node that
// restarted, or a subscriber fed by several paths, can still see a message
// twice. Redeliveries arrive close together (on the retry after a lost ack),
// so a small window is enough.
//
// A Dedupe is owned by one subscriber actor and is not safe for concurrent
// use. Seen is O(1) and allocates only while the window fills.
type Dedupe[K comparable] struct {
	window int
	ring   []K
	next   int
	seen   map[K]struct{}
}

// NewDedupe returns a Dedupe over the last window keys (window >= 1; a
// smaller value is taken as 1).
func NewDedupe[K comparable](window int) *Dedupe[K] {
	if window < 1 {
		window = 1
	}
	return &Dedupe[K]{window: window, seen: make(map[K]struct{}, window)}
}

// Seen reports whether k is among the last Window keys, and records it.
func (d *Dedupe[K]) Seen(k K) bool {
	if _, ok := d.seen[k]; ok {
		return true
	}
	if len(d.ring) < d.window {
		d.ring = append(d.ring, k)
	} else {
		delete(d.seen, d.ring[d.next])
		d.ring[d.next] = k
		d.next = (d.next + 1) % d.window
	}
	d.seen[k] = struct{}{}
	return false
}

// DeliveryKey identifies a buffered message across the cluster: producer
// node, pool group, producer incarnation and cursor. Use it with a
// subscription made WithMetadata (or WithFormat: its deliveries carry the
// same).
type DeliveryKey struct {
	Node        string
	Group       uint32
	Incarnation uint64
	Cursor      uint64
}

// KeyOf returns d's DeliveryKey.
func KeyOf(d *messages.Delivery) DeliveryKey {
	return DeliveryKey{Node: d.Node, Group: d.Group, Incarnation: d.Incarnation, Cursor: d.Cursor}
}
