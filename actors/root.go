package actors

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/supervision"
)

// MembersQuery asks the root for a *MemberSnapshot (producers ask on start).
type MembersQuery struct{}

// MemberSnapshot is the current member list.
type MemberSnapshot struct{ Members []cluster.Member }

// Runtime is everything the actors of one pubsub share. It is built once by
// Start and read-only afterwards, except the Dispatcher's snapshot (see
// Dispatcher).
type Runtime struct {
	Cfg         Config
	System      *actor.ActorSystem
	Node        string
	Incarnation uint64
	// Started is when Start began (monotonic): the node is owed every
	// message written after it.
	Started    time.Time
	Dispatcher *Dispatcher
	// Credits bound each producer's queued writes (Config.MaxPendingWrites):
	// a Broadcast takes one before sending a Write, the producer returns it
	// when it handles the Write.
	Credits []chan struct{}
	Hook    FaultHook
	Metrics *Metrics
	Log     zerolog.Logger

	producers []*actor.PID
	done      chan struct{}
	closeOnce sync.Once
	sendMu    sync.RWMutex // Enqueue's send (read) against Close and Fail (write)
	err       error        // why done was closed; written once, before the close
	// members is the addresses of the current members (this node
	// included), published by the root on every membership event for the
	// edge guard and DirectBroadcast, which read it from other goroutines.
	members atomic.Pointer[map[string]struct{}]
}

// NewRuntime builds the shared parts of a pubsub on system.
func NewRuntime(cfg Config, system *actor.ActorSystem, node string, hook FaultHook, log zerolog.Logger) *Runtime {
	started := time.Now()
	rt := &Runtime{Cfg: cfg, System: system, Node: node, Incarnation: uint64(started.UnixNano()), Started: started, Hook: hook,
		Log: log.With().Str("pubsub", cfg.Name).Str("node", node).Logger()}
	rt.Dispatcher = newDispatcher(system, node, rt.Log)
	rt.Metrics, _ = NewMetrics(nil, cfg.Name, cfg.PoolSize) // no-op instruments cannot fail; Start may replace them
	rt.done = make(chan struct{})
	rt.members.Store(&map[string]struct{}{node: {}})
	for i := 0; i < cfg.PoolSize; i++ {
		rt.Credits = append(rt.Credits, make(chan struct{}, cfg.MaxPendingWrites))
		rt.producers = append(rt.producers, rt.ProducerPID(uint32(i)))
	}
	return rt
}

// RootProps is the pubsub's root supervisor (see package supervision for
// the tree).
func (rt *Runtime) RootProps() *actor.Props {
	members := map[string]cluster.Member{} // survives a restart of the root, as the membership does not resend
	return actor.PropsFromProducer(func() actor.Actor {
		return &root{rt: rt, members: members}
	}, actor.WithSupervisor(supervision.OneForOne()), supervision.IgnorePoisonPill())
}

// IsMember reports whether addr is the address of a current member of this
// pubsub (this node included). Safe for concurrent use.
func (rt *Runtime) IsMember(addr string) bool {
	_, ok := (*rt.members.Load())[addr]
	return ok
}

func (r *root) publishMembers() {
	set := make(map[string]struct{}, len(r.members)+1)
	set[r.rt.Node] = struct{}{}
	for _, m := range r.members {
		set[m.Address] = struct{}{}
	}
	r.rt.members.Store(&set)
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

type root struct {
	rt       *Runtime
	members  map[string]cluster.Member
	stopping bool
}

func (r *root) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		rt := r.rt
		if _, err := ctx.SpawnNamed(actor.PropsFromProducer(newRegistry(rt.Dispatcher, rt.Cfg.MaxQueueLen), supervision.IgnorePoisonPill()), "registry"); err != nil {
			rt.Log.Error().Err(err).Msg("spawn registry")
		}
		for g := 0; g < rt.Cfg.PoolSize; g++ {
			group := uint32(g)
			props := supervision.Props(
				supervision.Child{Name: "producer", Props: actor.PropsFromProducer(
					newProducer(rt.Cfg, group, rt.Node, ctx.Self(), rt.Dispatcher, rt.Credits[g], rt.Hook, rt.Metrics, rt.Log), supervision.IgnorePoisonPill())},
				supervision.Child{Name: "worker", Props: actor.PropsFromProducer(
					newWorker(rt.Cfg, group, rt.Node, rt.Incarnation, rt.Started, rt.Dispatcher, rt.Hook, rt.Metrics, rt.Log), supervision.IgnorePoisonPill())},
			)
			if _, err := ctx.SpawnNamed(props, fmt.Sprintf("g%d", g)); err != nil {
				rt.Log.Error().Err(err).Msg("spawn pool group")
			}
		}
	case *actor.Stopping, *actor.Restarting:
		r.stopping = true
	case *actor.Stopped:
		// Stop closed done first; anything else that stops the root (its
		// parent giving up on restarts, a local Stop) leaves a pubsub that
		// can no longer deliver: say so from now on.
		if r.rt.Fail(fmt.Errorf("%w: the pubsub's root actor %s stopped", ErrStopped, ctx.Self().Id)) {
			r.rt.Log.Error().Msg("pubsub root stopped without Stop: this pubsub no longer delivers")
		}
	case *actor.Terminated:
		if !r.stopping && strings.HasPrefix(m.Who.Id, ctx.Self().Id+"/") {
			r.rt.Log.Error().Str("child", m.Who.Id).Msg("pubsub child stopped for good (restart intensity exceeded): this pubsub no longer delivers")
			r.rt.Fail(fmt.Errorf("%w: %s stopped for good (restart intensity exceeded)", ErrStopped, m.Who.Id))
		}
	case *cluster.Event:
		switch m.Kind {
		case cluster.Joined, cluster.Updated:
			r.members[m.Member.Name] = m.Member
		case cluster.Left:
			delete(r.members, m.Member.Name)
		}
		r.publishMembers()
		for _, p := range r.rt.producers {
			ctx.Send(p, m)
		}
	case *MembersQuery:
		snap := &MemberSnapshot{}
		for _, mem := range r.members {
			snap.Members = append(snap.Members, mem)
		}
		ctx.Respond(snap)
	case *messages.Broadcast:
		err := r.broadcast(ctx, m)
		if ctx.Sender() != nil {
			res := &messages.BroadcastResult{}
			if err != nil {
				res.Error = err.Error()
			}
			ctx.Respond(res)
		} else if err != nil {
			r.rt.Log.Error().Err(err).Str("topic", m.Topic).Msg("broadcast from actor failed")
		}
	}
}

// broadcast routes a Broadcast message sent by an actor exactly as
// ps.Broadcast would with the sender's PID. The payload bytes in the Any are
// buffered as they are: nothing is re-encoded.
func (r *root) broadcast(ctx actor.Context, m *messages.Broadcast) error {
	if m.Message == nil {
		return fmt.Errorf("echopubsub: broadcast message is nil")
	}
	typeName := string(m.Message.MessageName())
	if typeName == "" || !strings.Contains(m.Message.TypeUrl, "/") {
		return fmt.Errorf("echopubsub: broadcast message has an invalid type URL %q", m.Message.TypeUrl)
	}
	if m.Topic == "" {
		return fmt.Errorf("echopubsub: topic must not be empty")
	}
	from := ctx.Sender()
	e := Entry{Topic: m.Topic, PayloadType: typeName, Payload: m.Message.Value, OnlyNode: m.OnlyNode}
	if m.ExcludeSender && from != nil {
		e.Exclude = pidKey(from)
	}
	if err := r.rt.CheckSize(len(e.Topic), len(e.Payload)); err != nil {
		return err
	}
	if m.Local {
		r.rt.LocalDeliver(e, nil)
		return nil
	}
	return r.rt.Enqueue(from, e, nil)
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

// Enqueue sends one write to the sender's producer, waiting up to
// CallTimeout for room when that producer has MaxPendingWrites queued. msg,
// when not nil, is handed as is to this node's subscribers.
func (rt *Runtime) Enqueue(from *actor.PID, e Entry, msg proto.Message) error {
	g := rt.Group(from)
	select {
	case <-rt.done:
		return rt.err
	default:
	}
	select {
	case rt.Credits[g] <- struct{}{}:
	default:
		t := time.NewTimer(rt.Cfg.CallTimeout)
		defer t.Stop()
		select {
		case rt.Credits[g] <- struct{}{}:
		case <-t.C:
			return ErrBusy
		case <-rt.done:
			return rt.err
		}
	}
	// Under sendMu: a write accepted here reaches the producer's mailbox
	// before a Drain sent after Close, so a graceful Stop covers it.
	rt.sendMu.RLock()
	defer rt.sendMu.RUnlock()
	select {
	case <-rt.done:
		<-rt.Credits[g] // give back the credit the producer will never take
		return rt.err
	default:
	}
	rt.System.Root.Send(rt.producers[g], &Write{Entry: e, Msg: msg})
	return nil
}

// LocalDeliver hands e to this node's subscribers only (LocalBroadcast):
// not buffered, no cursor.
func (rt *Runtime) LocalDeliver(e Entry, msg proto.Message) {
	rt.Dispatcher.Deliver(&Item{Topic: e.Topic, Message: msg, PayloadType: e.PayloadType, Payload: e.Payload,
		Exclude: e.Exclude, Node: rt.Node, Local: true})
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
