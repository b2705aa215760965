package ringbuf

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/echopubsub/echopubsub/internal/prop"
)

// model is the naive reference: it keeps every write forever.
type model struct {
	all      []int
	capacity int
}

// decide is the model's answer, and for Expired what the node misses (every
// message from next on: its cursor moves to the write cursor) and how many
// of those are no longer held (older than the last capacity written).
func (m *model) decide(next uint64) (kind Kind, want []int, missed, overwritten uint64) {
	write := uint64(len(m.all))
	lag := write - next
	switch {
	case lag == 0:
		return CaughtUp, nil, 0, 0
	case lag > uint64(m.capacity):
		for c := next; c < write; c++ {
			missed++
			if c+uint64(m.capacity) < write {
				overwritten++
			}
		}
		return Expired, nil, missed, overwritten
	}
	return Messages, m.all[next:], 0, 0
}

func TestNewRejectsBadCapacity(t *testing.T) {
	for _, c := range []int{0, -1, math.MinInt} {
		if _, err := New[int](c); err == nil {
			t.Fatalf("New(%d): want error", c)
		}
	}
}

func TestDecideAheadIsAnError(t *testing.T) {
	r, _ := New[int](2)
	_, _ = r.Write(1)
	if _, err := r.Decide(2); !errors.Is(err, ErrAhead) {
		t.Fatalf("Decide(2) with write=1: got %v, want ErrAhead", err)
	}
}

func TestWriteAtLimit(t *testing.T) {
	r, _ := New[int](2)
	r.write = math.MaxUint64 - 1
	if c, err := r.Write(1); err != nil || c != math.MaxUint64-1 {
		t.Fatalf("last write: cursor %d err %v", c, err)
	}
	if _, err := r.Write(2); !errors.Is(err, ErrCursorExhausted) {
		t.Fatalf("write past limit: got %v, want ErrCursorExhausted", err)
	}
	d, err := r.Decide(math.MaxUint64 - 1)
	if err != nil || d.Kind != Messages || d.Lag != 1 {
		t.Fatalf("decision at limit: %+v %v", d, err)
	}
}

func TestAtOutsideWindow(t *testing.T) {
	r, _ := New[int](2)
	for i := 0; i < 5; i++ {
		_, _ = r.Write(i)
	}
	for _, c := range []uint64{0, 1, 2, 5, 6} {
		if _, err := r.At(c); !errors.Is(err, ErrNotBuffered) {
			t.Errorf("At(%d): got %v, want ErrNotBuffered", c, err)
		}
	}
	for _, c := range []uint64{3, 4} {
		if v, err := r.At(c); err != nil || v != int(c) {
			t.Errorf("At(%d) = %d, %v", c, v, err)
		}
	}
}

// TestAgainstModel checks every decision, and every replayed message, against
// the naive model over random interleavings of writes and acknowledgements.
func TestAgainstModel(t *testing.T) {
	prop.Check(t, func(t *prop.T) {
		capacity := prop.IntRange(1, 16).Draw(t, "capacity")
		r, err := New[int](capacity)
		if err != nil {
			t.Fatal(err)
		}
		m := &model{capacity: capacity}
		var next uint64 // one node's next-needed cursor
		steps := prop.IntRange(1, 200).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			switch prop.IntRange(0, 2).Draw(t, "op") {
			case 0, 1:
				v := len(m.all)
				c, err := r.Write(v)
				if err != nil || c != uint64(v) {
					t.Fatalf("Write: cursor %d err %v, want %d", c, err, v)
				}
				m.all = append(m.all, v)
			case 2:
				next = prop.Uint64Range(next, uint64(len(m.all))).Draw(t, "ack")
			}
			d, err := r.Decide(next)
			if err != nil {
				t.Fatalf("Decide(%d): %v", next, err)
			}
			kind, want, missed, overwritten := m.decide(next)
			if d.Kind != kind || d.Missed != missed || d.Overwritten != overwritten || d.Lag != uint64(len(m.all))-next {
				t.Fatalf("Decide(%d) = %+v, model %v missed %d overwritten %d", next, d, kind, missed, overwritten)
			}
			if kind == Messages {
				for i, c := 0, d.From; c < d.To; i, c = i+1, c+1 {
					v, err := r.At(c)
					if err != nil || v != want[i] {
						t.Fatalf("At(%d) = %d, %v; model %d", c, v, err, want[i])
					}
				}
				// Span of any run within the decision is those values.
				from := prop.Uint64Range(d.From, d.To).Draw(t, "span from")
				to := prop.Uint64Range(from, d.To).Draw(t, "span to")
				a, b, err := r.Span(from, to)
				got := append(append([]int{}, a...), b...)
				if err != nil || fmt.Sprint(got) != fmt.Sprint(append([]int{}, want[from-d.From:to-d.From]...)) {
					t.Fatalf("Span(%d, %d) = %v, %v; model %v", from, to, got, err, want[from-d.From:to-d.From])
				}
			}
			// A span reaching past the write cursor or below the window is an error.
			if _, _, err := r.Span(0, uint64(len(m.all))+1); err == nil {
				t.Fatalf("Span past the write cursor %d gave no error", len(m.all))
			}
			if w := uint64(len(m.all)); w > uint64(capacity) {
				if _, _, err := r.Span(w-uint64(capacity)-1, w); err == nil {
					t.Fatalf("Span from an overwritten cursor gave no error")
				}
			}
			if kind == Expired {
				next = d.To // the producer moves an expired node to the write cursor
			}
		}
	})
}

// FuzzDecide: any capacity, write count and cursor give a consistent answer
// or an error, never a panic.
func FuzzDecide(f *testing.F) {
	f.Add(4, uint16(8), uint64(3))
	f.Add(1, uint16(0), uint64(0))
	f.Add(-3, uint16(2), uint64(9))
	f.Fuzz(func(t *testing.T, capacity int, writes uint16, next uint64) {
		r, err := New[uint64](capacity)
		if capacity <= 0 {
			if err == nil {
				t.Fatalf("capacity %d accepted", capacity)
			}
			return
		}
		if capacity > 1<<16 {
			return // keep the fuzzer's memory bounded
		}
		for i := uint64(0); i < uint64(writes); i++ {
			_, _ = r.Write(i)
		}
		d, err := r.Decide(next)
		if next > uint64(writes) {
			if !errors.Is(err, ErrAhead) {
				t.Fatalf("next %d > write %d: got %v", next, writes, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if d.Kind == Messages {
			for c := d.From; c < d.To; c++ {
				if v, err := r.At(c); err != nil || v != c {
					t.Fatalf("At(%d) = %d, %v", c, v, err)
				}
			}
		}
	})
}

func BenchmarkWrite(b *testing.B) {
	r, _ := New[[]byte](10_000)
	payload := []byte("0123456789")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Write(payload); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkDecide(b *testing.B) {
	r, _ := New[int](10_000)
	for i := 0; i < 25_000; i++ {
		_, _ = r.Write(i)
	}
	nexts := []uint64{25_000, 20_000, 1_000}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := r.Decide(nexts[i%3]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// TestJoinAgainstModel checks Join against the naive rule over random write
// times (non-decreasing, with ties): a joiner is owed exactly the writes made
// at or after since; Expired exactly when one of them was overwritten.
func TestJoinAgainstModel(t *testing.T) {
	prop.Check(t, func(t *prop.T) {
		capacity := prop.IntRange(1, 16).Draw(t, "capacity")
		r, err := New[int](capacity)
		if err != nil {
			t.Fatal(err)
		}
		var times []int64
		var now int64
		writes := prop.IntRange(0, 60).Draw(t, "writes")
		for i := 0; i < writes; i++ {
			now += prop.Int64Range(0, 3).Draw(t, "tick")
			if _, err := r.WriteAt(i, now); err != nil {
				t.Fatal(err)
			}
			times = append(times, now)
		}
		since := prop.Int64Range(-1, now+2).Draw(t, "since")
		owed := len(times) // first cursor written at or after since
		for i, at := range times {
			if at >= since {
				owed = i
				break
			}
		}
		oldest := 0
		if len(times) > capacity {
			oldest = len(times) - capacity
		}
		d := r.Join(since)
		switch {
		case owed < oldest:
			if d.Kind != Expired || d.To != uint64(len(times)) {
				t.Fatalf("Join(%d) = %+v; owed from %d but oldest buffered is %d: want expired", since, d, owed, oldest)
			}
		case owed == len(times):
			if d.Kind != CaughtUp || d.From != uint64(owed) {
				t.Fatalf("Join(%d) = %+v; nothing owed: want caught_up at %d", since, d, owed)
			}
		default:
			if d.Kind != Messages || d.From != uint64(owed) || d.To != uint64(len(times)) {
				t.Fatalf("Join(%d) = %+v; want messages [%d, %d)", since, d, owed, len(times))
			}
		}
	})
}

func TestWriteAtClampsEarlierTimes(t *testing.T) {
	r, _ := New[int](4)
	_, _ = r.WriteAt(0, 10)
	_, _ = r.WriteAt(1, 5) // taken as 10
	if d := r.Join(10); d.Kind != Messages || d.From != 0 {
		t.Fatalf("Join(10) = %+v, want messages from 0", d)
	}
	if d := r.Join(11); d.Kind != CaughtUp || d.From != 2 {
		t.Fatalf("Join(11) = %+v, want caught_up at 2", d)
	}
}

func BenchmarkJoin(b *testing.B) {
	r, _ := New[int](1 << 16)
	for i := 0; i < 1<<17; i++ {
		_, _ = r.WriteAt(i, int64(i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := r.Join(int64(1<<16 + i%(1<<16))); d.Kind != Messages {
			b.Fatal(d)
		}
	}
}
