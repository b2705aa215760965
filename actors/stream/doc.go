// Package stream holds the two actors of a pool group's stream: the
// producer, which buffers the group's writes and sends every other node
// what it is owed, and the worker, which receives a remote producer's
// batches and delivers them on its node.
//
// The producer is one actor spread over files by concern:
//
//   - producer.go: the actor, its messages, taking writes and flushing
//   - producer_peer.go: a remote node as the producer sees it, membership
//   - producer_join.go: registration (probe, join, version 1) and protocol versions
//   - producer_send.go: batches, the window, acks and expiry
//   - producer_call.go: calls to a worker, their failures and retries
//   - producer_drain.go: graceful Stop (Drain, Retire)
//   - producer_stats.go: StatsQuery and the stall watch
//   - producer_receipt.go: what the acks say to BroadcastAwait's receipts
//   - buffer.go, lease.go, reach.go: the compact buffer, the lease, the
//     connection check before a call
//
// The decisions on cursors (what a node may read, where a joining node
// starts) are package ringbuf's.
package stream
