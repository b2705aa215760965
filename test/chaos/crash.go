package chaos

import (
	"fmt"
	"sync/atomic"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
)

// CrashHook is a node process's faults.Hook (install it with
// faults.Option): armed by Arm (the "crash" command), it panics once inside
// the producer (Send runs on the producer's goroutine) or the worker
// (Delivered runs on the worker's, after it handed an entry of a batch to
// the subscribers and before the batch is acknowledged: a crash in the
// middle of a batch), and the supervision tree restarts that actor. The
// node binaries of both soaks (chaosnode, test/e2e's sessionnode) use it.
type CrashHook struct {
	producer, worker atomic.Bool
	producerN        atomic.Int64 // crashes injected
	workerN          atomic.Int64
	log              zerolog.Logger
	rec              *Recorder
}

// NewCrashHook returns a hook that logs to log and records each worker
// crash in rec (a W line: the record confirms the crash came after a
// delivered entry).
func NewCrashHook(log zerolog.Logger, rec *Recorder) *CrashHook {
	return &CrashHook{log: log, rec: rec}
}

// Arm makes the next producer send or worker delivery crash (what:
// "producer" or "worker").
func (h *CrashHook) Arm(what string) error {
	switch what {
	case "producer":
		h.producer.Store(true)
	case "worker":
		h.worker.Store(true)
	default:
		return fmt.Errorf("crash: want producer or worker, got %q", what)
	}
	return nil
}

// Crashes returns the producer and worker crashes injected so far (a
// node's status reports them: the harness's confirmation).
func (h *CrashHook) Crashes() (producer, worker int64) { return h.producerN.Load(), h.workerN.Load() }

// Send crashes the producer when armed.
func (h *CrashHook) Send(node string, _ proto.Message) error {
	if h.producer.CompareAndSwap(true, false) {
		h.producerN.Add(1)
		h.log.Warn().Str("peer", node).Msg("chaos: crashing the producer")
		panic("chaos: injected producer crash")
	}
	return nil
}

// Receive does nothing.
func (h *CrashHook) Receive(string, proto.Message) error { return nil }

// Delivered crashes the worker when armed.
func (h *CrashHook) Delivered(from string, cursor uint64) {
	if h.worker.CompareAndSwap(true, false) {
		h.rec.WorkerCrash(from, cursor) // the record confirms the crash came after a delivered entry
		h.workerN.Add(1)
		h.log.Warn().Str("producer", from).Uint64("cursor", cursor).Msg("chaos: crashing the worker in the middle of a batch")
		panic("chaos: injected worker crash")
	}
}

// Acked does nothing.
func (h *CrashHook) Acked(string, proto.Message) {}
