package core

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/faults"
)

// Write asks a producer to buffer one broadcast (the producer's ring keeps
// all but Msg).
type Write struct {
	Topic       string
	PayloadType string
	// Payload is the message's encoding, in an array nothing writes to
	// again (Broadcast's own proto.Marshal; a Broadcast message's Any
	// bytes, which its sender handed over with it): this node's encoded
	// subscribers are handed it as it is (delivery.FormatEncoded). The
	// producer's ring keeps a copy of its own.
	Payload []byte
	// Exclude is the key (address/id) of a subscriber that must not get it.
	Exclude string
	// OnlyNode, when set, is the one node whose subscribers get it.
	OnlyNode string
	// Msg, when set, is the original message, handed as is to this node's
	// subscribers (it is not buffered).
	Msg proto.Message
	// At is when Enqueue accepted it (Monotonic), inside the Broadcast call:
	// the time that decides whether a joining node is owed it.
	At int64
	// StoreCursor is the row's cursor in this node's durable store, set by
	// Durable.Publish when the write is durable (0: not stored).
	StoreCursor uint64
	// SharedCursor is StoreCursor when the store is shared by the cluster
	// (the same row on every node): it travels with the message, so that
	// every node's envelopes carry it. 0 for a node-local store, whose
	// cursors mean nothing elsewhere.
	SharedCursor uint64
	// Trace is the trace context it was published in (nil: none; always
	// nil when the pubsub does not trace).
	Trace *Trace
	// Await, when set, is the BroadcastAwait call waiting on this write:
	// its producer reports each node's answer to it (nil for Broadcast).
	Await *Await
}

// Epoch is the origin of Monotonic, fixed when the process starts.
var Epoch = time.Now()

// Monotonic is the process's monotonic clock in nanoseconds since Epoch:
// the write times in producers' rings and the join bounds compared with
// them.
func Monotonic() int64 { return int64(time.Since(Epoch)) }

// MembersQuery asks the root for a *MemberSnapshot (producers ask on start).
type MembersQuery struct{}

// MemberSnapshot is the current member list; Listed: the membership sent
// its first complete list (cluster.Listed).
type MemberSnapshot struct {
	Members []cluster.Member
	Listed  bool
}

// Runtime is everything the actors of one pubsub share: its configuration,
// identity, the queues of writes to its producers, metrics and the done
// channel. It is built once by Start; its exported fields are set by
// NewRuntime (Metrics by Start, before the tree is spawned) and only read
// afterwards.
type Runtime struct {
	Cfg         Config
	System      *actor.ActorSystem
	Node        string
	Incarnation uint64
	// Started is when Start began (monotonic); see also ReadyAt.
	Started time.Time
	// Queues carry each producer's writes (Config.MaxPendingWrites of them
	// at most) from Enqueue to the producer, in groups.
	Queues  []*WriteQueue
	Hook    faults.Hook
	Metrics *Metrics
	Log     zerolog.Logger
	// Durable is the durable-stream side (nil: none), set by Start before
	// the tree is spawned.
	Durable Durable

	producers []*actor.PID
	done      chan struct{}
	closeOnce sync.Once
	sendMu    sync.RWMutex // Enqueue's send (read) against Close and Fail (write)
	err       error        // why done was closed; written once, before the close
	// members is the addresses of the current members (this node
	// included), published by the root on every membership event for the
	// edge guard and DirectBroadcast, which read it from other goroutines.
	members atomic.Pointer[map[string]struct{}]
	// readyAt is when Start returned, in nanoseconds after Started, plus
	// one (0: Start still runs). Set once by MarkReady.
	readyAt atomic.Int64
	// departed is the nodes (address -> struct{}) whose producers retired
	// with this node's workers, their pubsub stopped on purpose, until they
	// register again (SetDeparted). Read by the protoactor log adapter.
	departed sync.Map
}

// SetDeparted records that node's pubsub stopped on purpose (gone: one of
// its producers retired here) or runs again (a producer registered). Safe
// for concurrent use.
func (rt *Runtime) SetDeparted(node string, gone bool) {
	if gone {
		rt.departed.Store(node, struct{}{})
	} else {
		rt.departed.Delete(node)
	}
}

// Departed reports whether node's pubsub stopped on purpose, as far as this
// node was told (SetDeparted). Safe for concurrent use.
func (rt *Runtime) Departed(node string) bool {
	_, ok := rt.departed.Load(node)
	return ok
}

// MarkReady records that Start returns now (Start calls it last).
func (rt *Runtime) MarkReady() {
	rt.readyAt.CompareAndSwap(0, int64(time.Since(rt.Started))+1)
}

// ReadyAt is when Start returned (monotonic), and false while it runs.
// Safe for concurrent use.
func (rt *Runtime) ReadyAt() (time.Time, bool) {
	n := rt.readyAt.Load()
	if n == 0 {
		return time.Time{}, false
	}
	return rt.Started.Add(time.Duration(n - 1)), true
}

// NewRuntime builds the shared parts of a pubsub on system.
func NewRuntime(cfg Config, system *actor.ActorSystem, node string, hook faults.Hook, log zerolog.Logger) *Runtime {
	started := time.Now()
	rt := &Runtime{Cfg: cfg, System: system, Node: node, Incarnation: uint64(started.UnixNano()), Started: started, Hook: hook,
		Log: log.With().Str("pubsub", cfg.Name).Str("node", node).Logger()}
	rt.Metrics, _ = NewMetrics(nil, cfg.Name, cfg.PoolSize) // no-op instruments cannot fail; Start may replace them
	rt.done = make(chan struct{})
	rt.members.Store(&map[string]struct{}{node: {}})
	for i := 0; i < cfg.PoolSize; i++ {
		rt.Queues = append(rt.Queues, NewWriteQueue(cfg.MaxPendingWrites))
		rt.producers = append(rt.producers, rt.ProducerPID(uint32(i)))
	}
	return rt
}

// IsMember reports whether addr is the address of a current member of this
// pubsub (this node included). Safe for concurrent use.
func (rt *Runtime) IsMember(addr string) bool {
	_, ok := (*rt.members.Load())[addr]
	return ok
}

// Members is the addresses of the current members (this node included),
// in no particular order. Safe for concurrent use.
func (rt *Runtime) Members() []string {
	set := *rt.members.Load()
	out := make([]string, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	return out
}

// SetMembers publishes the addresses of the current members (the root
// calls it on every membership event); this node is always one.
func (rt *Runtime) SetMembers(addrs []string) {
	set := make(map[string]struct{}, len(addrs)+1)
	set[rt.Node] = struct{}{}
	for _, a := range addrs {
		set[a] = struct{}{}
	}
	rt.members.Store(&set)
}

// RootPID, RegistryPID and ProducerPID are the fixed local PIDs of the tree.
func (rt *Runtime) RootPID() *actor.PID {
	return actor.NewPID(rt.System.Address(), RootName(rt.Cfg.Name))
}

func (rt *Runtime) RegistryPID() *actor.PID {
	return actor.NewPID(rt.System.Address(), RootName(rt.Cfg.Name)+"/registry")
}

// GroupPID is the supervisor of pool group group's producer and worker.
func (rt *Runtime) GroupPID(group uint32) *actor.PID {
	return actor.NewPID(rt.System.Address(), fmt.Sprintf("%s/g%d", RootName(rt.Cfg.Name), group))
}

func (rt *Runtime) ProducerPID(group uint32) *actor.PID {
	return actor.NewPID(rt.System.Address(), fmt.Sprintf("%s/g%d/producer", RootName(rt.Cfg.Name), group))
}

// Group is the pool group of a sender: a sender always hits one producer.
func (rt *Runtime) Group(from *actor.PID) uint32 {
	if from == nil || rt.Cfg.PoolSize == 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(from.Address))
	_, _ = h.Write([]byte{'/'})
	_, _ = h.Write([]byte(from.Id))
	return h.Sum32() % uint32(rt.Cfg.PoolSize)
}

// CheckSize rejects a message that could never be sent: one entry must fit
// in one batch (Config.MaxBatchBytes), or it would be retried forever.
func (rt *Runtime) CheckSize(topic, payload int) error {
	if n := topic + payload; n > rt.Cfg.MaxBatchBytes {
		return fmt.Errorf("%w: %d bytes of topic and payload, MaxBatchBytes is %d", ErrTooLarge, n, rt.Cfg.MaxBatchBytes)
	}
	return nil
}

// Errors of Enqueue.
var (
	// ErrBusy: the producer had MaxPendingWrites queued for CallTimeout.
	ErrBusy = errors.New("echopubsub: producer busy: no room within CallTimeout")
	// ErrStopped: the pubsub was stopped.
	ErrStopped = errors.New("echopubsub: stopped")
	// ErrTooLarge: one message exceeds Config.MaxBatchBytes.
	ErrTooLarge = errors.New("echopubsub: message too large")
)

// SessionInboxPrefix starts the topic on which a session receives requests
// and replies (echopubsub.SessionInboxPrefix). Only the library's own
// request/reply path writes to it; every user path, local or from the
// wire, refuses it (ReservedTopic).
const SessionInboxPrefix = "echopubsub.session/"

// ReservedTopic reports whether topic is a session inbox.
func ReservedTopic(topic string) bool { return strings.HasPrefix(topic, SessionInboxPrefix) }

// Wait says how long Enqueue waits for room in a full producer: until Ctx
// ends or, when Ctx is nil (the zero Wait), up to CallTimeout.
type Wait struct{ Ctx context.Context }

// Enqueue hands one write to the sender's producer, waiting for room when
// that producer has MaxPendingWrites queued, as wait says. w.Msg, when not
// nil, is handed as is to this node's subscribers.
func (rt *Runtime) Enqueue(wait Wait, from *actor.PID, w *Write) error {
	ctx := wait.Ctx
	if ctx == nil { // bounded by CallTimeout below; the store bounds its append itself
		ctx = context.Background()
	}
	g := rt.Group(from)
	q := rt.Queues[g]
	durable := rt.Durable != nil && w.OnlyNode == "" && rt.Durable.IsDurable(w.Topic)
	var timeout <-chan time.Time
	for {
		// Under sendMu: a write accepted here is in its producer's queue
		// (and the producer told) before Close returns, so the Drain a
		// graceful Stop sends after Close covers it.
		rt.sendMu.RLock()
		select {
		case <-rt.done:
			rt.sendMu.RUnlock()
			return rt.err
		default:
		}
		var (
			ok, notify bool
			room       <-chan struct{}
		)
		w.At = Monotonic() // accepted now, if there is room: before Broadcast returns
		if durable {
			// Room first, then the append, then the push: once stored it is
			// queued (a Close waits for it under sendMu), and an append that
			// fails queues nothing.
			if ok, room = q.Reserve(); ok {
				// A copy for the store, which may keep it: w itself stays
				// the caller's (a non-durable Broadcast allocates none).
				dw := *w
				if err := rt.Durable.Publish(ctx, &dw); err != nil {
					q.Release()
					rt.sendMu.RUnlock()
					return err
				}
				*w = dw // the store set its cursors
				notify = q.PushReserved(w)
			}
		} else {
			ok, notify, room = q.Push(w)
		}
		if notify {
			rt.System.Root.Send(rt.producers[g], &WritesReady{})
		}
		rt.sendMu.RUnlock()
		if ok {
			return nil
		}
		var cancelled <-chan struct{}
		if wait.Ctx != nil {
			cancelled = ctx.Done()
		} else if timeout == nil {
			t := time.NewTimer(rt.Cfg.CallTimeout)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-room:
		case <-timeout:
			return ErrBusy
		case <-cancelled:
			return fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
		case <-rt.done:
			return rt.err
		}
	}
}

// Done is closed once the pubsub can no longer deliver: by Close, or by
// Fail when the tree died.
func (rt *Runtime) Done() <-chan struct{} { return rt.done }

// Err is nil while Done is open, then why it closed: ErrStopped after
// Close, an error wrapping ErrStopped after Fail.
func (rt *Runtime) Err() error {
	select {
	case <-rt.done:
		return rt.err
	default:
		return nil
	}
}

// Close makes Enqueue fail with ErrStopped from now on: when it returns,
// every write Enqueue accepted is in its producer's mailbox. Idempotent.
func (rt *Runtime) Close() { rt.Fail(ErrStopped) }

// Fail closes Done with err (which must wrap ErrStopped) unless it is
// closed already; it reports whether it did.
func (rt *Runtime) Fail(err error) bool {
	did := false
	rt.closeOnce.Do(func() {
		rt.sendMu.Lock()
		rt.err = err
		close(rt.done)
		rt.sendMu.Unlock()
		did = true
	})
	return did
}

// WorkerName is the actor name of a pubsub's worker for group, on every node.
func WorkerName(pubsub string, group uint32) string {
	return fmt.Sprintf("%s/g%d/worker", RootName(pubsub), group)
}

// RootName is the actor name of a pubsub's root supervisor.
func RootName(pubsub string) string { return "echopubsub/" + pubsub }

// IsProducerID reports whether id is a producer's actor id
// (ProducerPID's: echopubsub/<name>/g<group>/producer), not a future's.
func IsProducerID(id string) bool {
	below, ok := strings.CutPrefix(id, RootName(""))
	if !ok {
		return false
	}
	_, rest, ok := strings.Cut(below, "/") // past <name>
	return ok && IsGroupChild(rest, "producer")
}

// IsGroupChild reports whether rest (an actor id below a pubsub's root) is
// a pool group's child named role: g<group>/<role>.
func IsGroupChild(rest, role string) bool {
	g, r, ok := strings.Cut(rest, "/")
	if !ok || r != role || len(g) < 2 || g[0] != 'g' {
		return false
	}
	_, err := strconv.ParseUint(g[1:], 10, 32)
	return err == nil
}
