package core

import "testing"

// A reserved slot counts as queued: a durable write holds its room while
// it is appended, and gives it back (waking waiters) if the append fails.
func TestWriteQueueReserve(t *testing.T) {
	q := NewWriteQueue(2)
	if ok, _ := q.Reserve(); !ok {
		t.Fatal("Reserve on an empty queue failed")
	}
	if ok, _, _ := q.Push(&Write{Topic: "a"}); !ok {
		t.Fatal("Push with one slot left failed")
	}
	ok, _, room := q.Push(&Write{Topic: "b"})
	if ok || room == nil {
		t.Fatal("Push into a queue full with a reservation succeeded")
	}
	if ok, _ := q.Reserve(); ok {
		t.Fatal("Reserve of a full queue succeeded")
	}
	q.Release()
	select {
	case <-room:
	default:
		t.Fatal("Release did not wake the pushers waiting for room")
	}
	if ok, _ := q.Reserve(); !ok {
		t.Fatal("Reserve after Release failed")
	}
	q.PushReserved(&Write{Topic: "c"})
	if ws := q.Take(nil); len(ws) != 2 || ws[0].Topic != "a" || ws[1].Topic != "c" {
		t.Fatalf("Take: %v", ws)
	}
	if ok, _ := q.Reserve(); !ok {
		t.Fatal("Reserve after Take failed")
	}
}
