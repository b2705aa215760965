// Package faults is the test-only seam for fault injection between
// producers and workers. It is internal: only this module's tests, test
// kit and chaos harness can install a Hook (through Option); the public API
// has no way to.
package faults

import (
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/messages"
)

// Hook lets tests inject faults on the send and receive path between
// producers and workers. Production code leaves it nil; the per-message
// delivery loop of a worker without a hook has no hook check at all. Each method runs on
// the calling actor's goroutine and must be safe for concurrent use across
// actors. A hook may panic to crash the actor it runs in (the supervision
// tree restarts it), which is how tests crash a worker mid-batch.
type Hook interface {
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

// Option returns the root package's start option that installs h. The root
// package sets it at init (this package cannot import the root package);
// callers assert the result to echopubsub.Option.
var Option func(h Hook) any

// Pinned is implemented by a Hook that pins the wire protocol version its
// node speaks: a test build of a node of the previous version (rolling
// upgrades). Only messages.PreviousProtocolVersion can be pinned; 0 or
// anything else is the current version.
type Pinned interface {
	ProtocolVersion() uint32
}

// Version is the protocol version a node with hook h speaks.
func Version(h Hook) uint32 {
	if p, ok := h.(Pinned); ok && p.ProtocolVersion() == messages.PreviousProtocolVersion {
		return messages.PreviousProtocolVersion
	}
	return messages.ProtocolVersion
}

// PerBatch is implemented by a Hook that can make its node's workers
// answer as a build before cumulative answers did: every batch through the
// future that asked it, and no RegisterAck.cumulative_answers (mixed-build
// tests of the transport).
type PerBatch interface {
	PerBatchAnswers() bool
}

// AnswersPerBatch reports whether a worker with hook h answers as an
// earlier build (see PerBatch).
func AnswersPerBatch(h Hook) bool {
	p, ok := h.(PerBatch)
	return ok && p.PerBatchAnswers()
}
