package core

import (
	"strconv"
	"sync"
	"testing"
)

// Pushers push while the taker reads and writes the writes it took: under
// -race, no access conflicts, and every write comes out once, in each
// pusher's order.
func TestWriteQueueConcurrentTaker(t *testing.T) {
	q := NewWriteQueue(64)
	const pushers, per = 4, 5000
	var wg sync.WaitGroup
	for p := 0; p < pushers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			var w Write
			for i := 0; i < per; {
				w = Write{Topic: strconv.Itoa(p), SharedCursor: uint64(i), Payload: []byte{byte(i)}}
				if ok, _, room := q.Push(&w); ok {
					i++
				} else {
					<-room
				}
			}
		}(p)
	}
	next := make([]uint64, pushers)
	got := 0
	for got < pushers*per {
		ws, _ := q.Take(1 + got%7)
		for i := range ws {
			w := &ws[i]
			p, _ := strconv.Atoi(w.Topic)
			if w.SharedCursor != next[p] || w.Payload[0] != byte(next[p]) {
				t.Fatalf("pusher %d: got %d, want %d", p, w.SharedCursor, next[p])
			}
			next[p]++
			w.At = 1 // the taker may change what it took (Take's doc)
		}
		got += len(ws)
	}
	wg.Wait()
}
