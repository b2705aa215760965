package storetest

import (
	"reflect"
	"testing"

	"github.com/echopubsub/echopubsub"
)

// Streams checks a store's echopubsub.StreamLister (the admin endpoint's
// streams): an empty store lists none; each stream's first and last
// cursor, rows and payload bytes after appends (gap rows count as rows of
// no payload), after a trim (Trimmer), and after a reopen when h.Reopen is
// set.
func Streams(t *testing.T, h Harness) {
	s := h.Open(t)
	t.Cleanup(func() { _ = s.Close() })
	list := func() []echopubsub.StreamInfo {
		t.Helper()
		got, err := s.(echopubsub.StreamLister).Streams(ctx(t))
		if err != nil {
			t.Fatalf("Streams: %v", err)
		}
		return got
	}
	if got := list(); len(got) != 0 {
		t.Fatalf("Streams of an empty store: %+v", got)
	}
	var bytesA uint64
	for i := 1; i <= 3; i++ {
		r := msg("a", i)
		bytesA += uint64(len(r.Payload))
		appendAll(t, s, []echopubsub.Record{r})
	}
	appendAll(t, s, []echopubsub.Record{{Stream: "a", Kind: echopubsub.RecordGap, Origin: "node-b:1", Missed: 2, Reason: "test"}})
	b := msg("b", 9)
	appendAll(t, s, []echopubsub.Record{b})
	want := []echopubsub.StreamInfo{
		{Stream: "a", First: 1, Last: 4, Rows: 4, Bytes: bytesA},
		{Stream: "b", First: 1, Last: 1, Rows: 1, Bytes: uint64(len(b.Payload))},
	}
	if got := list(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Streams after appends: %+v, want %+v", got, want)
	}
	trim(t, s, echopubsub.Retention{MaxRows: 1})
	// a keeps its gap row (cursor 4, no payload); b its one row.
	want[0] = echopubsub.StreamInfo{Stream: "a", First: 4, Last: 4, Rows: 1}
	if got := list(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Streams after Trim MaxRows 1: %+v, want %+v", got, want)
	}
	if h.Reopen != nil {
		s = h.Reopen(t, s)
		if got := list(); !reflect.DeepEqual(got, want) {
			t.Fatalf("Streams after a reopen: %+v, want %+v", got, want)
		}
	}
}
