// Package presence is Phoenix.Presence on EchoPubSub's reliable stream:
// who is in a topic, with metadata, and joins and leaves as diffs, across
// nodes, with no zombie and never silently stale.
//
//	tr, err := presence.New(ps, presence.DefaultConfig())
//	err = tr.Track(pid, "room:1", "alice", map[string]string{"device": "phone"})
//	err = tr.Subscribe(watcher, "room:1") // then tr.List("room:1"); watcher gets *presence.Diff
//	err = tr.Stop(ctx)                    // before ps.Stop
//
// # How replicas converge
//
// Each node's Tracker owns that node's presences. Every change (Track,
// Untrack, Update, a tracked process that stopped) is broadcast on
// Config.Topic before it is applied, numbered (seq, per tracker
// incarnation), in the pubsub's ordered at-least-once stream; every other
// node's tracker applies it and tells its subscribers a Diff. A node's
// stream is what its tracker broadcasts on Config.Topic: one topic for every
// node, told apart by the producer node of each message.
//
// A replica never follows a node's stream past a hole. It asks the node for
// its whole state (a SyncRequest, answered in Snapshot parts on the same
// stream, so the state sits exactly between the changes it holds and the
// ones it does not) when:
//
//   - the pubsub tells it *messages.CursorExpired for that node (messages
//     were lost);
//   - a change's seq skips one, or a heartbeat names a seq it never got;
//   - a node it counted as down, or has never heard of, speaks.
//
// Until the state arrives the replica keeps what it had and ignores the
// node's changes (the state holds them); then its subscribers get the Diff
// from what it had to what the node has. It asks again after
// Config.SyncRetry if no state came, and once it has asked for DownAfter
// the node's presences leave until the state comes: a replica lists
// nothing it cannot vouch for.
//
// # Leaving
//
//   - A tracked process that stops leaves: the tracker watches it.
//   - A node whose tracker stops (Stop) says Goodbye: every other node drops
//     its presences as soon as the Goodbye arrives.
//   - A node the pubsub's membership stops listing (absent in every pool
//     group's PubSub.Stats, looked at every HeartbeatInterval) has its
//     presences dropped at once, with a Diff.
//   - A node that disappears (kill -9, a partition, a frozen process) sends
//     no heartbeat: every other node drops its presences, with a Diff, when
//     the membership drops it or, at the latest, DownAfter after its last
//     message arrived (checked every tick: a tenth of the shorter of
//     HeartbeatInterval and SyncRetry). When it comes back, its next
//     message makes each replica ask for its state: a Diff restores its
//     presences. A new process on that node is a new incarnation: what the
//     old one tracked is dropped at its first message.
//
// A node that is slow rather than gone (a stall longer than DownAfter) is
// dropped and restored in the same way: pick DownAfter above the longest
// stall you accept.
//
// # Cost
//
// One broadcast per change and one heartbeat per node per
// HeartbeatInterval; a resync moves a node's whole state once, to the one
// node that asked. docs/benchmarks.md ("Presence") has the figures.
package presence
