package core

import (
	"strconv"
	"testing"

	"github.com/echopubsub/echopubsub/internal/prop"
)

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
	if ws, more := q.Take(2); more || len(ws) != 2 || ws[0].Topic != "a" || ws[1].Topic != "c" {
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
	ws, more := q.Take(2)
	if !more || len(ws) != 2 || ws[0].Topic != "a" || ws[1].Topic != "b" {
		t.Fatalf("first Take: %d writes, more %v", len(ws), more)
	}
	if _, notify, _ := q.Push(&Write{Topic: "d"}); notify {
		t.Fatal("Push after a part Take asked for a WritesReady: the taker takes the rest itself")
	}
	ws, more = q.Take(2)
	if more || len(ws) != 2 || ws[0].Topic != "c" || ws[1].Topic != "d" {
		t.Fatalf("second Take: %d writes, more %v", len(ws), more)
	}
	if _, notify, _ := q.Push(&Write{Topic: "e"}); !notify {
		t.Fatal("Push after the queue was emptied sent no WritesReady")
	}
}

// The queue against a model, for any mix of pushes and takes: writes come
// out in push order, each once, a take at most max of them; a Push copies
// the write (the caller may reuse it); a take's writes stay as they are
// until the next take, which drops them (clears or reuses their slots); and the queue's array stays within a few times
// its bound however long it goes without emptying.
func TestWriteQueueModel(t *testing.T) {
	prop.Check(t, func(t *prop.T) {
		const bound = 16
		q := NewWriteQueue(bound)
		var model []string // queued topics, in order
		next := 0
		var last []Write // the last take's writes
		var lastTopics []string
		pushes := prop.IntRange(1, 8).Draw(t, "pushes per take") // many: the queue never empties
		for step := 0; step < 400; step++ {
			if prop.IntRange(0, pushes).Draw(t, "op") > 0 {
				w := Write{Topic: strconv.Itoa(next)}
				ok, _, _ := q.Push(&w)
				if ok != (len(model) < bound) {
					t.Fatalf("Push with %d queued of %d: ok %v", len(model), bound, ok)
				}
				w.Topic = "reused by the caller"
				if ok {
					model = append(model, strconv.Itoa(next))
					next++
				}
			} else {
				for i, w := range last { // untouched until this take
					if w.Topic != lastTopics[i] {
						t.Fatalf("taken write %d changed to %q before the next Take", i, w.Topic)
					}
				}
				max := prop.IntRange(1, 8).Draw(t, "max")
				ws, more := q.Take(max)
				for i, w := range last { // cleared, or reused for writes queued since
					if w.Topic == lastTopics[i] {
						t.Fatalf("the queue still holds the last take's write %d (%q)", i, w.Topic)
					}
				}
				want := min(max, len(model))
				if len(ws) != want || more != (len(model) > max) {
					t.Fatalf("Take(%d) of %d: %d writes, more %v", max, len(model), len(ws), more)
				}
				lastTopics = lastTopics[:0]
				for i, w := range ws {
					if w.Topic != model[i] {
						t.Fatalf("Take gave %q at %d, want %q", w.Topic, i, model[i])
					}
					lastTopics = append(lastTopics, w.Topic)
				}
				model, last = model[want:], ws
				// Nothing else stays referenced: the array the queue
				// continues in holds only the queued writes and, for a
				// part take, the writes just taken.
				for i, w := range q.writes[:cap(q.writes)] {
					if (i < q.head-len(ws) || i >= len(q.writes)) && w.Topic != "" {
						t.Fatalf("the queue's array keeps write %q at %d (head %d, len %d)", w.Topic, i, q.head, len(q.writes))
					}
				}
			}
			if q.Len() != len(model) {
				t.Fatalf("Len %d, model %d", q.Len(), len(model))
			}
			if c := cap(q.writes); c > 8*bound {
				t.Fatalf("the queue's array grew to %d for a bound of %d", c, bound)
			}
		}
	})
}
