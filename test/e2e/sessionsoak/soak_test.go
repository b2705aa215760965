package sessionsoak_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/store/postgres/pgtest"
	"github.com/echopubsub/echopubsub/test/chaos"
	"github.com/echopubsub/echopubsub/test/e2e/sessionsoak"
)

// messages is the soak's size: ECHOPUBSUB_SESSION_SOAK_MESSAGES (make
// soak-sessions, the run behind docs/reliability.md) or def.
func messages(t *testing.T, def int64) int64 {
	if v := os.Getenv("ECHOPUBSUB_SESSION_SOAK_MESSAGES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("ECHOPUBSUB_SESSION_SOAK_MESSAGES=%q: %v", v, err)
		}
		return n
	}
	return def
}

// netns: as root the nodes live in network namespaces and the partitions
// and packet loss run; with CI=true and no root the test fails; otherwise
// those kinds are skipped, and the test's last line says so.
func netns(t *testing.T) bool {
	if chaos.DefaultNetns() {
		return true
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but not root (uid %d) or no ip tool: CI must run the partition and packet-loss faults", os.Getuid())
	}
	msg := fmt.Sprintf("SKIPPED partition_oneway, partition_pair, packet_loss: not root (uid %d) or no ip tool", os.Getuid())
	t.Log(msg)
	t.Cleanup(func() { t.Log(msg) })
	return false
}

// options: retention keeps the last 1,000 rows of the stream (a stalled
// owner falls further behind than that before HardQueue 1,000 closes it).
func options(t *testing.T, store string, pg *pgtest.Server, node, proxy string, msgs int64) sessionsoak.Options {
	o := sessionsoak.Options{Store: store, PG: pg, Node: node, Proxy: proxy, Dir: t.TempDir(), Nodes: 3, Netns: netns(t),
		Owners: 3, Publishers: 2, Rate: 100, Pad: 64, AckProb: 0.3, Messages: msgs,
		RetainRows: 1000, SoftQueue: 250, HardQueue: 1000,
		Hold: 3 * time.Second, Settle: time.Second, Drain: 60 * time.Second, Seed: time.Now().UnixNano(), Logf: t.Logf}
	if pg != nil {
		o.DSN = pg.SocketDSN()
	}
	return o
}

// TestSessionSoak runs the session soak on each store: 3 node processes
// publishing on a durable topic, 3 owners per node acking at random,
// retention keeping the last 1,000 rows, every fault kind of
// sessionsoak.KindsFor(store) injected and confirmed (kill -9 and restart
// first: the owners of the killed node resume WithFrom their committed
// cursor + 1; producer and worker crashes; a cold restart of every node;
// an owner stalled until its session is closed at HardQueue; with
// PostgreSQL, an immediate shutdown and a SIGSTOP of the server); the
// verdict, from the records against the stores' rows (copied as they
// appeared, see sessionsoak.RowLog), must show 0 silent gaps, 0 reorders,
// 0 redeliveries after ack, 0 wrong rows and 0 false alarms, at least one
// resumed session that caught up from the store, and at least one
// StreamTruncated.
func TestSessionSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak takes minutes; -short skips it")
	}
	limit := 12 * time.Minute
	if os.Getenv("ECHOPUBSUB_SESSION_SOAK_MESSAGES") != "" {
		limit = 90 * time.Minute // make soak-sessions
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	node, proxy, err := sessionsoak.Build(ctx, t.TempDir(), os.Getenv("ECHOPUBSUB_CHAOS_RACE") != "")
	if err != nil {
		t.Fatal(err)
	}
	for _, store := range []string{sessionsoak.StoreBolt, sessionsoak.StorePostgres} {
		t.Run(store, func(t *testing.T) {
			var pg *pgtest.Server
			if store == sessionsoak.StorePostgres {
				var err error
				if pg, err = pgtest.Start(); err != nil {
					t.Fatal(err)
				}
				defer pg.Stop()
			}
			o := options(t, store, pg, node, proxy, messages(t, 15_000))
			res, err := sessionsoak.Run(ctx, o)
			if err != nil {
				dumpLogs(t, o.Dir)
				t.Fatal(err)
			}
			t.Logf("session soak result:\n%s", res.Summary())
			for _, k := range sessionsoak.KindsFor(store) {
				if res.Faults[k] == 0 && !(chaos.NeedsNetns(k) && !o.Netns) {
					t.Errorf("fault %s was never injected", k)
				}
				if res.Faults[k] != res.Confirmed[k] {
					t.Errorf("fault %s: %d injected, %d confirmed", k, res.Faults[k], res.Confirmed[k])
				}
			}
			if res.DataRaces > 0 {
				dumpLogs(t, o.Dir)
				t.Errorf("the race-built nodes reported %d data races (see the logs above)", res.DataRaces)
			}
			ck := res.Check
			if ck.Failed() {
				dumpLogs(t, o.Dir)
				t.Errorf("guarantee broken:\n%s", ck.Summary())
			}
			if ck.FalseAlarms != 0 {
				t.Errorf("%d false alarms", ck.FalseAlarms)
			}
			if ck.Resumed == 0 || ck.Replayed == 0 {
				t.Errorf("%d sessions resumed, %d envelopes replayed: the soak proves nothing about WithFrom", ck.Resumed, ck.Replayed)
			}
			if ck.Commits == 0 || ck.Envelopes < res.Messages {
				t.Errorf("%d commits, %d envelopes for %d messages", ck.Commits, ck.Envelopes, res.Messages)
			}
			// Each added fault must have mattered: retention trimmed rows a
			// resumed session was owed (StreamTruncated), and every stalled
			// owner's session was closed at HardQueue (also confirmed by the
			// fault itself, above).
			if ck.Truncated == 0 {
				t.Errorf("no StreamTruncated: retention (MaxRows %d) never cut what a session was owed", o.RetainRows)
			}
			if ck.ClosedWithCause < int64(res.Faults[sessionsoak.FaultOwnerHardQueue]) {
				t.Errorf("%d sessions closed with a cause, for %d owners stalled to HardQueue", ck.ClosedWithCause, res.Faults[sessionsoak.FaultOwnerHardQueue])
			}
		})
	}
}

// dumpLogs shows the tail of every process's log in the test output.
func dumpLogs(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if len(e.Name()) < 4 || e.Name()[len(e.Name())-4:] != ".log" {
			continue
		}
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			continue
		}
		if len(b) > 6000 {
			b = b[len(b)-6000:]
		}
		t.Logf("--- tail of %s:\n%s", e.Name(), b)
	}
}
