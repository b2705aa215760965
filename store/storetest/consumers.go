package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store"
)

// runConsumers is the store.ConsumerStore part of the suite.
func runConsumers(t *testing.T, h Harness, open func(t *testing.T) echopubsub.Store) {
	consumers := func(t *testing.T) (echopubsub.Store, store.ConsumerStore) {
		s := open(t)
		cs, ok := s.(store.ConsumerStore)
		if !ok {
			t.Skipf("%T does not implement store.ConsumerStore: no named consumers", s)
		}
		return s, cs
	}
	t.Run("ConsumerCommitListDelete", func(t *testing.T) {
		s, cs := consumers(t)
		wantConsumers(t, cs, "k", 0, "")
		before := time.Now().Add(-time.Millisecond)
		commit(t, cs, "k", "b-2", 0) // a stream with no row yet
		commit(t, cs, "k", "a.1", 7)
		commit(t, cs, "other", "a.1", 1)
		appendAll(t, s, []echopubsub.Record{msg("k", 1), msg("k", 2), msg("k", 3)})
		got := wantConsumers(t, cs, "k", 3, "a.1=7 b-2=0")
		if after := time.Now().Add(time.Millisecond); got[0].Time.Before(before) || got[0].Time.After(after) {
			t.Fatalf("consumer Time %v, want between %v and %v", got[0].Time, before, after)
		}
		commit(t, cs, "k", "a.1", 2) // set as given: the pubsub only moves it forward
		wantConsumers(t, cs, "k", 3, "a.1=2 b-2=0")
		if err := cs.DeleteConsumer(ctx(t), "k", "b-2"); err != nil {
			t.Fatal(err)
		}
		if err := cs.DeleteConsumer(ctx(t), "k", "never"); err != nil {
			t.Fatalf("DeleteConsumer of a consumer that does not exist: %v", err)
		}
		wantConsumers(t, cs, "k", 3, "a.1=2")
		wantConsumers(t, cs, "other", 0, "a.1=1")
	})
	t.Run("ConsumerSurvivesReopen", func(t *testing.T) {
		s, cs := consumers(t)
		appendAll(t, s, []echopubsub.Record{msg("r", 1), msg("r", 2)})
		commit(t, cs, "r", "x", 2)
		commit(t, cs, "r", "y", 1)
		if err := cs.DeleteConsumer(ctx(t), "r", "y"); err != nil {
			t.Fatal(err)
		}
		s = h.Reopen(t, s)
		t.Cleanup(func() { _ = s.Close() })
		wantConsumers(t, s.(store.ConsumerStore), "r", 2, "x=2")
	})
	t.Run("ConsumerHoldsRetention", func(t *testing.T) {
		s, cs := consumers(t)
		if _, ok := s.(echopubsub.Trimmer); !ok {
			t.Skipf("%T does not implement echopubsub.Trimmer: no retention", s)
		}
		recs := make([]echopubsub.Record, 10)
		for i := range recs {
			recs[i] = sized("h", 10)
		}
		appendAll(t, s, recs)
		commit(t, cs, "h", "slow", 3)
		commit(t, cs, "h", "fast", 9)
		commit(t, cs, "g", "elsewhere", 0) // another stream's consumer holds nothing here
		trim(t, s, echopubsub.Retention{MaxRows: 2})
		wantKept(t, s, "h", 4, 10)
		trim(t, s, echopubsub.Retention{MaxAge: time.Nanosecond})
		wantKept(t, s, "h", 4, 10)
		// Held across a reopen: the consumers are read from the storage.
		s = h.Reopen(t, s)
		t.Cleanup(func() { _ = s.Close() })
		cs = s.(store.ConsumerStore)
		trim(t, s, echopubsub.Retention{MaxRows: 1})
		wantKept(t, s, "h", 4, 10)
		commit(t, cs, "h", "slow", 8)
		trim(t, s, echopubsub.Retention{MaxRows: 1})
		wantKept(t, s, "h", 9, 10)
		// MaxBytes is a hard cap: it removes rows the consumers hold.
		trim(t, s, echopubsub.Retention{MaxBytes: 10})
		wantKept(t, s, "h", 10, 10)
		if err := cs.DeleteConsumer(ctx(t), "h", "slow"); err != nil {
			t.Fatal(err)
		}
		if err := cs.DeleteConsumer(ctx(t), "h", "fast"); err != nil {
			t.Fatal(err)
		}
		trim(t, s, echopubsub.Retention{MaxAge: time.Nanosecond})
		wantKept(t, s, "h", 11, 10)
	})
}

func commit(t *testing.T, cs store.ConsumerStore, stream, name string, cursor uint64) {
	t.Helper()
	if err := cs.CommitConsumer(ctx(t), stream, name, cursor); err != nil {
		t.Fatalf("CommitConsumer(%q, %q, %d): %v", stream, name, cursor, err)
	}
}

// wantConsumers checks stream's consumers ("name=cursor ...", by name)
// and end.
func wantConsumers(t *testing.T, cs store.ConsumerStore, stream string, end uint64, want string) []store.Consumer {
	t.Helper()
	got, gotEnd, err := cs.Consumers(ctx(t), stream)
	if err != nil {
		t.Fatalf("Consumers(%q): %v", stream, err)
	}
	var desc string
	for i, c := range got {
		if i > 0 {
			desc += " "
		}
		desc += fmt.Sprintf("%s=%d", c.Name, c.Cursor)
	}
	if desc != want || gotEnd != end {
		t.Fatalf("Consumers(%q): %s, end %d; want %s, end %d", stream, desc, gotEnd, want, end)
	}
	return got
}
