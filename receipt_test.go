package echopubsub_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
)

// awaitCtx is a context for one BroadcastAwait, cancelled with the test.
func awaitCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// wantStatus fails t unless r gives each node of nodes the status want.
func wantStatus(t *testing.T, r echopubsub.Receipt, want echopubsub.DeliveryStatus, nodes ...*test.Node) {
	t.Helper()
	for _, nd := range nodes {
		if got, ok := r.Status(nd.Addr); !ok || got != want {
			t.Fatalf("receipt: node %s is %v (asked: %v), want %v; receipt %+v", nd.Addr, got, ok, want, r)
		}
	}
}

// stallBatches makes nd's worker hold every batch from node from until the
// function it returns is called (also at the end of the test): a node
// whose subscribers have not got the message yet, however long a test
// waits.
func stallBatches(t *testing.T, nd *test.Node, from string) (release func()) {
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release) // before the nodes stop (cleanups run last first)
	nd.Faults.SetOnReceive(func(node string, req proto.Message) {
		if _, ok := req.(*messages.Batch); ok && node == from {
			<-gate
		}
	})
	return release
}

// TestBroadcastAwaitDeliveredOnEveryNode: the receipt of a 3-node
// broadcast says delivered on each, and when it returns each remote
// node's worker has already handed the message to its subscribers.
func TestBroadcastAwaitDeliveredOnEveryNode(t *testing.T) {
	nodes := test.StartCluster(t, 3, fastConfig())
	var cs []*test.Collector
	for _, nd := range nodes {
		cs = append(cs, nd.Subscribe(t, "match"))
	}
	var mu sync.Mutex
	delivered := map[string]map[uint64]bool{} // node -> cursors its worker delivered from node 0
	for _, nd := range nodes[1:] {
		addr := nd.Addr
		delivered[addr] = map[uint64]bool{}
		nd.Faults.SetOnDeliver(func(from string, cursor uint64) {
			if from == nodes[0].Addr {
				mu.Lock()
				delivered[addr][cursor] = true
				mu.Unlock()
			}
		})
	}
	for i := uint64(1); i <= 3; i++ {
		r, err := nodes[0].PS.BroadcastAwait(awaitCtx(t, 10*time.Second), nil, "match", stamp(i))
		if err != nil {
			t.Fatalf("BroadcastAwait %d: %v (receipt %+v)", i, err, r)
		}
		if !r.Taken || r.Node != nodes[0].Addr || len(r.Nodes) != 3 {
			t.Fatalf("receipt %d: %+v", i, r)
		}
		wantStatus(t, r, echopubsub.Delivered, nodes...)
		mu.Lock()
		for _, nd := range nodes[1:] {
			if !delivered[nd.Addr][r.Cursor] {
				t.Errorf("receipt %d says delivered on %s, whose worker had not delivered cursor %d", i, nd.Addr, r.Cursor)
			}
		}
		mu.Unlock()
	}
	for _, c := range cs {
		wantStamps(t, c, 1, 2, 3)
	}
}

// TestBroadcastAwaitQuorum: with node 2's worker holding node 0's batches,
// AwaitQuorum(2) returns once nodes 0 and 1 delivered, and AwaitAll only
// when its context ends, with node 2 not delivered; once node 2 takes the
// batches, AwaitAll returns with all three. Invalid options are refused
// with errors naming the value.
func TestBroadcastAwaitQuorum(t *testing.T) {
	nodes := test.StartCluster(t, 3, fastConfig())
	ps := nodes[0].PS
	for _, n := range []int{0, -1, 4} {
		_, err := ps.BroadcastAwait(awaitCtx(t, time.Second), nil, "match", stamp(0), echopubsub.AwaitQuorum(n))
		if err == nil || !strings.Contains(err.Error(), "AwaitQuorum("+strconv.Itoa(n)+")") || !strings.Contains(err.Error(), "3 members") {
			t.Fatalf("AwaitQuorum(%d) on 3 members: error %v", n, err)
		}
	}
	c := nodes[2].Subscribe(t, "match")
	release := stallBatches(t, nodes[2], nodes[0].Addr)

	r, err := ps.BroadcastAwait(awaitCtx(t, 10*time.Second), nil, "match", stamp(1), echopubsub.AwaitQuorum(2))
	if err != nil {
		t.Fatalf("AwaitQuorum(2) with node 2 stalled: %v (receipt %+v)", err, r)
	}
	wantStatus(t, r, echopubsub.Delivered, nodes[0], nodes[1])
	if s, _ := r.Status(nodes[2].Addr); s == echopubsub.Delivered {
		t.Fatalf("receipt says delivered on node 2, whose worker holds the batch: %+v", r)
	}

	r, err = ps.BroadcastAwait(awaitCtx(t, 1500*time.Millisecond), nil, "match", stamp(2))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AwaitAll with node 2 stalled: error %v, want one wrapping context.DeadlineExceeded (receipt %+v)", err, r)
	}
	wantStatus(t, r, echopubsub.Delivered, nodes[0], nodes[1])
	if s, _ := r.Status(nodes[2].Addr); s == echopubsub.Delivered {
		t.Fatalf("receipt says delivered on node 2, whose worker holds the batch: %+v", r)
	}

	release()
	r, err = ps.BroadcastAwait(awaitCtx(t, 10*time.Second), nil, "match", stamp(3))
	if err != nil {
		t.Fatalf("AwaitAll after node 2 was released: %v (receipt %+v)", err, r)
	}
	wantStatus(t, r, echopubsub.Delivered, nodes...)
	wantStamps(t, c, 1, 2, 3)
}

// TestBroadcastAwaitCutNodeUnreachableThenExpired: a node cut off shows
// as unreachable in a receipt whose context ends; a message it then
// misses because the buffer (10) was overwritten while it was away shows
// as expired once it is told CursorExpired, and that receipt returns
// without waiting for its context.
func TestBroadcastAwaitCutNodeUnreachableThenExpired(t *testing.T) {
	cfg := fastConfig()
	cfg.BufferSize = 10
	nodes := test.StartCluster(t, 3, cfg)
	c := nodes[2].Subscribe(t, "match")
	waitJoined(t, nodes) // about a joined node's cursor falling behind
	test.Partition(nodes, 2)
	ps := nodes[0].PS

	r, err := ps.BroadcastAwait(awaitCtx(t, 2*time.Second), nil, "match", stamp(1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("BroadcastAwait with node 2 cut: error %v, want one wrapping context.DeadlineExceeded (receipt %+v)", err, r)
	}
	wantStatus(t, r, echopubsub.Delivered, nodes[0], nodes[1])
	wantStatus(t, r, echopubsub.Unreachable, nodes[2])

	written := nodes[0].Stats(t).WriteCursor
	done := awaitAsync(ps, 30*time.Second, "match", stamp(2))
	// Stamp 2 must be written before the 11 that overwrite it.
	test.Eventually(t, 5*time.Second, func() bool { return nodes[0].Stats(t).WriteCursor == written+1 },
		test.Sprintf("stamp 2 written"))
	// Each waits for node 1 (a burst past the buffer would overwrite
	// messages before node 1 got them too).
	for i := uint64(3); i <= 13; i++ {
		if _, err := ps.BroadcastAwait(awaitCtx(t, 10*time.Second), nil, "match", stamp(i), echopubsub.AwaitQuorum(2)); err != nil {
			t.Fatalf("BroadcastAwait %d, quorum 2: %v", i, err)
		}
	}
	test.Heal(nodes)
	var res awaitResult
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("BroadcastAwait of stamp 2 did not return after node 2 was healed")
	}
	if res.err != nil {
		t.Fatalf("BroadcastAwait of stamp 2: %v (receipt %+v)", res.err, res.r)
	}
	wantStatus(t, res.r, echopubsub.Delivered, nodes[0], nodes[1])
	wantStatus(t, res.r, echopubsub.Expired, nodes[2])
	test.Eventually(t, 10*time.Second, func() bool { return test.Count[*messages.CursorExpired](c) > 0 },
		func() string { return "node 2's subscriber told CursorExpired: " + c.Describe() })
}

// TestBroadcastAwaitStored: on a durable topic with a node-local store on
// each node, AwaitStored returns with both nodes delivered and stored, and
// each node's store holds the row when it returns. On a topic that is not
// durable, AwaitStored is an error naming the topic.
func TestBroadcastAwaitStored(t *testing.T) {
	nodes, _, stores := gapCluster(t)
	r, err := nodes[0].PS.BroadcastAwait(awaitCtx(t, 10*time.Second), nil, "room:1", stamp(1), echopubsub.AwaitStored())
	if err != nil {
		t.Fatalf("BroadcastAwait(AwaitStored): %v (receipt %+v)", err, r)
	}
	wantStatus(t, r, echopubsub.Delivered, nodes...)
	for i, nd := range nodes {
		if k := indexOf(r, nd.Addr); k < 0 || !r.Nodes[k].Stored {
			t.Fatalf("receipt: node %d not stored: %+v", i, r)
		}
		if got := storedWords(t, stores.Store("node"+strconv.Itoa(i)), "room:1"); strings.Join(got, " ") != "t#1" {
			t.Fatalf("node %d's store holds %v when the receipt returned, want t#1", i, got)
		}
	}
	_, err = nodes[0].PS.BroadcastAwait(awaitCtx(t, time.Second), nil, "match", stamp(2), echopubsub.AwaitStored())
	if err == nil || !strings.Contains(err.Error(), `"match"`) {
		t.Fatalf("AwaitStored on a topic that is not durable: error %v, want one naming \"match\"", err)
	}
}

func indexOf(r echopubsub.Receipt, addr string) int {
	for i, nr := range r.Nodes {
		if nr.Node == addr {
			return i
		}
	}
	return -1
}

// awaitResult is what a BroadcastAwait returned.
type awaitResult struct {
	r   echopubsub.Receipt
	err error
}

// awaitAsync runs BroadcastAwait(topic, msg) on ps in a goroutine, bounded
// by timeout, and hands its result over.
func awaitAsync(ps *echopubsub.PubSub, timeout time.Duration, topic string, msg proto.Message) <-chan awaitResult {
	done := make(chan awaitResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		r, err := ps.BroadcastAwait(ctx, nil, topic, msg)
		done <- awaitResult{r, err}
	}()
	return done
}

// A receipt does not wait for the workers' AckInterval: the batch it waits
// on asks to be answered as soon as it is delivered (Batch.awaited). Thirty
// BroadcastAwaits in a row, each answered by two nodes, take thirty
// intervals (3s here) when the answers wait their turn: each answer follows
// the one before within milliseconds. Without that wait they take a few
// milliseconds each; the bound allows 50ms each.
func TestReceiptDoesNotWaitForAckInterval(t *testing.T) {
	const n = 30
	cfg := fastConfig()
	cfg.CallTimeout = time.Second
	cfg.AckInterval = cfg.CallTimeout / 10
	nodes := test.StartCluster(t, 3, cfg)
	for _, nd := range nodes {
		nd.Subscribe(t, "match")
	}
	start := time.Now()
	for i := uint64(1); i <= n; i++ {
		r, err := nodes[0].PS.BroadcastAwait(awaitCtx(t, 30*time.Second), nil, "match", stamp(i))
		if err != nil {
			t.Fatalf("BroadcastAwait %d after %v: %v (receipt %+v)", i, time.Since(start), err, r)
		}
		wantStatus(t, r, echopubsub.Delivered, nodes...)
	}
	if took := time.Since(start); took > n*50*time.Millisecond {
		t.Fatalf("%d BroadcastAwaits took %v: the answers waited for AckInterval (%v)", n, took, cfg.AckInterval)
	}
}

// A receipt does not wait for AckInterval behind batches sent before it
// existed (not Batch.awaited), whose answer is held for the interval (20s
// here):
//   - full window: the window is one message (MaxBatchesInFlight 1,
//     MaxBatchMessages 1); s1's answer goes at once (the first after a
//     quiet interval), s2's is held, and the batch of s3 (BroadcastAwait)
//     cannot go until an answer comes;
//   - batch in flight: with a BatchInterval a part batch waits for the
//     batches in flight to be answered (partWaits), and s2's answer would
//     be held but for answerNow's BatchInterval rule (which
//     TestHeldAnswerDoesNotHoldTheNextPartBatch checks for a plain
//     Broadcast).
//
// The receipt's 10s is what a delivery takes on a loaded machine many times
// over, and half the interval it would otherwise wait.
func TestReceiptDoesNotWaitForAckIntervalBehindEarlierBatches(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window int // MaxBatchesInFlight and MaxBatchMessages; 0: the defaults
	}{{"full window", 1}, {"batch in flight", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fastConfig() // BatchInterval 10ms
			cfg.CallTimeout = 200 * time.Second
			cfg.AckInterval = cfg.CallTimeout / 10
			if tc.window > 0 {
				cfg.MaxBatchesInFlight, cfg.MaxBatchMessages = tc.window, tc.window
			}
			nodes := test.StartCluster(t, 2, cfg)
			c := nodes[1].Subscribe(t, "match")
			for i := uint64(1); i <= 2; i++ {
				if err := nodes[0].PS.Broadcast(nil, "match", stamp(i)); err != nil {
					t.Fatal(err)
				}
				wantStamps(t, c, seqs(1, i)...) // on node 1: its batch is delivered, its answer sent or held
			}
			start := time.Now()
			r, err := nodes[0].PS.BroadcastAwait(awaitCtx(t, 10*time.Second), nil, "match", stamp(3))
			if err != nil {
				t.Fatalf("BroadcastAwait after %v: %v (receipt %+v): it waited behind the answer held for AckInterval (%v)",
					time.Since(start), err, r, cfg.AckInterval)
			}
			wantStatus(t, r, echopubsub.Delivered, nodes...)
			wantStamps(t, c, 1, 2, 3)
		})
	}
}
