// Package sessiontest checks, through the public API, what a session is
// told after store/seglog repaired a damaged log (a node in process: apart
// from package seglog's tests, whose TestMain checks for goroutine leaks
// without protoactor's).
package sessiontest_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/store/seglog"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// TestSessionIsToldWhatARepairLost: 300 durable messages, then a bit
// flipped in the middle of the log. Open refuses it (ErrDamaged); with
// WithRepair it opens, and a session following the stream WithFrom(1)
// gets every message the log kept at its cursor and a *StreamGap at each
// cursor it lost, nothing else; the next message gets cursor 301 (no
// cursor the session may hold is handed out again).
func TestSessionIsToldWhatARepairLost(t *testing.T) {
	const stream = "room:1"
	log := test.Logger(t, zerolog.InfoLevel)
	dir := filepath.Join(t.TempDir(), "log")
	cfg := test.FastConfig()
	cfg.SoftQueue, cfg.HardQueue = 100, 1000
	nodes, addrs := test.NewNodes(t, 1, log)
	nd := nodes[0]
	open := func(opts ...seglog.Option) *seglog.Store {
		s, err := seglog.Open(dir, append([]seglog.Option{seglog.WithLogger(log)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	store := open()
	start := func(s *seglog.Store) {
		nd.Start(t, cfg, echopubsub.WithMembership(cluster.NewStatic(addrs...)), echopubsub.WithStore(s),
			echopubsub.WithDurableTopics("room:*"))
	}
	start(store)
	for i := uint64(1); i <= 300; i++ {
		if err := nd.PS.Broadcast(nil, stream, &testpb.Stamp{Publisher: "p", Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	nd.StopPubSub(t)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, "00000001.seg")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x08
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := seglog.Open(dir, seglog.WithLogger(log)); !errors.Is(err, seglog.ErrDamaged) {
		t.Fatalf("Open of the damaged log: %v, want ErrDamaged", err)
	}
	store = open(seglog.WithRepair(true))
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, _, err := store.Read(ctx, stream, 1, 1000)
	if err != nil || len(rows) < 300 {
		t.Fatalf("repaired: %d rows, %v", len(rows), err)
	}
	var gaps, msgs []uint64
	for _, r := range rows {
		if r.Kind == echopubsub.RecordGap {
			gaps = append(gaps, r.Cursor)
		} else {
			msgs = append(msgs, r.Cursor)
		}
	}
	if len(gaps) == 0 {
		t.Fatal("the repair lost no row: the flip missed every record")
	}
	start(store)
	owner := test.SpawnFollowOwner(nd)
	sess, err := nd.PS.OpenSession(owner.PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.PS.SessionSubscribe(sess.ID(), stream, echopubsub.WithFrom(1)); err != nil {
		t.Fatal(err)
	}
	if err := nd.PS.Broadcast(nil, stream, &testpb.Stamp{Publisher: "p", Seq: 301}); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 10*time.Second, func() bool {
		return len(owner.Envelopes()) == len(msgs)+1 && len(owner.Notices()) >= len(gaps)
	}, func() string {
		return test.Sprintf("%d envelopes of %d, %d notices of %d gaps", len(owner.Envelopes()), len(msgs)+1, len(owner.Notices()), len(gaps))()
	})
	envs := owner.Envelopes()
	for i, c := range msgs {
		st, ok := envs[i].Event.(*testpb.Stamp)
		if envs[i].Cursor != c || !ok || st.Seq != c {
			t.Fatalf("envelope %d: cursor %d holds %v, want cursor %d with Seq %d", i, envs[i].Cursor, envs[i].Event, c, c)
		}
	}
	if last := envs[len(envs)-1]; last.Cursor != uint64(len(rows)+1) || last.Cursor <= 300 {
		t.Fatalf("the message after the repair has cursor %d, want %d (past the 300 handed out)", last.Cursor, len(rows)+1)
	}
	notices := owner.Notices()
	if len(notices) != len(gaps) {
		t.Fatalf("notices %v, want one *StreamGap per gap row %v", notices, gaps)
	}
	for i, n := range notices {
		g, ok := n.(*echopubsub.StreamGap)
		if !ok || g.Cursor != gaps[i] || g.Missed != 1 || !bytes.Contains([]byte(g.Reason), []byte(seg)) {
			t.Fatalf("notice %d: %#v, want a *StreamGap at cursor %d, Missed 1, naming %s", i, n, gaps[i], seg)
		}
	}
	t.Logf("after the repair: %d messages delivered at their cursors, %d *StreamGap at %v, the next message at cursor %d",
		len(msgs), len(gaps), gaps, envs[len(envs)-1].Cursor)
}
