// Package chaos runs EchoPubSub nodes as separate OS processes and injects
// real faults between them: a TCP proxy in front of every node's remote port
// (cut, blackhole, latency), network namespaces with veth and iptables for
// one-way and pairwise partitions and packet loss (as root), kill -9 and
// restart, SIGSTOP/SIGCONT, and producer and worker crashes through the
// supervision tree, and a cold restart of the whole cluster. Every node
// appends each publish and each reception to its own record file (see
// Recorder); after the run, CheckRecords runs test.Checker over all of
// them, and that is the verdict. The nodes' live checkers and status
// reports are for progress only.
//
// The node binary is ./chaosnode, built by BuildNode. The harness talks to
// it with JSON lines: a Command on stdin, Events on stdout (one "reply" per
// command, with its id; "status" every StatusEvery; "violation" as soon as
// the node's checker finds one).
package chaos

import (
	"io"
	"os"
	"time"

	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
)

// Topic is the one topic the chaos nodes publish and subscribe on.
const Topic = "chaos"

// SessionTopic is the durable topic of the session soak (test/e2e).
const SessionTopic = "sessions"

// PresenceTracked is about how many presences each chaos node's churn
// keeps on Topic, and PresenceStepEvery how often it changes one.
const (
	PresenceTracked   = 20
	PresenceStepEvery = 50 * time.Millisecond
)

// StatusEvery is how often a node reports its status unasked.
const StatusEvery = 500 * time.Millisecond

// Command is one request to a chaos node or proxy.
type Command struct {
	ID int64  `json:"id"`
	Op string `json:"op"`
	// subscribe: Count collectors; Late: they joined after publishers began.
	Count int  `json:"count,omitempty"`
	Late  bool `json:"late,omitempty"`
	// subscribe: a slow subscriber, bounded at Bound queued messages, that
	// spends SlowMicros on each message (it is dropped for and told so).
	Bound      int `json:"bound,omitempty"`
	SlowMicros int `json:"slow_micros,omitempty"`
	// publish: Publishers goroutines, each Rate messages/s with Pad bytes.
	Publishers int `json:"publishers,omitempty"`
	Rate       int `json:"rate,omitempty"`
	Pad        int `json:"pad,omitempty"`
	// crash: "producer" or "worker"; presence: "pause", "resume", "list".
	What string `json:"what,omitempty"`
	// behind, finish: what each publisher sent.
	Sent []PubInfo `json:"sent,omitempty"`
	// open (session nodes): one session per owner, WithFrom(From).
	Owners []OwnerSpec `json:"owners,omitempty"`
	// proxy route/mode.
	Listen    string `json:"listen,omitempty"`
	Target    string `json:"target,omitempty"`
	Mode      string `json:"mode,omitempty"`
	LatencyMS int    `json:"latency_ms,omitempty"`
}

// Node ops.
const (
	OpSubscribe   = "subscribe"
	OpPublish     = "publish"
	OpStopPublish = "stop_publish"
	OpStatus      = "status"
	OpBehind      = "behind"
	OpCrash       = "crash"
	OpQuit        = "quit"
	// OpSkip makes every publisher of the node skip one sequence number: a
	// gap of the test's own making, to prove the harness reports one.
	OpSkip = "skip"
	// Session node ops (test/e2e's session soak): OpOpen opens a session
	// per Command.Owners; OpSessions reports them (Event.Owners) and the
	// store's end (Event.StoreEnd).
	OpOpen     = "open"
	OpSessions = "sessions"
	// OpStall makes the open session of each of Command.Owners stop
	// committing and acking (test/e2e's owner_hardqueue fault: the library
	// closes it at HardQueue); with What "resume", go on.
	OpStall = "stall"
	// OpPresence drives a node's presence churn (nodes started with
	// -presence-down-after): Command.What "pause" stops its changes (the
	// one under way completes first), "resume" goes on, "list" reports
	// what the node lists (Event.Presence) and which of it is its own
	// (Event.OwnPresence).
	OpPresence = "presence"
	// Proxy ops.
	OpRoute    = "route"
	OpMode     = "mode"
	OpCounters = "counters" // what the route's faults did so far
)

// ProxyCounters are what a proxy route observed of its faults, cumulative.
type ProxyCounters struct {
	Closed  int64 `json:"closed"`  // connections closed by a cut
	Refused int64 `json:"refused"` // connections refused while cut
	Held    int64 `json:"held"`    // chunks a blackhole held
	Delayed int64 `json:"delayed"` // chunks delayed by latency
}

// Proxy modes.
const (
	ModePass      = "pass"
	ModeCut       = "cut"       // close every connection, refuse new ones
	ModeBlackhole = "blackhole" // stop forwarding; connections stay open
	ModeLatency   = "latency"   // forward after LatencyMS
)

// PubInfo is one publisher: its stream (node and group it broadcasts
// through) and the last sequence number it sent.
type PubInfo struct {
	Name  string `json:"name"`
	Node  string `json:"node"`
	Group uint32 `json:"group"`
	Last  uint64 `json:"last"`
	// LastAt is when Last was broadcast (unix nanoseconds).
	LastAt int64 `json:"last_at,omitempty"`
}

// OwnerSpec is one session to open: its owner (a logical consumer, the
// same name on every session it opens) and its WithFrom cursor.
type OwnerSpec struct {
	Name string `json:"name"`
	From uint64 `json:"from"`
}

// OwnerInfo is one owner's session as its node sees it.
type OwnerInfo struct {
	Name    string `json:"name"`
	Session string `json:"session"`
	// Next is the cursor after the last row it was handed (an envelope or
	// a StreamGap); Pending its unacknowledged deliveries.
	Next    uint64 `json:"next"`
	Pending int    `json:"pending"`
	Closed  bool   `json:"closed,omitempty"`
	// Reason is the SessionClosed reason (closed sessions); Committed the
	// last cursor its owner committed; Replayed whether its last envelope
	// was read from the store (a catch-up, which never closes a session at
	// HardQueue: its rows wait in the store).
	Reason    string `json:"reason,omitempty"`
	Committed uint64 `json:"committed,omitempty"`
	Replayed  bool   `json:"replayed,omitempty"`
}

// Event is one line a node or proxy writes.
type Event struct {
	Ev  string `json:"ev"` // ready, reply, status, violation
	ID  int64  `json:"id,omitempty"`
	Err string `json:"err,omitempty"`
	// ready: the node's advertised address.
	Addr string `json:"addr,omitempty"`
	// status, reply to stop_publish: the node's publishers.
	Pubs []PubInfo `json:"pubs,omitempty"`
	// status, finish: the node's checker.
	Report *test.Report `json:"report,omitempty"`
	RSSKB  int64        `json:"rss_kb,omitempty"`
	HWMKB  int64        `json:"hwm_kb,omitempty"`
	// status: peers every producer of this node is registered with.
	Registered []string `json:"registered,omitempty"`
	// status: crashes the node's fault hook injected so far.
	ProducerCrashes int64 `json:"producer_crashes,omitempty"`
	WorkerCrashes   int64 `json:"worker_crashes,omitempty"`
	// behind: (subscriber, publisher) pairs neither caught up nor told;
	// sessions (session nodes): what the node's producers still owe their
	// peers (lags, and 1 per peer not joined).
	Behind int `json:"behind,omitempty"`
	// violation.
	Violation *test.Violation `json:"violation,omitempty"`
	// sessions: the node's owners and its store's last cursor.
	Owners   []OwnerInfo `json:"owners,omitempty"`
	StoreEnd uint64      `json:"store_end,omitempty"`
	// presence, list: every presence the node lists on Topic and the ones
	// it tracks itself, each "key@node#ref map[meta]", sorted.
	Presence    []string `json:"presence,omitempty"`
	OwnPresence []string `json:"own_presence,omitempty"`
	// counters (proxy).
	Counters *ProxyCounters `json:"counters,omitempty"`
}

// NodeLoop is the command loop of a chaos node and of a session node
// (test/e2e's sessionnode), after its ready line: until sig, the end of in
// (the harness went away) or an OpQuit, it answers each command with
// handle's Event as the command's reply and sends status() unasked every
// StatusEvery; on the way out it calls stop once (before the quit's
// reply, so that the reply says the node stopped) and returns its error.
func NodeLoop(out *proc.Child, in io.Reader, sig <-chan os.Signal, handle func(Command) Event, status func() Event, stop func() error) error {
	cmds := proc.Commands[Command](out, in)
	tick := time.NewTicker(StatusEvery)
	defer tick.Stop()
	for {
		select {
		case <-sig:
			return stop()
		case <-tick.C:
			out.Send(status())
		case c, ok := <-cmds:
			if !ok || c.Op == OpQuit {
				err := stop()
				if ok {
					out.Send(Event{Ev: proc.EvReply, ID: c.ID})
				}
				return err
			}
			ev := handle(c)
			ev.Ev, ev.ID = proc.EvReply, c.ID
			out.Send(ev)
		}
	}
}
