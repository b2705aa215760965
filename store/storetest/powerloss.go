package storetest

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store"
)

// PowerLossHarness gives PowerLoss a store on storage that can lose power:
// from a chosen write on, every write fails (the machine stopped), and
// what survives is only what an fdatasync covered, with the writes after
// it dropped or torn.
type PowerLossHarness struct {
	// Open opens an empty store whose storage stops at its crashAt-th
	// mutating operation (a write, truncate, fdatasync, create, remove or
	// directory sync; 0: never); ops reports how many it has done.
	Open func(t *testing.T, crashAt int) (s echopubsub.Store, ops func() int)
	// Recover opens a store on what the storage of the last Open held
	// durably when it stopped, the writes no fdatasync covered dropped or
	// torn as seed chooses (the last store is closed first). It is called
	// several times for one crash (seeds differ), each on a fresh copy.
	Recover func(t *testing.T, seed int64) (echopubsub.Store, error)
	// Points is how many crash points to try, spread over a whole run.
	Points int
}

// PowerLossFigures is what a PowerLoss run did.
type PowerLossFigures struct {
	Points, Ops           int // crash points tried; mutating operations in a whole run
	Images                int // storage states recovered from (plImages per point)
	Acked, Seen, Survived int // rows acknowledged, read before the crash, read back after
}

// PowerLoss runs the store's essentials through power losses: writers
// append rows to three streams (some with a producer position, some a
// position alone, a MarkGap), a trimmer trims (retention), and a reader
// reads, until the storage stops at a crash point; then the store is
// reopened on what survived. At every point: Open succeeds (a crash
// leaves no damage), every acknowledged row is there at its cursor
// unless a trim that had started could have removed it, every row read
// before the crash is there with the same bytes at the same cursor,
// every row there is one a writer wrote (nothing torn), each stream's
// cursors run with no hole, every acknowledged producer position
// survives, and the next row of each stream gets a cursor past every one
// handed out (none is reused).
func PowerLoss(t *testing.T, h PowerLossHarness) PowerLossFigures {
	t.Helper()
	s, ops := h.Open(t, 0)
	opened := ops() // the crash points are after Open
	plRun(t, s)
	total := ops()
	_ = s.Close()
	fig := PowerLossFigures{Points: h.Points, Ops: total}
	rng := rand.New(rand.NewSource(1))
	span := total - opened
	for k := 0; k < h.Points; k++ {
		at := opened + 1 + k*span/h.Points + rng.Intn(max(span/h.Points, 1))
		s, _ := h.Open(t, at)
		w := plRun(t, s)
		_ = s.Close()
		fig.Acked += len(w.acked)
		fig.Seen += len(w.seen)
		for i := 0; i < plImages; i++ { // what survived, told apart: each seed drops or tears the rest its own way
			seed := int64(k*plImages + i)
			r, err := h.Recover(t, seed)
			if err != nil {
				t.Fatalf("crash at operation %d of %d (seed %d): Open after the power loss: %v", at, total, seed, err)
			}
			fig.Survived += plCheck(t, r, w, fmt.Sprintf("crash at operation %d of %d (seed %d)", at, total, seed))
			fig.Images++
			_ = r.Close()
		}
	}
	return fig
}

type plKey struct {
	stream string
	cursor uint64
}

// plWork is what a run did before the storage stopped.
type plWork struct {
	mu        sync.Mutex
	acked     map[plKey]string  // acknowledged rows: payload ("" for a gap row)
	seen      map[plKey]string  // rows read
	written   map[string]string // payload -> stream, of every row a writer tried
	positions map[string]uint64 // writer -> highest Next acknowledged with rows
}

const (
	plTrimKeep = 40
	plImages   = 4 // states recovered from each crash point
)

func plRun(t *testing.T, s echopubsub.Store) *plWork {
	w := &plWork{acked: map[plKey]string{}, seen: map[plKey]string{}, written: map[string]string{},
		positions: map[string]uint64{}}
	c := context.Background()
	streams := []string{"a", "b", "c"}
	local, _ := s.(store.LocalStore)
	trimmer, _ := s.(echopubsub.Trimmer)
	stop := make(chan struct{})
	var wg, writers sync.WaitGroup
	for p := 0; p < 3; p++ {
		writers.Add(1)
		go func(p int) {
			defer writers.Done()
			node := fmt.Sprint("w", p)
			for seq := 1; seq <= 60; seq++ {
				var recs []echopubsub.Record
				for i := 0; i <= (seq+p)%3; i++ {
					payload := fmt.Sprintf("%s-%d-%d", node, seq, i)
					stream := streams[(seq+i+p)%3]
					recs = append(recs, echopubsub.Record{Stream: stream, Kind: echopubsub.RecordMessage, Origin: node,
						PayloadType: "test.Stamp", Payload: []byte(payload)})
					w.mu.Lock()
					w.written[payload] = stream
					w.mu.Unlock()
				}
				pos := store.ProducerPosition{Node: node, Group: 1, Incarnation: 1, Next: uint64(seq)}
				var err error
				switch {
				case local != nil && (seq%7 == 0 || p == 2 && seq%2 == 1):
					err = local.AppendAt(c, nil, pos) // a position alone: not synced, not checked
					recs = nil
				case local != nil && p == 0 && seq == 30:
					err = local.MarkGap(c, echopubsub.Record{Kind: echopubsub.RecordGap, Origin: "w9", Missed: 3, Reason: "power-loss test gap"}, pos)
					recs = nil
				case local != nil && seq%5 == 0:
					err = local.AppendAt(c, recs, pos)
				default:
					err = s.Append(c, recs)
				}
				if err != nil {
					return // the machine stopped
				}
				w.mu.Lock()
				for _, r := range recs {
					w.acked[plKey{r.Stream, r.Cursor}] = string(r.Payload)
				}
				if local != nil && seq%5 == 0 && seq%7 != 0 && (p != 2 || seq%2 == 0) {
					w.positions[node] = max(w.positions[node], pos.Next)
				}
				w.mu.Unlock()
			}
		}(p)
	}
	if trimmer != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := trimmer.Trim(c, echopubsub.Retention{MaxRows: plTrimKeep}); err != nil {
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, st := range streams {
				recs, _, err := s.Read(c, st, 0, 1000)
				if err != nil {
					continue
				}
				w.mu.Lock()
				for _, r := range recs {
					w.seen[plKey{st, r.Cursor}] = string(r.Payload)
				}
				w.mu.Unlock()
			}
		}
	}()
	writers.Wait()
	close(stop)
	wg.Wait()
	return w
}

// plCheck checks r, reopened after the power loss, against w (see
// PowerLoss), and returns how many acknowledged rows it read back.
func plCheck(t *testing.T, r echopubsub.Store, w *plWork, point string) int {
	t.Helper()
	c := context.Background()
	survived := 0
	for _, st := range []string{"a", "b", "c"} {
		recs, next, err := r.Read(c, st, 0, 100000)
		if err != nil {
			t.Fatalf("%s: read %q: %v", point, st, err)
		}
		first, end := next, next-1 // with no row: every row was trimmed
		if len(recs) > 0 {
			first, end = recs[0].Cursor, recs[len(recs)-1].Cursor
		}
		held := map[uint64]echopubsub.Record{}
		for i, rec := range recs {
			if rec.Cursor != first+uint64(i) {
				t.Fatalf("%s: stream %q: cursor %d after %d: a hole", point, st, rec.Cursor, first+uint64(i)-1)
			}
			held[rec.Cursor] = rec
			switch {
			case rec.Kind == echopubsub.RecordGap && rec.Reason == "power-loss test gap" && rec.Missed == 3:
			case rec.Kind == echopubsub.RecordMessage && w.written[string(rec.Payload)] == st:
			default:
				t.Fatalf("%s: stream %q cursor %d holds a row no writer wrote there (torn or invented): %+v", point, st, rec.Cursor, rec)
			}
		}
		// A trim keeps the last plTrimKeep rows: none of them is ever gone.
		if first > 1 && end >= plTrimKeep && first > end-plTrimKeep+1 {
			t.Fatalf("%s: stream %q keeps %d..%d: fewer than the %d rows a trim keeps", point, st, first, end, plTrimKeep)
		}
		for _, m := range []map[plKey]string{w.acked, w.seen} {
			for k, payload := range m {
				if k.stream != st {
					continue
				}
				if k.cursor > end {
					t.Fatalf("%s: stream %q ends at %d, but cursor %d was handed out (acknowledged or read): the next row would reuse it", point, st, end, k.cursor)
				}
				if k.cursor < first {
					continue // trimmed
				}
				if got := held[k.cursor]; string(got.Payload) != payload {
					t.Fatalf("%s: stream %q cursor %d holds %q (kind %v), but %q was handed out under it", point, st, k.cursor, got.Payload, got.Kind, payload)
				}
			}
		}
		for k := range w.acked {
			if k.stream == st && k.cursor >= first {
				survived++
			}
		}
		more := []echopubsub.Record{{Stream: st, Kind: echopubsub.RecordMessage, PayloadType: "test.Stamp", Payload: []byte("after")}}
		if err := r.Append(c, more); err != nil || more[0].Cursor != end+1 {
			t.Fatalf("%s: stream %q: append after the power loss: cursor %d (end %d), %v", point, st, more[0].Cursor, end, err)
		}
	}
	if l, ok := r.(store.LocalStore); ok {
		for node, next := range w.positions {
			p, found, err := l.Position(c, node, 1)
			if err != nil || !found || p.Next < next {
				t.Fatalf("%s: position of %s: %+v found %v err %v; %d was acknowledged", point, node, p, found, err, next)
			}
		}
	}
	return survived
}
