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
	if ws, more := q.Take(nil, 2); more || len(ws) != 2 || ws[0].Topic != "a" || ws[1].Topic != "c" {
		t.Fatalf("Take: %v", ws)
	}
	if ok, _ := q.Reserve(); !ok {
		t.Fatal("Reserve after Take failed")
	}
}

// Take hands out at most max writes, in order, and says when some are left:
// the queue stays notified until it is empty, so a pusher sends no
// WritesReady for writes the taker will take anyway.
func TestWriteQueueTakeUpTo(t *testing.T) {
	q := NewWriteQueue(10)
	for _, topic := range []string{"a", "b", "c"} {
		if ok, notify, _ := q.Push(&Write{Topic: topic}); !ok || notify != (topic == "a") {
			t.Fatalf("Push %s: ok %v, notify %v", topic, ok, notify)
		}
	}
	ws, more := q.Take(nil, 2)
	if !more || len(ws) != 2 || ws[0].Topic != "a" || ws[1].Topic != "b" {
		t.Fatalf("first Take: %d writes, more %v", len(ws), more)
	}
	if _, notify, _ := q.Push(&Write{Topic: "d"}); notify {
		t.Fatal("Push after a part Take asked for a WritesReady: the taker takes the rest itself")
	}
	ws, more = q.Take(ws, 2)
	if more || len(ws) != 2 || ws[0].Topic != "c" || ws[1].Topic != "d" {
		t.Fatalf("second Take: %d writes, more %v", len(ws), more)
	}
	if _, notify, _ := q.Push(&Write{Topic: "e"}); !notify {
		t.Fatal("Push after the queue was emptied sent no WritesReady")
	}
}
