package echopubsub

import "github.com/echopubsub/echopubsub/actors/stream"

// BufferBytes is the memory the producers of c hold once every buffer is
// full of messages whose encoded size (proto.Size of what you broadcast)
// averages payloadBytes: PoolSize x BufferSize x (payloadBytes + 28 bytes of
// ring record and write time). Topic and type names are interned, a few
// bytes per distinct name. It is live heap for as long as the pubsub runs:
// the garbage collector can free none of it.
func (c Config) BufferBytes(payloadBytes int) int64 {
	return int64(c.PoolSize) * int64(c.BufferSize) * int64(payloadBytes+stream.BytesPerMessage)
}

// InFlightBytes is the most the batches in flight from this node to the
// other nodes-1 can hold: per producer and peer, the window of
// MaxBatchesInFlight full batches' worth, a batch being MaxBatchBytes (or
// MaxBatchMessages entries of payloadBytes, whichever is less), each held
// three times until acknowledged: the batch, its encoding, and gRPC's
// frame around it.
func (c Config) InFlightBytes(payloadBytes, nodes int) int64 {
	batch := min(int64(c.MaxBatchBytes), int64(c.MaxBatchMessages)*int64(payloadBytes+batchEntryBytes))
	return int64(c.PoolSize) * int64(max(nodes-1, 0)) * int64(c.MaxBatchesInFlight) * batch * 3
}

// batchEntryBytes is what an entry costs in a batch beyond its payload:
// its topic, type and size columns (4 bytes each).
const batchEntryBytes = 12

// memoryHeadroom is what MemoryLimit adds to the live heap it expects: the
// runtime's own structures, the pubsub's, and room for the garbage made
// between two collections. A publishing node allocates per message (most
// of it protoactor copying each batch twice per peer: its encoding and
// gRPC's frame), so 64 MiB is a collection every few tens of thousands of
// messages, each cheap: the buffers hold no pointers, so the GC has nothing
// to mark in them. What it allocates and what the limit costs in GC CPU:
// docs/benchmarks.md, "Producer memory" and "Figures behind code comments".
const memoryHeadroom = 64 << 20

// MemoryLimit suggests a soft memory limit for a process that runs a pubsub
// with c in a cluster of nodes nodes, to pass as GOMEMLIMIT or to
// runtime/debug.SetMemoryLimit: the full buffers (BufferBytes), the batches
// in flight (InFlightBytes), otherBytes for the live heap of everything else
// in the process (your own state, other pubsubs; 0 when small), and 64 MiB
// of headroom. The library never sets a limit itself: it is process-wide,
// the program's to choose.
//
// Why: the buffers are live heap, and with the default GOGC=100 the heap
// grows to twice the live heap before the next collection, so a node with
// 500 MB of full buffers peaks near 1 GB resident. Under a limit the GC
// collects when the process nears it instead, at the cost of more frequent
// collections; add to the limit to trade memory for GC CPU. A limit below
// the live heap makes the GC run back to back (the runtime caps it at about
// half the CPU): count everything the process keeps in otherBytes.
func (c Config) MemoryLimit(payloadBytes, nodes int, otherBytes int64) int64 {
	return c.BufferBytes(payloadBytes) + c.InFlightBytes(payloadBytes, nodes) + otherBytes + memoryHeadroom
}
