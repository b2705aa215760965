package echopubsub

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Store keeps durable streams: for each stream (a topic named durable with
// WithDurableTopics), the rows appended to it, numbered by a cursor. Two
// implementations ship: NewBoltStore (embedded, one file per node, the
// default) and package cluster/pgstore (PostgreSQL shared by the cluster,
// its own module). Package test/storetest is the conformance suite every
// Store must pass.
//
// Cursors: a stream's first row has cursor 1 and each row the previous
// cursor + 1, with no hole: a row is visible to Read only once every row
// below it is. Append is all or nothing.
//
// Implementations must be safe for concurrent use.
type Store interface {
	// Append stores recs (all or none) and sets each one's Cursor. Records
	// of one stream get consecutive cursors in slice order. When Append
	// returns nil the rows are durable (they survive a crash of the
	// process and of the machine, as far as the storage's fsync does).
	Append(ctx context.Context, recs []Record) error
	// Read returns up to limit (> 0) rows of stream whose cursor is >=
	// from (0 reads from the start), in cursor order, and next, the cursor
	// after the last row returned (from, or 1 for from 0, when none). A
	// from past the stream's end + 1 is ErrCursorBeyondEnd: such a cursor
	// was not handed out by this store. A stream never appended to is
	// empty: reading it from 0 or 1 returns no rows and next 1.
	Read(ctx context.Context, stream string, from uint64, limit int) (recs []Record, next uint64, err error)
	// Shared reports whether every node of the cluster uses this store (a
	// shared database: the publishing node appends each row once, and a
	// cursor means the same row on every node) or it belongs to one node
	// (an embedded file: each node appends what it receives, and a cursor
	// is meaningful only on the node that handed it out).
	Shared() bool
	// Close releases the store. Calls after Close fail.
	Close() error
}

// RecordKind is what a stream row holds.
type RecordKind uint8

const (
	// RecordMessage is a broadcast message.
	RecordMessage RecordKind = 1
	// RecordGap marks messages of the stream this node's store does not
	// hold (a node-local store that missed them: see the package doc,
	// "Durable streams"). ReplaySession hands the session a *StreamGap.
	RecordGap RecordKind = 2
)

func (k RecordKind) String() string {
	switch k {
	case RecordMessage:
		return "message"
	case RecordGap:
		return "gap"
	}
	return fmt.Sprintf("RecordKind(%d)", uint8(k))
}

// Record is one row of a stream.
type Record struct {
	Stream string
	// Cursor is set by Append.
	Cursor uint64
	Kind   RecordKind
	// Origin is the node that published the message (for a gap: the
	// producer node whose messages are missing).
	Origin string
	// PayloadType and Payload are the message's full protobuf name and
	// wire bytes (RecordMessage).
	PayloadType string
	Payload     []byte
	// Missed is, for a gap, the number of messages missing (0: unknown).
	Missed uint64
	// Reason says why a gap is there.
	Reason string
}

// Store errors.
var (
	// ErrCursorBeyondEnd: a replay cursor past the stream's end + 1. It was
	// not handed out by this store: a cursor of another node's embedded
	// store, or a store that was deleted and created anew. Nothing is
	// skipped on its account: replay from a cursor this store handed out
	// (or from 0 after reloading from a source of truth).
	ErrCursorBeyondEnd = errors.New("echopubsub: replay cursor is beyond the stream's end")
	// ErrStoreClosed: the store was closed.
	ErrStoreClosed = errors.New("echopubsub: store closed")
	// ErrNoStore: ReplaySession on a pubsub started without a store, or a
	// stream that is not durable.
	ErrNoStore = errors.New("echopubsub: no durable store for this stream")
	// ErrUnauthorized wraps the authorizer's refusal (WithAuthorizer).
	ErrUnauthorized = errors.New("echopubsub: not authorized")
	// ErrBadLimit: ReplayOptions.Limit must be > 0.
	ErrBadLimit = errors.New("echopubsub: replay limit must be positive")
)

// ValidateRecord checks what a store needs of a record before it appends
// it (Store implementations call it).
func ValidateRecord(r *Record) error {
	switch {
	case r.Stream == "":
		return fmt.Errorf("echopubsub: record stream must not be empty")
	case r.Kind != RecordMessage && r.Kind != RecordGap:
		return fmt.Errorf("echopubsub: record kind must be RecordMessage or RecordGap, got %d", uint8(r.Kind))
	case r.Kind == RecordMessage && r.PayloadType == "":
		return fmt.Errorf("echopubsub: message record of stream %q has no payload type", r.Stream)
	}
	return nil
}

// WithStore makes the pubsub keep its durable topics (WithDurableTopics) in
// s. The caller owns s: Stop does not close it, so that it can outlive the
// pubsub (or serve a restarted one). Defaults to none; see also
// WithStorePath.
func WithStore(s Store) Option { return func(o *options) { o.store = s } }

// WithStorePath makes the pubsub open the embedded store (NewBoltStore) at
// path when it starts and close it when it stops: one file per node, no
// setup. Defaults to none.
func WithStorePath(path string) Option { return func(o *options) { o.storePath = path } }

// WithDurableTopics names the topics whose broadcasts are durable: each is
// appended to its stream (the stream is the topic) before Broadcast
// returns nil, and can be replayed with ReplaySession. A pattern ending in
// '*' names every topic with that prefix ("room:*"); any other pattern is
// one topic. Requires WithStore or WithStorePath. Defaults to none.
func WithDurableTopics(patterns ...string) Option {
	return func(o *options) { o.durable = append(o.durable, patterns...) }
}

// WithAuthorizer sets the function ReplaySession asks before it redelivers
// stream rows to a session: a non-nil error refuses (ReplaySession returns
// it wrapped in ErrUnauthorized). Defaults to allowing every session every
// durable stream.
func WithAuthorizer(fn func(sessionID, stream string) error) Option {
	return func(o *options) { o.authorize = fn }
}

// durability is the durable side of one pubsub.
type durability struct {
	store     Store
	owned     bool // opened by WithStorePath: closed by Stop
	exact     map[string]bool
	prefixes  []string
	authorize func(sessionID, stream string) error
}

func newDurability(o *options) (*durability, error) {
	if o.store != nil && o.storePath != "" {
		return nil, fmt.Errorf("echopubsub: WithStore and WithStorePath %q are exclusive", o.storePath)
	}
	if len(o.durable) > 0 && o.store == nil && o.storePath == "" {
		return nil, fmt.Errorf("echopubsub: WithDurableTopics %q needs WithStore or WithStorePath", o.durable)
	}
	d := &durability{store: o.store, exact: map[string]bool{}, authorize: o.authorize}
	for _, p := range o.durable {
		switch {
		case p == "" || p == "*":
			return nil, fmt.Errorf("echopubsub: WithDurableTopics pattern %q: must name a topic or a prefix", p)
		case strings.HasPrefix(p, SessionInboxPrefix):
			return nil, fmt.Errorf("echopubsub: WithDurableTopics pattern %q: session inboxes are not streams", p)
		case strings.HasSuffix(p, "*"):
			d.prefixes = append(d.prefixes, strings.TrimSuffix(p, "*"))
		default:
			d.exact[p] = true
		}
	}
	if o.storePath != "" {
		s, err := NewBoltStore(o.storePath)
		if err != nil {
			return nil, err
		}
		d.store, d.owned = s, true
	}
	return d, nil
}

// durable reports whether topic is a durable stream.
func (d *durability) durable(topic string) bool {
	if d == nil || d.store == nil {
		return false
	}
	if d.exact[topic] {
		return true
	}
	for _, p := range d.prefixes {
		if strings.HasPrefix(topic, p) {
			return true
		}
	}
	return false
}

func (d *durability) close() error {
	if d != nil && d.owned {
		return d.store.Close()
	}
	return nil
}
