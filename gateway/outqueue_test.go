package gateway

import "testing"

// The outbound queue keeps frames in order across growth and wrap-around,
// refuses the frame past max, and gives a grown ring back once drained.
func TestOutQueueGrowsOnDemand(t *testing.T) {
	q := newOutQueue(100)
	if len(q.buf) != 0 {
		t.Fatalf("a new queue holds %d slots, want 0", len(q.buf))
	}
	next, popped := 0, 0
	push := func(n int) {
		for i := 0; i < n; i++ {
			if !q.push(outFrame{raw: []byte{byte(next)}}) {
				t.Fatalf("push %d refused with %d waiting", next, q.len())
			}
			next++
		}
	}
	pop := func(n int) {
		for i := 0; i < n; i++ {
			f, ok := q.pop()
			if !ok || f.raw[0] != byte(popped) {
				t.Fatalf("pop %d: %v %v", popped, f.raw, ok)
			}
			popped++
		}
	}
	push(10)
	if len(q.buf) != outQueueMin {
		t.Fatalf("%d slots for 10 frames, want %d", len(q.buf), outQueueMin)
	}
	pop(7)
	push(40) // wraps, then grows twice with the ring's head mid-way
	pop(20)
	push(77) // up to max
	if q.len() != 100 || len(q.buf) != 100 {
		t.Fatalf("%d waiting in %d slots, want 100 in 100", q.len(), len(q.buf))
	}
	if q.push(outFrame{raw: []byte{0}}) {
		t.Fatal("a push past max was taken")
	}
	pop(100)
	if _, ok := q.pop(); ok || len(q.buf) != 0 {
		t.Fatalf("drained queue: pop %v, %d slots kept, want none", ok, len(q.buf))
	}
	select {
	case <-q.ready:
	default:
		t.Fatal("no ready signal after pushes")
	}
}
