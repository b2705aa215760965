package echopubsub_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/seglog"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// consumerNode is a one-node cluster on a store/seglog directory, with
// retention r, that the test stops and starts again on the same
// directory (restart), as a process restart would.
type consumerNode struct {
	nd  *test.Node
	dir string
	cfg echopubsub.Config
	r   echopubsub.Retention
	st  *seglog.Store
}

func startConsumerNode(t *testing.T, r echopubsub.Retention) *consumerNode {
	cfg := retentionConfig()
	cn := &consumerNode{dir: t.TempDir(), cfg: cfg, r: r}
	cn.st = cn.open(t)
	cn.nd = test.StartCluster(t, 1, cfg, cn.options()...)[0]
	return cn
}

func (cn *consumerNode) open(t *testing.T) *seglog.Store {
	t.Helper()
	st, err := seglog.Open(cn.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func (cn *consumerNode) options() []echopubsub.Option {
	return []echopubsub.Option{echopubsub.WithStore(cn.st), echopubsub.WithDurableTopics("room:*"),
		echopubsub.WithRetention(cn.r)}
}

// restart stops the pubsub, closes the store, opens the directory again
// and starts the pubsub on it.
func (cn *consumerNode) restart(t *testing.T) {
	t.Helper()
	cn.nd.StopPubSub(t)
	if err := cn.st.Close(); err != nil {
		t.Fatal(err)
	}
	cn.st = cn.open(t)
	cn.nd.Start(t, cn.cfg, cn.options()...)
}

// consumer is the one named c of stream in nd's Consumers.
func consumer(t *testing.T, nd *test.Node, stream, c string) echopubsub.ConsumerInfo {
	t.Helper()
	cs, err := nd.PS.Consumers(stream)
	if err != nil {
		t.Fatal(err)
	}
	for _, ci := range cs {
		if ci.Name == c {
			return ci
		}
	}
	t.Fatalf("Consumers(%q) = %+v: no %q", stream, cs, c)
	return echopubsub.ConsumerInfo{}
}

func ackSeqs(t *testing.T, nd *test.Node, id string, o *owner, seqs ...uint64) {
	t.Helper()
	for _, s := range seqs {
		for _, e := range o.envelopes() {
			if e.Event.(*testpb.Stamp).Seq == s {
				if _, err := nd.PS.Ack(id, e.DeliveryID); err != nil {
					t.Fatalf("ack #%d: %v", s, err)
				}
			}
		}
	}
}

// TestConsumerHoldsRetentionAcrossRestart: a named consumer gets 1..10
// live and acks 1, 2 and 4: its committed cursor is 2 (the last
// contiguously acked), which Consumers reports with its lag, and which
// holds retention (MaxRows 3 would keep 8..10; rows 3..10 stay). After a
// restart of the node on the same seglog directory, a session subscribing
// with the same name and no WithFrom gets exactly 3..10 (then its
// CaughtUp), no StreamTruncated; once it acks them the cursor is 10 and
// retention goes back to MaxRows.
func TestConsumerHoldsRetentionAcrossRestart(t *testing.T) {
	cn := startConsumerNode(t, echopubsub.Retention{MaxRows: 3})
	nd := cn.nd
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	if err := nd.PS.SessionSubscribe(id, "room:1", echopubsub.WithConsumer("billing")); err != nil {
		t.Fatal(err)
	}
	publishStamps(t, nd, "room:1", "p", 1, 10)
	waitEnvelopes(t, o, 10)
	ackSeqs(t, nd, id, o, 1, 2, 4)
	test.Eventually(t, 5*time.Second, func() bool { return firstKept(t, cn.st, "room:1") == 3 },
		func() string {
			return fmt.Sprintf("first kept %d, want 3 (consumer billing committed 2; MaxRows 3 alone keeps 8..10); consumers %+v",
				firstKept(t, cn.st, "room:1"), consumer(t, nd, "room:1", "billing"))
		})
	if c := consumer(t, nd, "room:1", "billing"); c.Cursor != 2 || c.Lag != 8 || c.SessionID != id || c.LastAck.IsZero() {
		t.Fatalf("Consumers: %+v; want cursor 2 (1, 2 and 4 acked), lag 8, session %s", c, id)
	}

	cn.restart(t)
	nd = cn.nd
	if c := consumer(t, nd, "room:1", "billing"); c.Cursor != 2 || c.Lag != 8 || c.SessionID != "" {
		t.Fatalf("Consumers after the restart: %+v; want cursor 2, lag 8, no session", c)
	}
	o2 := spawnOwner(t, nd, nil)
	id2 := openSession(t, nd, o2, nil)
	if err := nd.PS.SessionSubscribe(id2, "room:1", echopubsub.WithConsumer("billing")); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 5*time.Second, func() bool { return countOf[*echopubsub.CaughtUp](o2) == 1 }, o2.describe)
	if got, want := fmt.Sprint(o2.seqs()), fmt.Sprint([]uint64{3, 4, 5, 6, 7, 8, 9, 10}); got != want {
		t.Fatalf("resumed by name after the restart: stamps %s, want %s: %s", got, want, o2.describe())
	}
	if n := countOf[*echopubsub.StreamTruncated](o2); n != 0 {
		t.Fatalf("resumed from a held cursor and was told StreamTruncated: %s", o2.describe())
	}
	ackSeqs(t, nd, id2, o2, 3, 4, 5, 6, 7, 8, 9, 10)
	test.Eventually(t, 5*time.Second, func() bool {
		c := consumer(t, nd, "room:1", "billing")
		return c.Cursor == 10 && c.Lag == 0 && firstKept(t, cn.st, "room:1") == 8
	}, func() string {
		return fmt.Sprintf("consumer %+v, first kept %d; want cursor 10, lag 0, first kept 8", consumer(t, nd, "room:1", "billing"), firstKept(t, cn.st, "room:1"))
	})
}

// TestConsumerMaxBytesOverridesWithStreamTruncated: MaxBytes is a hard
// cap: a consumer that committed 2 of 10 rows does not hold what MaxBytes
// removes (each Stamp is 5 payload bytes; 15 keeps 8..10). The node runs
// without retention until the consumer committed (so every row reaches
// it live), then restarts with MaxBytes 15 (and MaxRows, which the
// consumer does hold). Subscribing again by name, the consumer is told
// exactly what it lost (StreamTruncated from 3, FirstKept 8), then gets
// 8..10 and its CaughtUp.
func TestConsumerMaxBytesOverridesWithStreamTruncated(t *testing.T) {
	cn := startConsumerNode(t, echopubsub.Retention{})
	nd := cn.nd
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	if err := nd.PS.SessionSubscribe(id, "room:1", echopubsub.WithConsumer("audit")); err != nil {
		t.Fatal(err)
	}
	publishStamps(t, nd, "room:1", "p", 1, 10)
	waitEnvelopes(t, o, 10)
	ackSeqs(t, nd, id, o, 1, 2)
	test.Eventually(t, 5*time.Second, func() bool { return consumer(t, nd, "room:1", "audit").Cursor == 2 },
		func() string { return fmt.Sprintf("consumer %+v, want cursor 2", consumer(t, nd, "room:1", "audit")) })
	cn.r = echopubsub.Retention{MaxRows: 1, MaxBytes: 15}
	cn.restart(t)
	nd = cn.nd
	test.Eventually(t, 5*time.Second, func() bool { return firstKept(t, cn.st, "room:1") == 8 },
		func() string {
			return fmt.Sprintf("first kept %d, want 8 (MaxBytes 15)", firstKept(t, cn.st, "room:1"))
		})
	o2 := spawnOwner(t, nd, nil)
	id2 := openSession(t, nd, o2, nil)
	if err := nd.PS.SessionSubscribe(id2, "room:1", echopubsub.WithConsumer("audit")); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 5*time.Second, func() bool { return countOf[*echopubsub.CaughtUp](o2) == 1 }, o2.describe)
	got := o2.all()
	tr, ok := got[0].(*echopubsub.StreamTruncated)
	if wantTr := (echopubsub.StreamTruncated{SessionID: id2, Stream: "room:1", From: 3, FirstKept: 8}); !ok || *tr != wantTr {
		t.Fatalf("first message %#v, want %+v: %s", got[0], wantTr, o2.describe())
	}
	if fmt.Sprint(o2.seqs()) != fmt.Sprint([]uint64{8, 9, 10}) || len(got) != 5 {
		t.Fatalf("after the notice: %s; want 8, 9, 10 and CaughtUp", o2.describe())
	}
	// The truncation counts as passed: the cursor is at 7 before any ack.
	if c := consumer(t, nd, "room:1", "audit"); c.Cursor != 7 || c.Lag != 3 {
		t.Fatalf("after StreamTruncated: %+v; want cursor 7, lag 3", c)
	}
}

// TestConsumerErrors: the refusals, each naming what it refused.
func TestConsumerErrors(t *testing.T) {
	nd := test.StartCluster(t, 1, retentionConfig(), test.WithMemStore(), echopubsub.WithDurableTopics("room:*"))[0]
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	sub := func(topic string, opts ...echopubsub.SessionSubscribeOption) error {
		return nd.PS.SessionSubscribe(id, topic, opts...)
	}
	for _, bad := range []string{"", "a b", "é", strings.Repeat("x", 129)} {
		err := sub("room:1", echopubsub.WithConsumer(bad))
		if !errors.Is(err, echopubsub.ErrBadConsumerName) || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Fatalf("WithConsumer(%q): %v; want ErrBadConsumerName naming the value", bad, err)
		}
	}
	if err := sub("plain", echopubsub.WithConsumer("c")); !errors.Is(err, echopubsub.ErrNoStore) {
		t.Fatalf("WithConsumer on a topic that is not durable: %v", err)
	}
	if err := sub("room:1", echopubsub.WithConsumer("c"), echopubsub.WithClass(echopubsub.ClassEphemeral)); err == nil ||
		!strings.Contains(err.Error(), "needs ClassDurable") {
		t.Fatalf("WithConsumer with ClassEphemeral: %v", err)
	}
	publishStamps(t, nd, "room:1", "p", 1, 3)
	if err := sub("room:1", echopubsub.WithConsumer("c"), echopubsub.WithFrom(2)); err != nil {
		t.Fatal(err) // a new consumer placed at 2: committed 1
	}
	if c := consumer(t, nd, "room:1", "c"); c.Cursor != 1 || c.Lag != 2 {
		t.Fatalf("new consumer WithFrom(2): %+v; want cursor 1, lag 2", c)
	}
	if err := sub("room:1", echopubsub.WithConsumer("c"), echopubsub.WithFrom(1)); !errors.Is(err, echopubsub.ErrConsumerFrom) ||
		!strings.Contains(err.Error(), "resumes at 2, WithFrom(1)") {
		t.Fatalf("WithFrom(1) for a consumer that resumes at 2: %v", err)
	}
	if err := sub("room:1", echopubsub.WithConsumer("d")); err == nil || !strings.Contains(err.Error(), `as consumer "c": unsubscribe before naming it "d"`) {
		t.Fatalf("renaming a subscription's consumer: %v", err)
	}
	if err := sub("room:1", echopubsub.WithConsumer("c")); err != nil {
		t.Fatalf("subscribing again with the same name: %v", err)
	}
	o2 := spawnOwner(t, nd, nil)
	id2 := openSession(t, nd, o2, nil)
	if err := nd.PS.SessionSubscribe(id2, "room:1", echopubsub.WithConsumer("c")); !errors.Is(err, echopubsub.ErrConsumerBusy) ||
		!strings.Contains(err.Error(), id) {
		t.Fatalf("a second session on the name: %v; want ErrConsumerBusy naming session %s", err, id)
	}
	if err := nd.PS.DeleteConsumer("room:1", "c"); !errors.Is(err, echopubsub.ErrConsumerBusy) {
		t.Fatalf("DeleteConsumer of a followed consumer: %v", err)
	}
	if err := nd.PS.SessionUnsubscribe(id, "room:1"); err != nil {
		t.Fatal(err)
	}
	if err := nd.PS.DeleteConsumer("room:1", "c"); err != nil {
		t.Fatal(err)
	}
	if cs, err := nd.PS.Consumers("room:1"); err != nil || len(cs) != 0 {
		t.Fatalf("Consumers after DeleteConsumer: %+v %v", cs, err)
	}
	if err := nd.PS.SessionSubscribe(id2, "room:1", echopubsub.WithConsumer("c")); err != nil {
		t.Fatalf("the name after its subscription ended: %v", err)
	}
	if c := consumer(t, nd, "room:1", "c"); c.Cursor != 3 {
		t.Fatalf("a new consumer without WithFrom: %+v; want cursor 3 (the stream's end: live)", c)
	}

	plain := test.StartCluster(t, 1, retentionConfig(), echopubsub.WithStore(plainStore{test.NewMemStore()}),
		echopubsub.WithDurableTopics("room:*"))[0]
	po := spawnOwner(t, plain, nil)
	pid := openSession(t, plain, po, nil)
	if err := plain.PS.SessionSubscribe(pid, "room:1", echopubsub.WithConsumer("c")); !errors.Is(err, echopubsub.ErrNoConsumerStore) ||
		!strings.Contains(err.Error(), "plainStore") {
		t.Fatalf("WithConsumer on a store without consumers: %v", err)
	}

	cfg := retentionConfig()
	cfg.ConsumerMetrics = []string{"ok", "bad name"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `ConsumerMetrics[1] must be a consumer name other than "_other", got "bad name"`) {
		t.Fatalf("Validate: %v", err)
	}
}

// TestConsumerMetricsAreBounded: only the names Config.ConsumerMetrics
// lists get series of their own; every other name shares consumer
// "_other". Three consumers hold 2 unacked rows each: the gauge says 2 for
// billing and 4 for _other, and once they ack, the commits counter has
// exactly those two series.
func TestConsumerMetricsAreBounded(t *testing.T) {
	cfg := retentionConfig()
	cfg.ConsumerMetrics = []string{"billing"}
	sc, mp := newScrape(t)
	nd := test.StartCluster(t, 1, cfg, test.WithMemStore(), echopubsub.WithDurableTopics("room:*"), mp)[0]
	o := spawnOwner(t, nd, nil)
	id := openSession(t, nd, o, nil)
	for i, name := range []string{"billing", "x1", "x2"} {
		if err := nd.PS.SessionSubscribe(id, fmt.Sprintf("room:%d", i), echopubsub.WithConsumer(name)); err != nil {
			t.Fatal(err)
		}
		publishStamps(t, nd, fmt.Sprintf("room:%d", i), "p", 1, 2)
	}
	waitEnvelopes(t, o, 6)
	series := func(family string) string {
		f := sc.families(t)[family]
		var out []string
		for _, m := range f.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out = append(out, fmt.Sprintf("%s=%g", label(m, "consumer"), v))
		}
		return strings.Join(out, " ")
	}
	if got := series("echopubsub_consumer_unacked"); got != "_other=4 billing=2" {
		t.Fatalf("echopubsub_consumer_unacked: %s; want _other=4 billing=2", got)
	}
	for _, e := range o.envelopes() {
		if _, err := nd.PS.Ack(id, e.DeliveryID); err != nil {
			t.Fatal(err)
		}
	}
	test.Eventually(t, 5*time.Second, func() bool {
		return series("echopubsub_consumer_unacked") == "_other=0 billing=0" &&
			strings.HasPrefix(series("echopubsub_consumer_commits_total"), "_other=") &&
			strings.Count(series("echopubsub_consumer_commits_total"), "=") == 2
	}, func() string {
		return fmt.Sprintf("unacked %s, commits %s; want both at 0 unacked and two commit series (_other, billing)",
			series("echopubsub_consumer_unacked"), series("echopubsub_consumer_commits_total"))
	})
}
