package core

import (
	"sync"
	"testing"
)

func settled(a *Await) bool {
	select {
	case <-a.Done():
		return true
	default:
		return false
	}
}

// An Await settles when every node is final, or when Quorum delivered; a
// final status never changes; Unreachable and Pending are not final.
func TestAwaitSettles(t *testing.T) {
	a := NewAwait([]string{"a", "b", "c"}, 0)
	a.Taken("a", 0, 7, 41)
	a.Set("a", Delivered)
	a.Set("b", Unreachable)
	a.Set("c", Expired)
	if settled(a) {
		t.Fatalf("settled with b unreachable: %+v", a.Snapshot())
	}
	a.Set("c", Delivered) // final already: stays expired
	a.Set("b", Pending)
	if a.Set("b", Delivered) != true || !settled(a) {
		t.Fatalf("not settled with every node final: %+v", a.Snapshot())
	}
	s := a.Snapshot()
	want := []AwaitNode{{"a", Delivered}, {"b", Delivered}, {"c", Expired}}
	if s.Cursor != 41 || s.Incarnation != 7 || !s.Taken || len(s.Nodes) != 3 {
		t.Fatalf("snapshot %+v", s)
	}
	for i, n := range want {
		if s.Nodes[i] != n {
			t.Fatalf("node %d: %+v, want %+v", i, s.Nodes[i], n)
		}
	}

	q := NewAwait([]string{"a", "b", "c"}, 2)
	q.Set("a", Delivered)
	q.Set("b", Expired)
	if settled(q) {
		t.Fatal("quorum 2 settled with one delivered")
	}
	q.Set("c", Delivered)
	if !settled(q) {
		t.Fatal("quorum 2 not settled with two delivered")
	}

	c := NewAwait([]string{"a"}, 0)
	c.Cancel()
	if !c.Finished() || !c.Set("a", Delivered) || settled(c) {
		t.Fatal("a cancelled Await must be finished, and never settle")
	}
}

// The producer sets while the caller reads (run with -race).
func TestAwaitConcurrent(t *testing.T) {
	nodes := []string{"a", "b", "c", "d"}
	a := NewAwait(nodes, 0)
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.Set(n, Unreachable)
			_ = a.Snapshot()
			a.Set(n, Delivered)
		}()
	}
	<-a.Done()
	wg.Wait()
	if s := a.Snapshot(); len(s.Nodes) != 4 {
		t.Fatalf("snapshot %+v", s)
	}
}
