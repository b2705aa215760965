package stream

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/echopubsub/echopubsub/internal/core"

	"github.com/echopubsub/echopubsub/internal/prop"
)

// TestStoreAgainstModel: whatever is written, every buffered cursor reads
// back exactly (topic, type, payload, options, trace context), overwritten
// ones are gone, every write counts its batch bytes (trace context included),
// and what the store keeps for overwritten messages (interned strings,
// options, segments) is released with them.
func TestStoreAgainstModel(t *testing.T) {
	prop.Check(t, func(t *prop.T) {
		capacity := prop.IntRange(1, 40).Draw(t, "capacity")
		s, err := newStore(capacity)
		if err != nil {
			t.Fatal(err)
		}
		var all []core.Write
		var size uint64
		writes := prop.IntRange(0, 300).Draw(t, "writes")
		for i := 0; i < writes; i++ {
			e := core.Write{
				Topic:       fmt.Sprintf("t%d", prop.IntRange(0, 5).Draw(t, "topic")),
				PayloadType: fmt.Sprintf("ty%d", prop.IntRange(0, 2).Draw(t, "type")),
				Payload:     bytes.Repeat([]byte{byte(i)}, prop.IntRange(0, 3).Draw(t, "size")*prop.IntRange(0, 40_000).Draw(t, "unit")),
			}
			if prop.IntRange(0, 9).Draw(t, "extra") == 0 {
				e.Exclude, e.OnlyNode = fmt.Sprintf("x%d", i), "n"
			}
			if prop.IntRange(0, 4).Draw(t, "traced") == 0 {
				e.Trace = &core.Trace{Parent: fmt.Sprintf("00-%032x-%016x-01", i+1, i+1), State: prop.SampledFrom([]string{"", "v=1"}).Draw(t, "state")}
			}
			c, err := s.write(&e, int64(i))
			if err != nil || c != uint64(i) {
				t.Fatalf("write %d: cursor %d, %v", i, c, err)
			}
			all = append(all, e)
			// The batch bytes count the trace context too (MaxBatchBytes
			// bounds what goes on the wire).
			size += uint64(entrySize(e.Topic, e.Payload, e.Exclude, e.OnlyNode))
			if e.Trace != nil {
				size += uint64(len(e.Trace.Parent) + len(e.Trace.State) + 4)
			}
			if s.size != size {
				t.Fatalf("write %d: the store counts %d batch bytes, want %d", i, s.size, size)
			}
		}
		oldest := 0
		if len(all) > capacity {
			oldest = len(all) - capacity
		}
		live := map[string]bool{}
		for c := oldest; c < len(all); c++ {
			topic, typ, payload, ex, err := s.at(uint64(c))
			want := all[c]
			if err != nil || topic != want.Topic || typ != want.PayloadType || !bytes.Equal(payload, want.Payload) ||
				ex.exclude != want.Exclude || ex.onlyNode != want.OnlyNode || ex.trace != want.Trace {
				t.Fatalf("at(%d) = %q %q %d bytes %+v %v; want %+v", c, topic, typ, len(payload), ex, err, want)
			}
			live[want.Topic] = true
		}
		if oldest > 0 {
			if _, _, _, _, err := s.at(uint64(oldest - 1)); err == nil {
				t.Fatalf("at(%d) answered for an overwritten message", oldest-1)
			}
		}
		if n := len(s.topics.ids); n != len(live) {
			t.Fatalf("%d topics interned, %d live", n, len(live))
		}
		extras := 0
		for c := oldest; c < len(all); c++ {
			if all[c].Exclude != "" || all[c].Trace != nil {
				extras++
			}
		}
		if len(s.extras) != extras {
			t.Fatalf("%d options kept, %d live", len(s.extras), extras)
		}
		// Segments: at most one per live message, plus the one being filled.
		if len(s.segs) > len(all)-oldest+1 {
			t.Fatalf("%d segments for %d live messages", len(s.segs), len(all)-oldest)
		}
	})
}

// BenchmarkStoreHeap reports the live heap per buffered message beyond its
// payload, with 1,000,000 messages of 10 and 200 bytes buffered (issue 17's
// target: at most 32 bytes). One op is one write.
func BenchmarkStoreHeap(b *testing.B) {
	for _, size := range []int{10, 200} {
		b.Run(fmt.Sprintf("payload=%d", size), func(b *testing.B) {
			const n = 1_000_000
			payload := make([]byte, size)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			s, err := newStore(n)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e := core.Write{Topic: "match:42", PayloadType: "scorepb.Goal", Payload: payload}
				if _, err := s.write(&e, int64(i)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			for i := b.N; i < n; i++ { // fill the buffer whatever b.N was
				e := core.Write{Topic: "match:42", PayloadType: "scorepb.Goal", Payload: payload}
				_, _ = s.write(&e, int64(i))
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			held := min(n, max(b.N, n))
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(held)-float64(size), "heap-B/msg-beyond-payload")
			runtime.KeepAlive(s)
		})
	}
}

// TestStoreHeapPerMessage holds the store to BytesPerMessage, the figure
// Config.BufferBytes (and so the GOMEMLIMIT guidance) is built on: a full
// store's heap is its payloads plus BytesPerMessage per slot.
func TestStoreHeapPerMessage(t *testing.T) {
	const n, size = 200_000, 100
	payload := make([]byte, size)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s, err := newStore(n)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n+n/2; i++ { // full, and a half turn of overwrites
		e := core.Write{Topic: "match:42", PayloadType: "scorepb.Goal", Payload: payload}
		if _, err := s.write(&e, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n - size
	// Segment tails and the segment list add well under a byte a message.
	if per < float64(BytesPerMessage)-0.5 || per > float64(BytesPerMessage)+2 {
		t.Fatalf("%.2f heap bytes a message beyond its payload, BytesPerMessage says %d", per, BytesPerMessage)
	}
	runtime.KeepAlive(s)
}
