package echopubsub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	zlog "github.com/rs/zerolog/log"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/actors/delivery"
	"github.com/echopubsub/echopubsub/actors/stream"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/durable"
	"github.com/echopubsub/echopubsub/internal/faults"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/supervision"
)

// Errors.
var (
	// ErrBusy: the sender's producer had Config.MaxPendingWrites queued for
	// as long as the call could wait (CallTimeout, or its context).
	ErrBusy = core.ErrBusy
	// ErrStopped: the pubsub was stopped (see Done and Err).
	ErrStopped = core.ErrStopped
	// ErrTooLarge: one message exceeds Config.MaxBatchBytes.
	ErrTooLarge = core.ErrTooLarge
	// ErrInvalidTopic: a topic (or a stream's name) that is not valid
	// UTF-8, or longer than Config.MaxTopicBytes. Every call that takes a
	// topic refuses it where it enters: a topic crosses nodes as a protobuf
	// string, which a peer cannot decode unless it is UTF-8. The error
	// names the rule and the value, escaped.
	ErrInvalidTopic = core.ErrInvalidTopic
	// ErrInvalidPID: a ...From broadcast's sender PID whose address or id is
	// not valid UTF-8 (it crosses nodes to exclude that subscriber).
	ErrInvalidPID = core.ErrInvalidPID
	// ErrUnmeasurable: a subscriber not spawned with SubscriberMailbox was
	// subscribed without WithUnboundedQueue.
	ErrUnmeasurable = delivery.ErrUnmeasurable
	// ErrNotLocal: the notice subscriber must be a local actor.
	ErrNotLocal = delivery.ErrNotLocal
	// ErrRemoteNotStarted: Start needs an actor system whose remote runs.
	ErrRemoteNotStarted = errors.New("echopubsub: the actor system's remote is not started")
	// ErrUnguardedRemote: Start was given an actor system whose remote runs
	// without the edge guard, so any process that reaches its port could
	// stop or mislead the pubsub's actors with forged system messages.
	ErrUnguardedRemote = errors.New("echopubsub: the actor system's remote runs without the edge guard: " +
		"build it with echopubsub.RemoteConfig(...), or add echopubsub.Guard(log) to your remote.Configure(...) call " +
		"(after any remote.WithServerOptions, which replaces the options before it); " +
		"WithUnguardedRemote() starts anyway")
	// ErrNotMember: the node named is not a current member of the pubsub.
	ErrNotMember = errors.New("echopubsub: not a member of this pubsub")
)

// SubscriberMailbox is the mailbox a bounded subscriber is spawned with: it
// counts the messages queued, which is what the subscriber's bound
// (Config.MaxQueueLen, WithMaxQueueLen) is checked against. It also prunes
// the actor's subscriptions when the actor is told to stop and, unless the
// actor's props name a dispatcher, drains its queue without yielding every
// 300 messages (Go still preempts it after 10 ms), so that a subscriber
// does not wait behind every runnable goroutine each 300 messages when
// many actors are stopping at once.
func SubscriberMailbox() actor.MailboxProducer { return delivery.SubscriberMailbox() }

// Option configures Start.
type Option func(*options)

type options struct {
	membership    cluster.Membership
	log           *zerolog.Logger
	hook          faults.Hook
	meterProvider metric.MeterProvider
	tracing       tracingOption // WithTracerProvider (tracing.go)
	// durable streams (store.go)
	store     Store
	durable   []string
	authorize func(sessionID, stream string) error
	retention Retention
	unguarded bool
}

// WithUnguardedRemote lets Start run on a remote built without Guard (see
// ErrUnguardedRemote), for a user who accepts the risk: any process that
// reaches the remote's port can then stop the pubsub's actors or cut
// subscribers off with forged system messages, and non-members' requests
// are not refused. Start logs one warning saying so. Defaults to off.
func WithUnguardedRemote() Option { return func(o *options) { o.unguarded = true } }

// WithMembership sets how nodes are found. Defaults to cluster.NewStatic with
// only this node.
func WithMembership(m cluster.Membership) Option { return func(o *options) { o.membership = m } }

// WithLogger sets the logger. Defaults to zerolog's global logger
// (github.com/rs/zerolog/log.Logger).
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = &l } }

// WithMeterProvider sets where the pubsub's OpenTelemetry metrics go (see
// docs/operations.md for the list). Defaults to the global provider
// (otel.GetMeterProvider), a no-op unless the application set one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meterProvider = mp }
}

// The test-only seam: this module's tests install a fault hook through
// internal/faults; nothing outside the module can.
func init() {
	faults.Option = func(h faults.Hook) any { return Option(func(o *options) { o.hook = h }) }
}

// SubscribeOption configures one subscription.
type SubscribeOption func(*subOptions)

type subOptions = delivery.SubOptions

// WithMetadata delivers a *messages.Delivery (producer node, group,
// incarnation, cursor, topic and the message) instead of the bare message,
// so the subscriber can verify its own stream. Defaults to the bare message.
func WithMetadata() SubscribeOption { return func(o *subOptions) { o.Meta = true } }

// WithMaxQueueLen bounds this subscriber's queue at n messages instead of
// Config.MaxQueueLen. Any n > 0 is accepted.
func WithMaxQueueLen(n int) SubscribeOption {
	return func(o *subOptions) { o.MaxQueueLen, o.MaxQueueLenSet = n, true }
}

// WithFormat chooses what the subscriber receives for each message, with
// the formats a session's envelopes have (WithDeliveryFormat):
//
//   - FormatEvent: the decoded message (a *messages.Delivery with
//     WithMetadata). The default.
//   - FormatEncoded: a *messages.Delivery (the metadata of WithMetadata:
//     producer node, group, incarnation, cursor, topic...) whose
//     PayloadType and Payload are the message's encoding, as its publisher
//     encoded it, and whose Message is nil: for a subscriber that only
//     passes bytes on (a gateway, a bridge, a logger). Nothing is decoded
//     for it: a node whose subscribers of a topic all asked for the
//     encoding does not decode that topic's messages at all, and a type
//     this node does not link arrives as its bytes (decode them with
//     messages.Decode). The publishing node hands over the bytes it
//     encoded in Broadcast, without encoding again; for a
//     *messages.Broadcast an actor sent in process, its Any's bytes, so
//     that actor must not write to them once sent.
//   - FormatBoth: a *messages.Delivery with Message and the encoding.
//
// The payload is shared, read-only, by every subscriber of this node that
// asked for it, and may keep the batch it came in alive while held: copy it
// to keep it long. Everything else is as for any subscription: the order,
// the bound and its BackPressure notices, CursorExpired, Unsubscribe.
// Any other value fails Subscribe with an error naming it.
func WithFormat(f DeliveryFormat) SubscribeOption {
	return func(o *subOptions) { o.Format = delivery.Format(f) }
}

// WithUnboundedQueue is the explicit opt-in for a subscriber whose mailbox
// cannot be measured (not spawned with SubscriberMailbox): it is never
// bounded, so never dropped for, and can grow without limit.
func WithUnboundedQueue() SubscribeOption { return func(o *subOptions) { o.Unbounded = true } }

// PubSub is one running pubsub on one node. Its methods are safe for
// concurrent use.
type PubSub struct {
	cfg        Config
	rt         *core.Runtime
	d          *delivery.Dispatcher // this node's subscribers
	membership cluster.Membership
	root       *actor.PID
	registry   *actor.PID
	sess       *sessions         // acknowledged sessions (session.go)
	dur        *durable.Engine   // durable streams (internal/durable)
	trim       *durable.TrimLoop // WithRetention (internal/durable/trimmer.go); nil without
	// tracer records publish spans (WithTracerProvider, tracing.go); nil:
	// tracing is off.
	tracer  trace.Tracer
	cons    *consumerBook // named consumers (consumer.go)
	consRun bool          // cons.run was started (the store keeps consumers)

	stopOnce sync.Once
	stopErr  error
	// startedUp: Health once found start-up done (see Health.Ready).
	startedUp atomic.Bool
}

// Start spawns the pubsub's supervision tree on system, whose remote must be
// started (see RemoteConfig), and joins the membership.
func Start(system *actor.ActorSystem, cfg Config, opts ...Option) (*PubSub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if system == nil {
		return nil, fmt.Errorf("echopubsub: actor system is nil")
	}
	addr := system.Address()
	if addr == "" || addr == "nonhost" {
		return nil, ErrRemoteNotStarted
	}
	o := options{meterProvider: otel.GetMeterProvider()}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("echopubsub: Start option %d is nil", i)
		}
		opt(&o)
	}
	if err := o.tracing.check(); err != nil {
		return nil, err
	}
	log := zlog.Logger
	if o.log != nil {
		log = *o.log
	}
	if err := checkGuard(system, o.unguarded, log); err != nil {
		return nil, err
	}
	if o.membership == nil {
		o.membership = cluster.NewStatic(addr)
	}
	dur, err := newDurability(&o)
	if err != nil {
		return nil, err
	}
	ps, err := start(system, cfg, addr, o, log, dur)
	if err != nil {
		return nil, err
	}
	ps.dur = dur
	// Gap rows no notice announces reach the sessions' WithFrom
	// subscriptions at once (one written before this, during Start, is
	// read by every session's catch-up: none is open yet).
	dur.OnGap(ps.readAllFollows)
	if cs, ok := dur.Store.(store.ConsumerStore); ok {
		ps.consRun = true
		go ps.cons.run(cs) // ended by Stop (cons.close)
	}
	if dur.Retention != (Retention{}) {
		ps.trim = durable.StartTrimLoop(dur.Store.(Trimmer), dur.Retention, cfg.RetentionInterval, ps.rt.Done(), ps.rt.Log, ps.rt.Metrics)
	}
	return ps, nil
}

func start(system *actor.ActorSystem, cfg Config, addr string, o options, log zerolog.Logger, dur *durable.Engine) (*PubSub, error) {
	rt := core.NewRuntime(cfg.engine(), system, addr, o.hook, log)
	if dur.Store != nil {
		dur.Node, dur.Timeout, dur.Log = addr, max(cfg.CallTimeout, durable.MinStoreTimeout), rt.Log
		if err := dur.LoadPredecessors(cfg.PoolSize); err != nil {
			return nil, err
		}
		rt.Durable = dur
	}
	if o.meterProvider != nil {
		m, err := core.NewMetrics(o.meterProvider, cfg.Name, cfg.PoolSize)
		if err != nil {
			return nil, fmt.Errorf("echopubsub: start %q: metrics: %w", cfg.Name, err)
		}
		rt.Metrics = m
	}
	dur.Metrics = rt.Metrics
	if dur.Local() == nil {
		rt.Log.Info().Msg("no node-local durable store: a producer incarnation of this node that ends before it reached a node cannot tell that node what it wrote for it (docs/operations.md, \"A producer that never reached a node\")")
	}
	d := delivery.NewDispatcher(system, addr, rt.Log)
	d.SetMetrics(rt.Metrics)
	tracer := o.tracing.tracer()
	d.SetTracer(tracer)
	// From here the edge guard (RemoteConfig) checks requests to this
	// pubsub's tree (members only): before the tree exists, as a request to
	// a pubsub the guard does not know passes unchecked to protoactor.
	prev := pubsubs.add(rt)
	root, err := system.Root.SpawnNamed(supervision.Tree(rt, d), core.RootName(cfg.Name))
	if err != nil { // one of that name runs already: it stays entered
		pubsubs.putBack(rt, prev)
		if errors.Is(err, actor.ErrNameExists) {
			return nil, fmt.Errorf("echopubsub: start %q: a pubsub named %q is already running on this actor system (%s): %w",
				cfg.Name, cfg.Name, system.Address(), err)
		}
		return nil, fmt.Errorf("echopubsub: start %q: %w", cfg.Name, err)
	}
	ps := &PubSub{cfg: cfg, rt: rt, d: d, membership: o.membership, root: root, registry: rt.RegistryPID(), tracer: tracer}
	ps.cons = newConsumerBook(ps)
	if err := ps.waitReady(); err != nil {
		rt.Close()
		_ = system.Root.StopFuture(root).Wait()
		pubsubs.remove(rt) // after the tree stopped (see pubsubs.add)
		return nil, fmt.Errorf("echopubsub: start %q: tree did not come up: %w", cfg.Name, err)
	}
	if err := ps.startSessions(); err != nil {
		rt.Close()
		_ = system.Root.StopFuture(root).Wait()
		pubsubs.remove(rt) // after the tree stopped (see pubsubs.add)
		return nil, fmt.Errorf("echopubsub: start %q: sessions: %w", cfg.Name, err)
	}
	ps.sess.engine.SetMetrics(rt.Metrics)
	self := cluster.Member{Address: addr, Name: addr, Incarnation: rt.Incarnation}
	if err := o.membership.Start(cluster.Env{System: system, Self: self, Service: cfg.Name, Owner: root, Log: rt.Log}); err != nil {
		rt.Close()
		_ = system.Root.StopFuture(ps.sess.manager).Wait()
		_ = system.Root.StopFuture(root).Wait()
		pubsubs.remove(rt) // after the tree stopped (see pubsubs.add)
		return nil, fmt.Errorf("echopubsub: start %q: membership: %w", cfg.Name, err)
	}
	rt.Log.Info().Int("pool_size", cfg.PoolSize).Int("buffer_size", cfg.BufferSize).Msg("echopubsub started")
	rt.MarkReady() // the instant probes' answers count from (see "Joined" in the package doc)
	return ps, nil
}

// waitReady returns once every actor of the tree answers, so that nothing
// sent to it after Start is lost. Supervisors spawn their children while
// they start, asynchronously, so a child may not exist at the first ask.
func (ps *PubSub) waitReady() error {
	deadline := time.Now().Add(ps.rt.Cfg.CallTimeout)
	// The root answers after its Started spawned the registry and the pool
	// groups; each group answers after its Started spawned its producer and
	// worker; only then are they asked themselves (see supervision.ReadyQuery:
	// a message racing a spawn can crash the sender).
	targets := []struct {
		pid *actor.PID
		msg interface{}
	}{{ps.root, &core.MembersQuery{}}}
	for g := 0; g < ps.rt.Cfg.PoolSize; g++ {
		targets = append(targets, struct {
			pid *actor.PID
			msg interface{}
		}{ps.rt.GroupPID(uint32(g)), &supervision.ReadyQuery{}})
	}
	for g := 0; g < ps.rt.Cfg.PoolSize; g++ {
		targets = append(targets, struct {
			pid *actor.PID
			msg interface{}
		}{ps.rt.ProducerPID(uint32(g)), &stream.StatsQuery{}})
	}
	for _, tg := range targets {
		for {
			left := time.Until(deadline)
			if left <= 0 { // protoactor treats a negative timeout as none at all
				return fmt.Errorf("%s: %w", tg.pid.Id, actor.ErrTimeout)
			}
			_, err := ps.rt.System.Root.RequestFuture(tg.pid, tg.msg, left).Result()
			if err == nil {
				break
			}
			if !errors.Is(err, actor.ErrDeadLetter) || time.Now().After(deadline) {
				return fmt.Errorf("%s: %w", tg.pid.Id, err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// NodeName is this node's name: its advertised remote address.
func (ps *PubSub) NodeName() string { return ps.rt.Node }

// Config is the configuration the pubsub runs with (a copy).
func (ps *PubSub) Config() Config { return ps.cfg }

// ActorSystem is the actor system the pubsub was started on.
func (ps *PubSub) ActorSystem() *actor.ActorSystem { return ps.rt.System }

// Logger is the pubsub's logger (WithLogger), with its "pubsub" and "node"
// fields: what a component built on the pubsub (package gateway) logs
// through.
func (ps *PubSub) Logger() zerolog.Logger { return ps.rt.Log }

// PID is the pubsub's well-known local PID. Actors may send it a
// *messages.Broadcast, routed as Broadcast with the sender's PID (use
// Request to get a *messages.BroadcastResult back). From another node the
// edge guard takes it only from a member of this pubsub and only as a
// request (with a sender, so that it can check who sent it).
func (ps *PubSub) PID() *actor.PID { return ps.root }

// Subscribe makes pid (a local actor) receive every message broadcast on
// topic, and a *messages.CursorExpired when it fell behind a producer node.
// Subscribing twice delivers twice. pid must be spawned with
// SubscriberMailbox unless WithUnboundedQueue is given.
func (ps *PubSub) Subscribe(pid *actor.PID, topic string, opts ...SubscribeOption) error {
	if pid == nil {
		return fmt.Errorf("echopubsub: subscriber PID is nil")
	}
	if err := ps.userTopic(topic); err != nil {
		return err
	}
	return ps.subscribe(pid, topic, opts...)
}

// subscribe is Subscribe without the reserved-topic check: a session's
// actor subscribes to its inbox through it.
func (ps *PubSub) subscribe(pid *actor.PID, topic string, opts ...SubscribeOption) error {
	o, err := subOpts(opts)
	if err != nil {
		return err
	}
	return ps.ask(&delivery.Subscribe{PID: pid, Topic: topic, Opts: o})
}

// SubscribeNamed subscribes the actor registered under name on this node,
// resolved at every send: a supervisor may restart it under the same name
// and it keeps its subscription. While nothing answers to the name, its
// messages are skipped (an absent consumer, not back-pressure) and counted:
// when the name is next resolved it first receives a *messages.Missed per
// topic saying how many it missed, then what follows.
func (ps *PubSub) SubscribeNamed(name, topic string, opts ...SubscribeOption) error {
	if name == "" {
		return fmt.Errorf("echopubsub: subscriber name is empty")
	}
	if err := ps.userTopic(topic); err != nil {
		return err
	}
	o, err := subOpts(opts)
	if err != nil {
		return err
	}
	return ps.ask(&delivery.Subscribe{Name: name, Topic: topic, Opts: o})
}

// Unsubscribe removes every subscription of pid to topic.
func (ps *PubSub) Unsubscribe(pid *actor.PID, topic string) error {
	if pid == nil {
		return fmt.Errorf("echopubsub: subscriber PID is nil")
	}
	return ps.ask(&delivery.Unsubscribe{PID: pid, Topic: topic})
}

// UnsubscribeNamed removes every subscription of name to topic.
func (ps *PubSub) UnsubscribeNamed(name, topic string) error {
	if name == "" {
		return fmt.Errorf("echopubsub: subscriber name is empty")
	}
	return ps.ask(&delivery.Unsubscribe{Name: name, Topic: topic})
}

// SubscriberCount is the number of subscriptions to topic on this node (a
// PID subscribed twice counts twice). Terminated PIDs are pruned.
func (ps *PubSub) SubscriberCount(topic string) int { return ps.d.SubscriberCount(topic) }

// SetNoticeSubscriber makes pid receive a copy of every back-pressure (and
// *messages.Missed) notice on this node (nil: none). pid must be a local
// actor spawned with SubscriberMailbox (ErrNotLocal, ErrUnmeasurable): it is
// bounded at Config.MaxQueueLen like any subscriber, and past it copies are
// dropped, newest first, with one BackPressure notice about itself.
func (ps *PubSub) SetNoticeSubscriber(pid *actor.PID) error {
	return ps.ask(&delivery.SetNotices{PID: pid})
}

func subOpts(opts []SubscribeOption) (subOptions, error) {
	var o subOptions
	for i, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("echopubsub: subscribe option %d is nil", i)
		}
		opt(&o)
	}
	return o, nil
}

func (ps *PubSub) ask(req interface{}) error {
	if err := ps.rt.Err(); err != nil {
		return err
	}
	// While the registry actor runs, its change is made here, under its
	// lock: through the actor it would cost a future and two goroutine
	// hand-offs, which subscription churn turns into delivery latency.
	if _, running := ps.rt.System.ProcessRegistry.GetLocal(ps.registry.Id); running {
		if ok, err := ps.d.Apply(ps.registry, req); ok {
			return err
		}
	}
	res, err := ps.rt.System.Root.RequestFuture(ps.registry, req, ps.rt.Cfg.CallTimeout).Result()
	if err != nil {
		return fmt.Errorf("echopubsub: registry: %w", err)
	}
	if r, ok := res.(*delivery.Reply); ok {
		return r.Err
	}
	return fmt.Errorf("echopubsub: registry answered %T", res)
}

// Done is closed once the pubsub can no longer deliver: after Stop, or when
// its supervision tree died (its root actor stopped, or a child exceeded its
// restart intensity). From then on Broadcast, Subscribe and the other calls
// fail with an error wrapping ErrStopped.
func (ps *PubSub) Done() <-chan struct{} { return ps.rt.Done() }

// Err is nil while the pubsub runs; once Done is closed it says why: exactly
// ErrStopped after Stop, an error wrapping ErrStopped otherwise.
func (ps *PubSub) Err() error { return ps.rt.Err() }

// audience says which of topic's subscribers a publish reaches; the zero
// value is every subscriber on every node (Broadcast).
type audience struct {
	// exceptFrom skips the subscriber from (the ...From calls).
	exceptFrom bool
	// thisNode hands the message to this node's subscribers only: not
	// buffered, no cursor (LocalBroadcast).
	thisNode bool
	// onlyNode, when set, is the one node whose subscribers get it, through
	// the buffered stream (DirectBroadcast).
	onlyNode string
	// await, when set, is the BroadcastAwait call waiting on the message
	// (receipt.go).
	await *core.Await
	// parent, when not nil, is the context whose span a traced publish
	// continues when the call has no context of its own (Reply: the
	// request's trace). nil: the wait's context, if any.
	parent context.Context
}

// publish encodes msg once and hands it to the sender's producer (or, for
// to.thisNode, to this node's subscribers only). wait says how long to wait
// for room in a full producer.
func (ps *PubSub) publish(wait core.Wait, from *actor.PID, topic string, msg proto.Message, to audience) error {
	if err := ps.userTopic(topic); err != nil {
		return err
	}
	return ps.write(wait, from, topic, msg, to)
}

// write is publish without the reserved-topic check: the request/reply path
// (sendToSession) writes to session inboxes through it, nothing else.
func (ps *PubSub) write(wait core.Wait, from *actor.PID, topic string, msg proto.Message, to audience) error {
	if ps.tracer != nil {
		return ps.tracedWrite(wait, from, topic, msg, to)
	}
	return ps.writeIn(wait, from, topic, msg, to, nil)
}

// writeIn is write with the trace context the message is published in
// (nil: none).
func (ps *PubSub) writeIn(wait core.Wait, from *actor.PID, topic string, msg proto.Message, to audience, tr *core.Trace) error {
	if err := ps.rt.Err(); err != nil {
		return err
	}
	if to.exceptFrom && from == nil {
		return fmt.Errorf("echopubsub: a ...From broadcast needs a sender PID")
	}
	// A value: the queue copies it (no allocation per Broadcast).
	var w core.Write
	typeName, payload, err := messages.Encode(msg)
	if err != nil {
		return fmt.Errorf("%w (topic %q)", err, topic)
	}
	w.Topic, w.PayloadType, w.Payload, w.OnlyNode, w.Msg, w.Trace, w.Await = topic, typeName, payload, to.onlyNode, msg, tr, to.await
	if to.exceptFrom {
		w.Exclude = delivery.Key(from)
	}
	if err := ps.rt.CheckWrite(&w); err != nil {
		return err
	}
	if to.thisNode {
		ps.d.DeliverLocal(&w) // hands out msg, and payload to encoded subscribers
		return nil
	}
	return ps.rt.Enqueue(wait, from, &w)
}

// Broadcast sends msg to every subscriber of topic on every node, at least
// once and in order per sender. It returns when msg is queued for its
// producer (encoded once, here); it waits up to CallTimeout when that
// producer has MaxPendingWrites queued, then fails with ErrBusy. from (may
// be nil) picks the producer: one sender always hits the same one. This
// node's subscribers receive msg itself: do not modify it afterwards.
func (ps *PubSub) Broadcast(from *actor.PID, topic string, msg proto.Message) error {
	return ps.publish(core.Wait{}, from, topic, msg, audience{})
}

// BroadcastContext is Broadcast with ctx bounding the wait for room in a
// full producer instead of CallTimeout: when ctx ends first it fails with an
// error wrapping both ErrBusy and ctx.Err(). A message it accepted is
// delivered like any other; cancelling ctx afterwards does not take it back.
func (ps *PubSub) BroadcastContext(ctx context.Context, from *actor.PID, topic string, msg proto.Message) error {
	if ctx == nil {
		return fmt.Errorf("echopubsub: BroadcastContext needs a context, got nil")
	}
	return ps.publish(core.Wait{Ctx: ctx}, from, topic, msg, audience{})
}

// BroadcastFrom is Broadcast to every subscriber but from.
func (ps *PubSub) BroadcastFrom(from *actor.PID, topic string, msg proto.Message) error {
	return ps.publish(core.Wait{}, from, topic, msg, audience{exceptFrom: true})
}

// LocalBroadcast sends msg to this node's subscribers of topic only. It is
// not buffered and has no cursor.
func (ps *PubSub) LocalBroadcast(topic string, msg proto.Message) error {
	return ps.publish(core.Wait{}, nil, topic, msg, audience{thisNode: true})
}

// LocalBroadcastFrom is LocalBroadcast to every subscriber but from (Phoenix's
// local_broadcast_from).
func (ps *PubSub) LocalBroadcastFrom(from *actor.PID, topic string, msg proto.Message) error {
	return ps.publish(core.Wait{}, from, topic, msg, audience{exceptFrom: true, thisNode: true})
}

// DirectBroadcast sends msg to the subscribers of topic on node only, with
// the same guarantee as Broadcast (it travels in the buffered stream; other
// nodes acknowledge it without delivering). node is a member's address (this
// node's included); any other node is an error, not a message nobody gets.
func (ps *PubSub) DirectBroadcast(node, topic string, msg proto.Message) error {
	return ps.direct(nil, node, topic, msg, false)
}

// DirectBroadcastFrom is DirectBroadcast to every subscriber on node but
// from (Phoenix's direct_broadcast_from). from also picks the producer, as
// in Broadcast.
func (ps *PubSub) DirectBroadcastFrom(from *actor.PID, node, topic string, msg proto.Message) error {
	return ps.direct(from, node, topic, msg, true)
}

func (ps *PubSub) direct(from *actor.PID, node, topic string, msg proto.Message, exceptFrom bool) error {
	if err := ps.userTopic(topic); err != nil {
		return err
	}
	if node == "" {
		return fmt.Errorf("echopubsub: DirectBroadcast needs a node name")
	}
	if !ps.rt.IsMember(node) {
		if err := ps.rt.Err(); err != nil {
			return err
		}
		return fmt.Errorf("%w: DirectBroadcast to %q", ErrNotMember, node)
	}
	return ps.publish(core.Wait{}, from, topic, msg, audience{exceptFrom: exceptFrom, onlyNode: node})
}

// Stats asks every producer of this node for its view: write cursor and,
// per node, read cursor and lag. It waits at most CallTimeout, less when
// ctx ends first (deadline or cancellation).
func (ps *PubSub) Stats(ctx context.Context) ([]messages.GroupStats, error) {
	if ctx == nil {
		return nil, fmt.Errorf("echopubsub: Stats needs a context, got nil")
	}
	if err := ps.rt.Err(); err != nil {
		return nil, err
	}
	out := make([]messages.GroupStats, 0, ps.rt.Cfg.PoolSize)
	for g := 0; g < ps.rt.Cfg.PoolSize; g++ {
		res, err := ps.request(ctx, ps.rt.ProducerPID(uint32(g)), &stream.StatsQuery{})
		if err != nil {
			return nil, fmt.Errorf("echopubsub: stats of group %d: %w", g, err)
		}
		gs, ok := res.(*messages.GroupStats)
		if !ok {
			return nil, fmt.Errorf("echopubsub: stats of group %d: got %T", g, res)
		}
		out = append(out, *gs)
	}
	return out, nil
}

// request asks a local actor, waiting at most CallTimeout and no longer
// than ctx. The future's own timeout ends its wait even when ctx ends first
// (the goroutine below never outlives CallTimeout).
func (ps *PubSub) request(ctx context.Context, pid *actor.PID, msg interface{}) (interface{}, error) {
	timeout := ps.rt.Cfg.CallTimeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if timeout <= 0 { // protoactor treats a negative timeout as none at all
		return nil, context.DeadlineExceeded
	}
	type result struct {
		v   interface{}
		err error
	}
	f := ps.rt.System.Root.RequestFuture(pid, msg, timeout)
	ch := make(chan result, 1)
	go func() { v, err := f.Result(); ch <- result{v, err} }()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Stop is graceful: Broadcast fails with ErrStopped from its first moment;
// every producer then delivers what it holds to every reachable node and
// retires its incarnation there (within ctx, at most 2 x CallTimeout), so
// peers' subscribers are not told "producer restarted" when this node comes
// back. Nodes that are away are not waited for: they are told CursorExpired
// when they return, as anything they had not acknowledged is lost with the
// buffer. Then Stop leaves the membership and stops the supervision tree. It
// is idempotent; it does not stop the actor system or its remote, which
// belong to the caller.
func (ps *PubSub) Stop(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("echopubsub: Stop needs a context, got nil")
	}
	ps.stopOnce.Do(func() {
		ps.rt.Close()
		ps.trim.Stop() // no store call after Stop: the caller may close the store then
		ps.drain(ctx)
		var errs []error
		if err := ps.membership.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("membership: %w", err))
		}
		if err := ps.stopSessions(); err != nil {
			errs = append(errs, fmt.Errorf("stop sessions: %w", err))
		}
		ps.cons.close(ps.consRun) // the last commits reach the store before Stop returns
		done := make(chan error, 1)
		f := ps.rt.System.Root.StopFuture(ps.root)
		go func() { done <- f.Wait() }() // ends when the future does (at most its timeout)
		select {
		case err := <-done:
			if err != nil {
				errs = append(errs, fmt.Errorf("stop tree: %w", err))
			}
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("stop tree: %w", ctx.Err()))
		}
		pubsubs.stop(ps.rt)
		ps.dur.Stop() // after the tree: no worker writes to the store now
		ps.stopErr = errors.Join(errs...)
		ps.rt.Metrics.Close()
		ps.rt.Log.Info().Msg("echopubsub stopped")
	})
	return ps.stopErr
}
