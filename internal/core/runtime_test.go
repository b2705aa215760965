package core

import "testing"

// Recycle clears a pooled Write (nothing of a previous broadcast, the
// user's message above all, stays reachable from the pool), keeps a small
// payload buffer for the next encode and drops a large one; a Write that
// did not come from NewWrite, or that a durable store may hold, is left
// as it is.
func TestWriteRecycle(t *testing.T) {
	w := NewWrite()
	w.Topic, w.PayloadType, w.Exclude, w.OnlyNode, w.At = "t", "p", "x", "n", 7
	w.Payload = append(w.Payload, "payload"...)
	w.Recycle()
	if w.Topic != "" || w.PayloadType != "" || w.Exclude != "" || w.OnlyNode != "" || w.At != 0 || w.Msg != nil {
		t.Fatalf("recycled write keeps %+v", w)
	}
	if len(w.Payload) != 0 || cap(w.Payload) == 0 {
		t.Fatalf("recycled payload: len %d cap %d, want an empty buffer with room", len(w.Payload), cap(w.Payload))
	}

	big := NewWrite()
	big.Payload = make([]byte, maxPooledPayload+1)
	big.Recycle()
	if big.Payload != nil {
		t.Fatalf("a %d-byte payload buffer was kept", maxPooledPayload+1)
	}

	own := &Write{Topic: "t", Payload: []byte("p")}
	own.Recycle()
	if own.Topic != "t" || string(own.Payload) != "p" {
		t.Fatal("Recycle changed a Write that did not come from NewWrite")
	}
	kept := NewWrite()
	kept.pooled = false // as Enqueue marks a durable write
	kept.Topic = "t"
	kept.Recycle()
	if kept.Topic != "t" {
		t.Fatal("Recycle changed a Write a durable store may hold")
	}
}
