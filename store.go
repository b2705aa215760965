package echopubsub

import (
	"errors"
	"time"

	"github.com/echopubsub/echopubsub/internal/durable"
	"github.com/echopubsub/echopubsub/store"
)

// The contract of durable streams is package store: these are its names
// as this package has always had them (aliases: the same types and
// values).
type (
	// Store keeps durable streams: see store.Store.
	Store = store.Store
	// Trimmer is what a Store adds to enforce a Retention: see
	// store.Trimmer.
	Trimmer = store.Trimmer
	// Trimmed is what one Trim removed from one stream: see store.Trimmed.
	Trimmed = store.Trimmed
	// RecordKind is what a stream row holds: see store.RecordKind.
	RecordKind = store.RecordKind
	// Record is one row of a stream: see store.Record.
	Record = store.Record
	// Retention bounds what the store keeps of each durable stream: see
	// store.Retention.
	Retention = store.Retention
)

// Record kinds: see store.RecordMessage and store.RecordGap.
const (
	RecordMessage = store.RecordMessage
	RecordGap     = store.RecordGap
)

// Store errors.
var (
	// ErrCursorBeyondEnd is store.ErrCursorBeyondEnd: a replay cursor past
	// the stream's end + 1, not handed out by this store.
	ErrCursorBeyondEnd = store.ErrCursorBeyondEnd
	// ErrStoreClosed is store.ErrStoreClosed: the store was closed.
	ErrStoreClosed = store.ErrStoreClosed
	// ErrBadLimit is store.ErrBadLimit: ReplayOptions.Limit must be > 0.
	ErrBadLimit = store.ErrBadLimit
	// ErrNoStore: ReplaySession on a pubsub started without a store, or a
	// stream that is not durable.
	ErrNoStore = errors.New("echopubsub: no durable store for this stream")
	// ErrUnauthorized wraps the authorizer's refusal (WithAuthorizer).
	ErrUnauthorized = errors.New("echopubsub: not authorized")
)

// WithStore makes the pubsub keep its durable topics (WithDurableTopics) in
// s. The caller owns s: Stop does not close it, so that it can outlive the
// pubsub (or serve a restarted one). Defaults to none. The embedded default
// is package store/seglog (seglog.Open); module store/bolt (bolt.Open) is the
// other embedded store; PostgreSQL is module store/postgres.
func WithStore(s Store) Option { return func(o *options) { o.store = s } }

// WithDurableTopics names the topics whose broadcasts are durable: each is
// appended to its stream (the stream is the topic) before Broadcast
// returns nil, and can be replayed with ReplaySession. A pattern ending in
// '*' names every topic with that prefix ("room:*"); any other pattern is
// one topic. Requires WithStore. Defaults to none.
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

// StoreHealth is a node-local store that fails: what the node could not
// store and why (Health.Store). Live delivery goes on; the rows not stored
// become gap rows once the store takes writes again.
type StoreHealth struct {
	Failing bool      `json:"failing"`
	Since   time.Time `json:"since"`
	Error   string    `json:"error"`
	// Unstored is the durable rows received since Since and not stored:
	// each will be counted in a gap row.
	Unstored uint64 `json:"unstored"`
}

// newDurability is the durable engine of o's options (internal/durable).
func newDurability(o *options) (*durable.Engine, error) {
	return durable.New(durable.Options{Store: o.store, Durable: o.durable, Authorize: o.authorize,
		Retention: o.retention, InboxPrefix: SessionInboxPrefix})
}

// storeHealth reports a failing store (nil: none, or it works).
func storeHealth(d *durable.Engine) *StoreHealth {
	h := d.Health()
	if h == nil {
		return nil
	}
	return (*StoreHealth)(h)
}
