package presence

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
)

// Errors. Each is returned wrapped, with the value that caused it.
var (
	// ErrInvalidConfig: a Config field is out of range (New).
	ErrInvalidConfig = errors.New("presence: invalid config")
	// ErrStopped: the tracker was stopped (or its pubsub stopped).
	ErrStopped = errors.New("presence: tracker stopped")
	// ErrAlreadyTracked: this pid already tracks this key in this topic
	// (Update changes its metadata).
	ErrAlreadyTracked = errors.New("presence: already tracked")
	// ErrNotTracked: Untrack or Update of a presence this pid does not track.
	ErrNotTracked = errors.New("presence: not tracked")
	// ErrNotLocal: a tracked process or a subscriber must be an actor of the
	// pubsub's own actor system.
	ErrNotLocal = errors.New("presence: not a local actor")
	// ErrInvalidInput: an empty topic or key, or a string that is not
	// UTF-8 (presences cross nodes as protobuf strings).
	ErrInvalidInput = errors.New("presence: invalid input")
)

// Tracker tracks this node's presences, follows every other node's, and
// tells subscribers what changes. One per pubsub and Config.Topic; every
// method is safe for concurrent use.
type Tracker struct {
	ps      *echopubsub.PubSub
	cfg     Config
	system  *actor.ActorSystem
	pid     *actor.PID
	v       *view
	log     zerolog.Logger
	stopped atomic.Bool
	done    chan struct{} // closed when the tracker actor stopped
}

// New starts a tracker on ps: it subscribes to cfg.Topic, asks every other
// node for its presences and from then on follows their changes. Stop it
// (Tracker.Stop) before the pubsub, so that other nodes drop this node's
// presences at once rather than after DownAfter.
func New(ps *echopubsub.PubSub, cfg Config) (*Tracker, error) {
	if ps == nil {
		return nil, fmt.Errorf("%w: New needs a pubsub, got nil", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	inc, err := newIncarnation()
	if err != nil {
		return nil, err
	}
	t := &Tracker{ps: ps, cfg: cfg, system: ps.ActorSystem(), v: newView(), done: make(chan struct{})}
	t.log = ps.Logger().With().Str("presence_topic", cfg.Topic).Logger()
	a := newTrackerActor(t, inc)
	props := actor.PropsFromProducer(func() actor.Actor { return a }, actor.WithMailbox(echopubsub.SubscriberMailbox()))
	t.pid = t.system.Root.Spawn(props)
	if err := t.call(&startReq{}); err != nil {
		t.system.Root.Stop(t.pid)
		return nil, err
	}
	return t, nil
}

func newIncarnation() (uint64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("presence: incarnation: %w", err)
	}
	return binary.BigEndian.Uint64(b[:]) | 1, nil // never 0 (0 is "none")
}

// Track makes pid present in topic under key with meta, on every node,
// until pid stops, Untrack, or this node's tracker stops. A pid tracks a key
// in a topic once (ErrAlreadyTracked); several pids may track the same key
// (one Meta each, like a user on two devices). meta is copied.
func (t *Tracker) Track(pid *actor.PID, topic, key string, meta map[string]string) error {
	if err := t.check(pid, topic, key, meta); err != nil {
		return err
	}
	return t.call(&trackReq{pid: pid, topic: topic, key: key, meta: copyMeta(meta)})
}

// Untrack ends pid's presence under key in topic (ErrNotTracked when there
// is none).
func (t *Tracker) Untrack(pid *actor.PID, topic, key string) error {
	if err := t.check(pid, topic, key, nil); err != nil {
		return err
	}
	return t.call(&untrackReq{pid: pid, topic: topic, key: key})
}

// Update replaces the metadata of pid's presence under key in topic: a new
// ref, told as the old ref's leave and the new one's join in one Diff
// (ErrNotTracked when there is none). meta is copied.
func (t *Tracker) Update(pid *actor.PID, topic, key string, meta map[string]string) error {
	if err := t.check(pid, topic, key, meta); err != nil {
		return err
	}
	return t.call(&updateReq{pid: pid, topic: topic, key: key, meta: copyMeta(meta)})
}

// List is topic's presences on every node as this node knows them, by key;
// each key's metas are sorted by node and ref. A node silent for DownAfter
// has none. Do not modify the Meta maps.
func (t *Tracker) List(topic string) map[string][]Meta { return t.v.list(topic) }

// Count is how many presences this node knows, on every topic.
func (t *Tracker) Count() int {
	t.v.mu.RLock()
	defer t.v.mu.RUnlock()
	return t.v.count
}

// Subscribe makes pid (a local actor) receive a *Diff each time presences
// of topic join or leave, on any node. To follow a topic, Subscribe, then
// List: a Diff may repeat what List returned (applying it changes nothing,
// by ref). A stopped pid is unsubscribed.
func (t *Tracker) Subscribe(pid *actor.PID, topic string) error {
	if err := t.check(pid, topic, "-", nil); err != nil {
		return err
	}
	return t.call(&subscribeReq{pid: pid, topic: topic})
}

// Unsubscribe undoes Subscribe (nothing when pid is not subscribed).
func (t *Tracker) Unsubscribe(pid *actor.PID, topic string) error {
	if err := t.check(pid, topic, "-", nil); err != nil {
		return err
	}
	return t.call(&subscribeReq{pid: pid, topic: topic, off: true})
}

// Stop tells every other node that this node's presences are gone (they
// drop them at once, with a Diff) and stops the tracker. Call it before
// the pubsub's Stop. Idempotent; every call afterwards fails with
// ErrStopped.
func (t *Tracker) Stop(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("presence: Stop needs a context, got nil")
	}
	if t.stopped.Swap(true) {
		return nil
	}
	f := t.system.Root.RequestFuture(t.pid, &stopReq{}, t.cfg.CallTimeout)
	err := replyErr(f.Result())
	t.system.Root.Stop(t.pid)
	wait := time.NewTimer(t.cfg.CallTimeout) // an actor system already shut down stops nothing
	defer wait.Stop()
	select {
	case <-t.done:
	case <-ctx.Done():
		return fmt.Errorf("presence: Stop: %w", ctx.Err())
	case <-wait.C:
		return fmt.Errorf("presence: Stop: the tracker did not stop within CallTimeout (%v)", t.cfg.CallTimeout)
	}
	return err
}

// check refuses, before the actor, what cannot be tracked.
func (t *Tracker) check(pid *actor.PID, topic, key string, meta map[string]string) error {
	if t.stopped.Load() {
		return ErrStopped
	}
	if pid == nil {
		return fmt.Errorf("%w: pid is nil", ErrInvalidInput)
	}
	if pid.Address != t.system.Address() {
		return fmt.Errorf("%w: %s (this node is %s)", ErrNotLocal, pid, t.system.Address())
	}
	if topic == "" || !utf8.ValidString(topic) {
		return fmt.Errorf("%w: topic must be a non-empty UTF-8 string, got %q", ErrInvalidInput, topic)
	}
	if key == "" || !utf8.ValidString(key) {
		return fmt.Errorf("%w: key must be a non-empty UTF-8 string, got %q", ErrInvalidInput, key)
	}
	for k, v := range meta {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w: meta must be UTF-8, got %q: %q", ErrInvalidInput, k, v)
		}
	}
	return nil
}

// call asks the tracker actor and waits at most CallTimeout.
func (t *Tracker) call(req interface{}) error {
	select {
	case <-t.done:
		return ErrStopped
	default:
	}
	return replyErr(t.system.Root.RequestFuture(t.pid, req, t.cfg.CallTimeout).Result())
}

func replyErr(res interface{}, err error) error {
	if err != nil {
		if errors.Is(err, actor.ErrDeadLetter) {
			return ErrStopped
		}
		return fmt.Errorf("presence: tracker did not answer: %w", err)
	}
	if r, ok := res.(*reply); ok {
		return r.err
	}
	return fmt.Errorf("presence: unexpected reply %T", res)
}

func copyMeta(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// newRef is a presence's ref: the tracker's incarnation and a counter,
// unique across nodes and restarts.
func newRef(inc, n uint64) string {
	return strconv.FormatUint(inc, 36) + "." + strconv.FormatUint(n, 36)
}
