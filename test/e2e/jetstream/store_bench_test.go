// Package jetstream measures NATS JetStream with file storage, the natural
// peer of EchoPubSub's durable streams, in the shapes of the durable
// benchmarks every Store backend runs (store/storetest's
// BenchDurableBroadcast and BenchReplayPage, in store/bolt and
// store/postgres): durable publish throughput (the publisher waits for the
// PubAck, as Broadcast waits for the append) and pages of 50 read from a
// cursor and acknowledged.
package jetstream

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

func startJS(b *testing.B, syncAlways bool) nats.JetStreamContext {
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: b.TempDir(), NoLog: true, NoSigs: true,
		SyncAlways: syncAlways}
	s, err := server.NewServer(opts)
	if err != nil {
		b.Fatal(err)
	}
	go s.Start() // ends with s.Shutdown below
	if !s.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close(); s.Shutdown(); s.WaitForShutdown() })
	js, err := nc.JetStream()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: "ROOM", Subjects: []string{"room.>"}, Storage: nats.FileStorage}); err != nil {
		b.Fatal(err)
	}
	return js
}

// BenchmarkJetStreamFilePublish: synchronous Publish (waits for the PubAck)
// from 1 and 16 publishers; fsync: every message (SyncAlways, what the
// embedded store and PostgreSQL do) or JetStream's default (every 2 min).
func BenchmarkJetStreamFilePublish(b *testing.B) {
	payload := []byte{0x0a, 0x05, 'b', 'e', 'n', 'c', 'h', 0x10, 0x01}
	for _, syncEach := range []bool{true, false} {
		for _, pubs := range []int{1, 16} {
			b.Run(fmt.Sprintf("fsync_each=%v/publishers=%d", syncEach, pubs), func(b *testing.B) {
				js := startJS(b, syncEach)
				var wg sync.WaitGroup
				b.ResetTimer()
				for p := 0; p < pubs; p++ {
					n := b.N / pubs
					if p < b.N%pubs {
						n++
					}
					wg.Add(1)
					go func(n int) {
						defer wg.Done()
						for i := 0; i < n; i++ {
							if _, err := js.Publish("room.1", payload); err != nil {
								b.Error(err)
								return
							}
						}
					}(n)
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// BenchmarkJetStreamFileReplayPage: a pull consumer fetches pages of 50
// from a 2,000-message stream and acknowledges each message (AckExplicit).
func BenchmarkJetStreamFileReplayPage(b *testing.B) {
	js := startJS(b, true)
	payload := []byte{0x0a, 0x05, 'b', 'e', 'n', 'c', 'h', 0x10, 0x01}
	for i := 0; i < 2000; i++ {
		if _, err := js.PublishAsync("room.1", payload); err != nil {
			b.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	consumer := 0
	var sub *nats.Subscription
	fresh := func() {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		consumer++
		var err error
		sub, err = js.PullSubscribe("room.1", fmt.Sprint("c", consumer), nats.AckExplicit(), nats.DeliverAll())
		if err != nil {
			b.Fatal(err)
		}
	}
	fresh()
	rows, read := 0, 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if read >= 1950 {
			b.StopTimer()
			fresh()
			read = 0
			b.StartTimer()
		}
		msgs, err := sub.Fetch(50, nats.MaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range msgs {
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
		}
		rows += len(msgs)
		read += len(msgs)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pages/s")
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}
