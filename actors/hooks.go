package actors

import "google.golang.org/protobuf/proto"

// FaultHook lets tests inject faults on the send and receive path between
// producers and workers. Production code leaves it nil. Each method runs on
// the calling actor's goroutine and must be safe for concurrent use across
// actors. A hook may panic to crash the actor it runs in (the supervision
// tree restarts it), which is how tests crash a worker mid-batch.
type FaultHook interface {
	// Send runs before a producer sends req to node. An error fails the
	// call as a lost request would (retried after RetryInterval).
	Send(node string, req proto.Message) error
	// Receive runs when a worker gets req from node, before handling it. An
	// error drops req unanswered (the producer times out and retries).
	Receive(from string, req proto.Message) error
	// Delivered runs after a worker handed the entry at cursor to its
	// subscribers, before the batch is acknowledged.
	Delivered(from string, cursor uint64)
	// Acked runs after a worker answered req.
	Acked(from string, req proto.Message)
}
