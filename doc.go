// Package echopubsub is reliable cluster pub/sub for Proto.Actor: a port of
// EchoPubSub (an at-least-once Phoenix.PubSub adapter) to Go. Either a
// subscriber receives every message in order, or it is told that it fell
// behind. Never a silent gap.
//
// # Quick start
//
// Start a pubsub on each node (same Config.Name, same members), subscribe
// an actor spawned with SubscriberMailbox, broadcast; the subscriber
// receives the message, or a notice of what it lost:
//
//	sys := actor.NewActorSystem() // per node; its remote runs with RemoteConfig:
//	remote.NewRemote(sys, echopubsub.RemoteConfig("10.0.0.1", 8001, log)).Start()
//	members := cluster.NewStatic("10.0.0.1:8001", "10.0.0.2:8001")
//	ps, err := echopubsub.Start(sys, echopubsub.DefaultConfig("scores"), echopubsub.WithMembership(members))
//	sub := sys.Root.Spawn(actor.PropsFromFunc(receive, actor.WithMailbox(echopubsub.SubscriberMailbox())))
//	err = ps.Subscribe(sub, "match:42")
//	err = ps.Broadcast(nil, "match:42", wrapperspb.String("1-0")) // on any node
//	// receive's ctx.Message() is the *wrapperspb.StringValue, in order per sender;
//	// or *messages.CursorExpired (this node fell behind a producer: reload state);
//	// or *messages.BackPressure (this subscriber's queue was full: newer ones dropped).
//
// Example runs the same with two nodes in one process; the README's Use
// section is it as a complete main.go.
//
// # Packages
//
//   - echopubsub (this package): Start, PubSub (Broadcast family,
//     Subscribe, Stats, Health, Stop), sessions (OpenSession, Ack,
//     ReplaySession, requests), Config, durable streams (WithStore; the
//     Store contract is package store, aliased here), RemoteConfig
//     and TLS.
//   - messages: wire, notice and report types. cluster, cluster/consul:
//     membership (static list, Consul).
//   - gateway (its own module: go get .../echopubsub/gateway): the
//     WebSocket gateway (one socket, one session), built on this
//     package's API.
//   - store/seglog: the embedded Store, a segmented log in one directory
//     per node (one fdatasync per group commit; standard library only);
//     store/bolt (its own module): an embedded Store in one bbolt file per
//     node (constant-time open, no index in memory, about half the
//     durable append rate);
//     store/postgres (its own module): PostgreSQL; store/storetest: the conformance suite and benchmarks every Store
//     runs. This package imports none of them, so a program that does not
//     use them neither links nor downloads websocket, bbolt or pgx.
//   - ringbuf (the cursor rules), supervision (the tree), actors/stream
//     (producer and worker: the node-to-node stream), actors/delivery
//     (dispatcher, registry, counting mailbox): the machinery, for reading
//     the rules. See docs/architecture.md.
//
// What follows are the design answers: the guarantee, what a joining node
// is owed, back-pressure, sessions, durable streams, the trust boundary.
//
// # The guarantee
//
// Every node's producer keeps the last Config.BufferSize messages in a ring
// buffer (package ringbuf), each stamped with an absolute write cursor, and a
// read cursor per remote node that advances only when that node's worker
// acknowledges a batch. A node that was cut off gets the messages it missed,
// in order, when it comes back; a node that stayed away longer than the
// buffer covers is sent *messages.CursorExpired{Node} instead, so the
// application reloads from a source of truth; it names what was lost, the
// producer cursors [From, To) of ProducerIncarnation (0: not known; see
// docs/reliability.md, "Exact gap ranges"). Delivery is at-least-once: a
// lost acknowledgement means a redelivery (see Dedupe).
//
// # Joined
//
// A node's subscribers receive every message broadcast by any producer after
// that node's Start returned, in order per sender, as long as the producer's
// buffer still holds it, however long the first connection takes (a peer not
// yet listening, a refused or dead-lettered call, a partition at start-up).
// A message whose Broadcast returned before the node's Start was called is
// history: not delivered, and no notice about it. Only when the buffer no
// longer holds a message the node is owed is it told CursorExpired. No caller
// waits for a join.
//
// How: each message is stamped, inside its Broadcast call, with the time
// Broadcast accepted it (the process's monotonic clock). A producer
// registers with a worker in two steps. A probe changes nothing on the
// worker; its answer says how long ago the worker's node's Start returned
// (zero while Start still runs), on the worker's own monotonic clock (a
// duration, so no clock agreement between machines is needed), and whether
// the worker already holds this producer incarnation and at which cursor.
// The instant the answer names lies between the node's Start call and its
// return, and the worker answered after the probe was sent: so the producer
// takes (probe sent - age) as the earliest that instant can be, and owes the
// node every message stamped from then on (ringbuf.JoinSince, the one home
// of this rule). ringbuf's Join turns that into a decision (messages from there, or Expired when an owed message was
// overwritten), and a join seeds the worker there. A join is idempotent and
// names the worker incarnation it was computed for, and every answer carries
// the worker's own cursor, so a late, duplicated or reordered Register,
// RegisterAck, Batch or BatchAck never moves a cursor: it cannot cause an
// expiry of buffered messages, nor a duplicate. A worker that already holds
// the producer (the producer forgot the node after ForgetAfter, or
// restarted its peer state) resumes from its own cursor.
//
// The bound: a message broadcast after Start returned is always delivered
// (the producer's bound errs only towards earlier). A message whose
// Broadcast returned before Start was called is history as long as the
// probe reached the node faster than the node's Start ran; otherwise up to
// the difference before Start may be delivered too, plus 0.1% of the node's
// age at the probe for the two clocks' rates (NTP slews each by at most
// 500 ppm). A probe answered slowly (a request queued while the connection
// was being made) is followed by another, up to five, and the tightest
// bound is kept. A probe's round trip and Start each take about a
// millisecond on loopback, so only a Broadcast that returned within a few
// milliseconds of Start being called is uncertain; under heavy load the
// round trip can exceed the gap, and the node then gets those messages as
// history (TestLateNodeGetsNothingBroadcastBeforeItsStart asserts this
// bound, not their absence). Measured: docs/benchmarks.md, "Figures behind
// code comments".
//
// A producer hands a call to a node to protoactor only once the node's
// address accepts a connection (before its first call, and after a failed
// one): a refused connection is an answer, retried after RetryInterval,
// like a dead-lettered call. (A call to an address that refuses would leave
// protoactor's endpoint in a failed dial for two seconds, losing the node's
// answers queued meanwhile.) So with both nodes up the first broadcast
// arrives within BatchInterval plus a RetryInterval, in either start order.
//
// A producer that ends (a crash, or a graceful Stop while the node stayed
// unreachable) before it ever reached a node cannot tell that node what it
// wrote for it, since the node never heard of it. With a node-local store
// its next incarnation does: each producer records a lease in the store
// (when it may last have written), and the next incarnation's join tells a
// node that started before then (Register.predecessor_owed): CursorExpired,
// Missed 0 (unknown). A node that started later was owed nothing and is
// told nothing. Without a node-local store this case cannot be told, and
// Start says so in one log line; see "A producer that never reached a
// node" in docs/operations.md.
//
// # Back-pressure
//
// A subscriber whose mailbox holds Config.MaxQueueLen messages (or its
// WithMaxQueueLen) is not sent more: the newest message is dropped for it, and
// it receives one *messages.BackPressure DROPPING notice, then one RESUMED
// notice when it is found back under its bound. The node-level stream stays
// intact (the batch is still acknowledged, other subscribers get everything),
// so for one subscriber the guarantee reads: every message in order, or told
// by CursorExpired, or told by a DROPPING notice — the notices bracket
// exactly what it has to reconcile. Subscribers spawn with SubscriberMailbox
// so their queue can be measured; a subscriber that cannot be measured must
// opt in with WithUnboundedQueue.
//
// # Sessions
//
// An acknowledged session (OpenSession) extends the guarantee to the
// application: each durable delivery to the session's owner takes a
// reservation {session, delivery id}, inserted before the *Envelope enters
// the owner's mailbox, and holds it until the application acks it (Ack,
// AckMany, AckFirst, or the consume helpers, which ack only what a handler
// committed). The pending count is the library's own counter. Above
// Config.SoftQueue the owner gets a *messages.SessionPressure (once per
// transition); a delivery that would exceed Config.HardQueue is rolled back
// and Config.SlowConsumerAction closes the session (*messages.SessionClosed)
// or also stops the owner. Live deliveries are paced by the session's room:
// at SoftQueue pending the next one waits for acks, so that a backlog (a
// node's catch-up) never closes an owner that acks at once; an owner that
// acks nothing for Config.RoomWait is not paced until it acks again (see
// "Pacing" in package internal/session). An owner that hands its envelopes
// on to the consumer that acks them, through a queue of its own (the
// gateway: a socket's queue and writer), opens WithHandoff and reports
// with Handed what it handed on, so that only the consumer's own time
// counts against it. A session that holds deliveries and acks none for
// Config.StallAfter (default 30s) is stalled: its owner gets one
// *SessionStalled, and one *SessionResumed at its next ack; SessionStats
// and the gauge echopubsub.session.stalled show it, and nothing is
// delivered differently. A full node-wide table
// (Config.MaxDeliveryReservations) refuses deliveries and says so. A
// session also receives CursorExpired and BackPressure like any subscriber,
// so for a session the guarantee reads: every message in order, or told.
// Requests and replies (RequestFromSession, Reply) are durable deliveries with
// a context, carried by the stream itself to the node named in the session
// id. Package gateway serves sessions to browsers over WebSocket
// (docs/gateway.md).
//
// # Subscriptions
//
// Subscribe and Unsubscribe cost amortized O(1) in what the node holds: a
// map lookup, an append to (or a mark in) the topic's own subscriber list,
// and the subscriber's own subscriptions. Nothing else is copied, so a
// node holds a million subscriptions (measured: BenchmarkSubscribe in
// package actors/delivery, docs/benchmarks.md "Subscriptions"). Delivery reads the
// topic table without a lock: topics live in a concurrent map, each topic's
// list behind an atomic pointer. The registry is its only writer, one change
// at a time under its lock; Subscribe makes its change in the caller's
// goroutine (a few microseconds), the registry actor handles terminations.
// A subscriber receives every message broadcast after its Subscribe
// returned.
// The registry's memory is about 230 bytes a subscription.
//
// A subscriber spawned with SubscriberMailbox is pruned when it is told to
// stop: its mailbox drops its subscriptions, in the goroutine that stops
// it, before the Stop is posted (it is not watched, so stopping 100,000
// subscribers at once costs the registry no Terminated messages). A
// subscriber subscribed WithUnboundedQueue is watched and pruned when it
// terminates (a Terminated is acted on only when the process registry
// confirms the PID is gone). A subscriber given by name (SubscribeNamed) is resolved at every
// send; while nothing answers to the name its messages are skipped and
// counted, and when it is next found running it first receives one
// *messages.Missed per topic (topic and count), then what follows. The
// notice subscriber (SetNoticeSubscriber) is local and bounded at
// Config.MaxQueueLen like any subscriber: past it, copies are dropped and it
// gets its own BackPressure notice.
//
// # Durable streams
//
// A topic named with WithDurableTopics is a durable stream (the stream is
// the topic): each Broadcast (or BroadcastFrom, BroadcastContext, or a
// *messages.Broadcast sent to PID) of it is appended to a Store before the
// call returns nil, and ReplaySession redelivers a bounded page of it to a
// session, through WithAuthorizer and the session's pressure rules, from a
// cursor. If the append fails the call returns its error and nothing is
// broadcast. DirectBroadcast and LocalBroadcast are not durable. Every node
// must name the same durable topics.
//
// Where rows are written, and what a cursor means:
//
//   - Shared store (module store/postgres, PostgreSQL): the publishing
//     node appends each row once. A stream's cursor is global to the
//     cluster: cursor n is the same row on every node, so a session on any
//     node replays from any cursor. Rows become visible in cursor order
//     (an append holds the stream's counter row lock until it commits), so
//     a replay never steps over a row that commits later.
//   - Embedded store (package store/seglog, a segmented log in one
//     directory per node; or store/bolt, one bbolt file per node): each
//     node appends what it receives: the publishing node in
//     Broadcast, every other node in its worker, one transaction per
//     batch, before it acknowledges the batch (an acknowledgement means
//     stored). Each message is stored once: a worker that crashed while
//     delivering a batch takes the rows it stored when the batch is sent
//     again, and a join that reaches back before the node's Start (see
//     Joined) goes on from where the store got to (what it holds there
//     is history: not delivered live again, read from the store with
//     WithFrom). A cursor is per node: meaningful only on the node that
//     handed it out (a session lives on one node, so its client replays
//     from that node's cursors). A cursor past a stream's end is
//     ErrCursorBeyondEnd, never an empty page that would skip.
//
// A session's envelope of a durable topic carries its row's cursor in the
// node's store (Envelope.Cursor), live as well as replayed: with an
// embedded store the node appended every message it got, and with a shared
// store the publisher's cursor travels in the batch.
//
// Resume from a cursor: SessionSubscribe(id, topic, WithFrom(c)) hands
// the session the stored rows from c on (read a page at a time, each a
// durable delivery that waits at SoftQueue for acks, never skipped), then
// the live stream, in cursor order with no gap and no duplicate at the
// handover, whatever is published meanwhile. The store decides: a live
// envelope is delivered only when its cursor is the next one; one above it
// means rows came in between (another producer's, a gap row, one lost on
// the way) and the session reads them from the store. The owner learns
// when its catch-up is over: one *CaughtUp{SessionID, Stream, Cursor}
// arrives after the last row read from the store and before the first
// live envelope. A client keeps the
// cursor of its last committed envelope and resumes with WithFrom(cursor +
// 1), on the same node with an embedded store, on any node with a shared
// one. Or the store keeps that cursor: SessionSubscribe(id, topic,
// WithConsumer(name)) names a durable consumer, whose committed cursor
// (the last row up to which every envelope was acked) the store keeps
// with the stream; the same name resumes after it, after a restart too,
// and retention keeps what it has not committed, up to MaxBytes
// (PubSub.Consumers lists them with their lag; docs/operations.md,
// "Durable consumers").
//
// What a node-local store missed is marked, never skipped: a gap row,
// which ReplaySession hands the session as a *StreamGap (and counts in
// ReplayStats.Gaps) before the rows after it. The node writes one into
// every stream it holds (like CursorExpired, which every subscriber gets:
// the lost messages' topics are not known) when its worker tells
// CursorExpired (fell behind the buffer, producer restarted, producer
// stopped first, owed messages overwritten), and when a producer joins
// after this node restarted and the store shows a hole: in the same
// transaction as its rows, the node records how far it got in each
// producer incarnation's stream; on the join it compares. Same
// incarnation, joined beyond that point: the node was away while it wrote
// (gap). A new incarnation: none if the previous one retired here at that
// point, or if the producer's node says (Register.predecessor_*, recorded
// in its own store at a graceful Stop) that it ended exactly there;
// otherwise a gap; then a gap for what the new incarnation wrote before
// this node started. So a graceful full-cluster restart marks nothing,
// and a node that was away while others wrote gets one gap row per
// producer. Limits are in docs/operations.md ("Durable streams").
//
// Retention: WithRetention(Retention{MaxAge, MaxRows, MaxBytes}) (a zero
// field is no limit) makes the pubsub trim every stream of its store, at
// Start and every Config.RetentionInterval, oldest rows first, through the
// store's Trimmer (store/seglog, store/bolt and store/postgres implement it; Start
// refuses a store that does not). Trimming deletes in bounded chunks, so
// appends wait for at most about one chunk. Cursors are never reused: a
// stream's end survives its rows. A replay (or a WithFrom catch-up) from a
// cursor below what is kept hands the session a *StreamTruncated{From,
// FirstKept} first, then the rows from FirstKept (ReplayStats.Truncated):
// the store forgot, and says so; a read never jumps silently.
//
// # Design answers
//
//   - Broadcast encodes the message once, in the caller, and returns when the
//     write is queued for its producer. It does not wait for remote delivery.
//     A fast publisher cannot grow a producer's mailbox without bound: each
//     producer admits Config.MaxPendingWrites queued writes, and Broadcast
//     waits (up to CallTimeout, then ErrBusy) for room.
//   - This node's subscribers receive a broadcast once, from the producer, when
//     it is written to the buffer (before any remote node), with the same
//     cursor a remote node sees.
//   - A batch in flight when its node leaves stays unacknowledged: the node's
//     read cursor is kept (for Config.ForgetAfter) and the batch is replayed
//     when it returns. A node that restarts is a new node: it gets what was
//     written after its restart (see Joined). When a producer restarts, its
//     buffer is gone: every worker that knew the old incarnation tells its
//     subscribers CursorExpired, as whatever it had not delivered is lost.
//   - Nothing is sent when nothing changed: a producer learns a node is back
//     from its own retries (every RetryInterval) and from protoactor's
//     endpoint events; Consul membership adds health checks.
//
// # Trust boundary
//
// What a peer may send to a node's pubsubs is decided in one place, the
// edge guard RemoteConfig installs (rules in guard.go): no
// protoactor system message from the wire reaches the tree, only members
// send requests, and a producer names the node it sends from. WithTLS adds
// mutual TLS, which proves that node: see README, "Securing a cluster".
// A pubsub that can no longer deliver says so: Done, Err, ErrStopped.
//
// The supervision tree is described in package supervision.
package echopubsub
