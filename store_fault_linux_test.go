//go:build linux

package echopubsub_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/seglog"
	"github.com/echopubsub/echopubsub/test"
)

// TestFullDiskKeepsTrafficFlowing is TestFailingStoreKeepsTrafficFlowing
// on a real full disk: node 1 keeps its log (store/seglog) on a 2 MiB
// tmpfs, which a ballast file fills. Every message still reaches node 1's
// subscribers in order; once the ballast goes, the replay on node 1 has
// every durable message either as its row or counted in one gap row, in
// order, and no other gap. Needs root (mount), as CI runs.
func TestFullDiskKeepsTrafficFlowing(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=2m"); err != nil {
		t.Fatalf("mount a 2 MiB tmpfs on %s (this test needs root): %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
	log, err := seglog.Open(filepath.Join(dir, "log"), seglog.WithSegmentSize(seglog.MinSegmentSize))
	if err != nil {
		t.Fatal(err)
	}
	cfg := replayConfig()
	cfg.SoftQueue, cfg.HardQueue = 400, 800
	cfg.BufferSize = 4096 // 600 writes in a burst: a node still joining must not fall behind the buffer
	nodes := test.StartCluster(t, 2, cfg)
	t.Cleanup(func() { _ = log.Close() }) // after the nodes stopped (cleanups run last first)
	for i, nd := range nodes {
		nd.StopPubSub(t)
		store := echopubsub.WithStore(log)
		if i == 0 {
			store = test.WithMemStore()
		}
		nd.Start(t, cfg, staticOf(addrsOf(nodes)), echopubsub.WithDurableTopics("room:*"), store)
	}
	durable, chat := nodes[1].Subscribe(t, "room:1"), nodes[1].Subscribe(t, "chat")
	publishStamps(t, nodes[0], "room:1", "a", 1, 3)
	wantStamps(t, durable, 1, 2, 3)

	ballast := fillDisk(t, dir)
	n := uint64(300) // rows enough to need pages the full disk does not have
	for s := uint64(1); s <= n; s++ {
		publishStamps(t, nodes[0], "chat", "c", s, s)
		publishStamps(t, nodes[0], "room:1", "a", 3+s, 3+s)
	}
	// Health names the full disk. The store retries on a timer (1 s) with
	// its gap row only, which may fit where pages of rows do not: it then
	// says writes succeed again, until the next row fails. On a loaded
	// machine the 300 can take longer than that timer, so, as an operator
	// watching Health would, go on publishing until it shows the failure.
	var h echopubsub.Health
	test.Eventually(t, 10*time.Second, func() bool {
		if h = nodes[1].PS.Health(context.Background()); h.Store != nil && h.Ready && strings.Contains(h.Store.Error, "no space") {
			return true
		}
		n++
		publishStamps(t, nodes[0], "chat", "c", n, n)
		publishStamps(t, nodes[0], "room:1", "a", 3+n, 3+n)
		return false
	}, func() string {
		return fmt.Sprintf("node 1's health while its disk is full: %+v (store %+v)", h, h.Store)
	})
	wantStamps(t, chat, seqs(1, n)...)
	wantStamps(t, durable, seqs(1, 3+n)...)

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	test.Eventually(t, 10*time.Second, func() bool { return nodes[1].PS.Health(context.Background()).Store == nil },
		func() string {
			return fmt.Sprintf("node 1's store still failing: %+v", nodes[1].PS.Health(context.Background()).Store)
		})
	publishStamps(t, nodes[0], "room:1", "a", 4+n, 5+n)
	wantStamps(t, durable, seqs(1, 5+n)...)
	got, st := replayAll(t, nodes[1], nodes[0].Addr)
	// a#1..k stored, a gap row for the rest written while full (one per
	// time the disk filled: one, unless a retry's gap row fit and the next
	// row failed again), then the rows after: every message accounted for
	// once, in order.
	next, gaps := uint64(1), 0
	for _, w := range got {
		var s, missed uint64
		switch {
		case strings.HasPrefix(w, "gap("):
			fmt.Sscanf(w, "gap(%d)", &missed)
			next += missed
			gaps++
		default:
			fmt.Sscanf(w, "a#%d", &s)
			if s != next {
				t.Fatalf("replay %v: %s where a#%d was due", got, w, next)
			}
			next++
		}
	}
	if next != 6+n || gaps == 0 || st.Gaps != gaps || st.Missed == 0 {
		t.Fatalf("node 1 replayed %v (%+v): want a#1..%d, each as a row or in a gap", got, st, 5+n)
	}
	t.Logf("while the disk was full: %d rows stored, %d in %d gap row(s)", n-st.Missed, st.Missed, gaps)
}

// fillDisk writes a file into dir until its file system is full and
// returns its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			return path
		}
	}
}
