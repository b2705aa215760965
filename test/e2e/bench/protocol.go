package main

import "time"

// The harness runs every node as a separate OS process: it re-executes its
// own binary with roleEnv set, and talks to it with JSON lines, a cmd on
// stdin and an event per line on stdout (one "reply" per cmd, with its id).

const (
	roleEnv   = "ECHOPUBSUB_BENCH_ROLE" // "node" or "nats"
	configEnv = "ECHOPUBSUB_BENCH_CONFIG"
	topic     = "bench"
	jsStream  = "BENCH"
)

// Systems under test.
const (
	sysOurs      = "echopubsub"
	sysRaw       = "protoactor-raw"
	sysRelay     = "protoactor-raw-relay"
	sysBatch     = "protoactor-raw-batch"
	sysCluster   = "protoactor-cluster"
	sysNATS      = "nats-core"
	sysJetStream = "nats-jetstream"
)

var allSystems = []string{sysOurs, sysRaw, sysRelay, sysBatch, sysCluster, sysNATS, sysJetStream}

// nodeConfig is a node process's whole configuration (JSON in configEnv).
type nodeConfig struct {
	System string `json:"system"`
	Index  int    `json:"index"`
	// Addrs: every node's protoactor remote address, this one at Index.
	Addrs         []string      `json:"addrs,omitempty"`
	NatsURL       string        `json:"nats_url,omitempty"`
	BatchInterval time.Duration `json:"batch_interval"`
	Buffer        int           `json:"buffer"`
	Pubs          int           `json:"pubs"`
	// EchoPubSub overrides (0: library default), for experiments.
	MaxBatchMessages   int `json:"max_batch_messages,omitempty"`
	MaxPendingWrites   int `json:"max_pending_writes,omitempty"`
	MaxBatchesInFlight int `json:"max_batches_in_flight,omitempty"`
	// AckInterval: EchoPubSub's Config.AckInterval when set (nil: default).
	AckInterval *time.Duration `json:"ack_interval,omitempty"`
	// MemSample: sample the process's memory (memsample.go) for "memstats".
	MemSample bool `json:"mem_sample,omitempty"`
	// TraceTail: trace each message of the latency runs (tailtrace.go).
	TraceTail bool `json:"trace_tail,omitempty"`
	// Encoded: EchoPubSub's collector subscribes WithFormat(FormatEncoded)
	// and reads each Stamp's numbers from its bytes (-encoded).
	Encoded bool `json:"encoded,omitempty"`
	// nats server role
	NatsPort int    `json:"nats_port,omitempty"`
	StoreDir string `json:"store_dir,omitempty"`
}

type cmd struct {
	ID  int64  `json:"id"`
	Op  string `json:"op"` // ready, reset, publish, status, latency, prof_start, prof_stop, memstats, heapprof, trace, quit
	Rep int    `json:"rep,omitempty"`
	N   int    `json:"n,omitempty"`
	// publish
	Pubs int `json:"pubs,omitempty"`
	Pad  int `json:"pad,omitempty"`
	Rate int `json:"rate,omitempty"` // total msg/s over all publishers; 0 as fast as possible
	// reset
	Latency bool   `json:"latency,omitempty"`
	Path    string `json:"path,omitempty"`
}

type event struct {
	Ev  string `json:"ev"` // ready, reply
	ID  int64  `json:"id,omitempty"`
	Err string `json:"err,omitempty"`
	OK  bool   `json:"ok,omitempty"`
	// ready: what is not ready yet
	Why string `json:"why,omitempty"`
	// status
	Coll *CollStatus `json:"coll,omitempty"`
	// publish
	PubStart int64 `json:"pub_start,omitempty"`
	PubEnd   int64 `json:"pub_end,omitempty"`
	PubErrs  int64 `json:"pub_errs,omitempty"`
	// latency: sorted samples are summarised on the node
	Lat *latSummary `json:"lat,omitempty"`
	// memstats
	Mem *memStats `json:"mem,omitempty"`
	// trace (-trace-tail)
	Trace *nodeTrace `json:"trace,omitempty"`
}

type latSummary struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	// Samples is a thinned copy (every k-th) for merging across nodes.
	Samples []int64 `json:"samples,omitempty"`
}
