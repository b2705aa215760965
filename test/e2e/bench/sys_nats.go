package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// natsServerMain is the NATS server process: nats-server embedded, alone in
// its own OS process, with JetStream and a memory stream for the bench
// subject. It says "ready" and runs until stdin closes.
func natsServerMain(cfg nodeConfig, out *proc.Child, wait func()) error {
	opts := &server.Options{Host: "127.0.0.1", Port: cfg.NatsPort, JetStream: true, StoreDir: cfg.StoreDir,
		NoSigs: true, NoLog: true, MaxPayload: 8 << 20, MaxPending: 256 << 20}
	s, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		return fmt.Errorf("nats server not ready in 20s")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: jsStream, Subjects: []string{topic},
		Storage: jetstream.MemoryStorage, Retention: jetstream.LimitsPolicy, MaxBytes: 4 << 30}); err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	nc.Close()
	out.Send(event{Ev: proc.EvReady})
	wait()
	s.Shutdown()
	return nil
}

type natsSys struct {
	js       bool
	sub      *nats.Conn
	pubConns []*nats.Conn
	pubJS    []jetstream.JetStream
	cc       jetstream.ConsumeContext
	errs     atomic.Int64
}

func startNATS(cfg nodeConfig, coll *Collector) (system, error) {
	s := &natsSys{js: cfg.System == sysJetStream}
	var err error
	s.sub, err = nats.Connect(cfg.NatsURL, nats.Name(fmt.Sprintf("n%d-sub", cfg.Index)))
	if err != nil {
		return nil, err
	}
	handle := func(data []byte) {
		var m testpb.Stamp
		if err := proto.Unmarshal(data, &m); err != nil {
			coll.Notice()
			return
		}
		if m.Publisher == "ping" {
			return
		}
		coll.Add(m.Seq, m.SentUnixNano)
	}
	if s.js {
		js, err := jetstream.New(s.sub)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cons, err := js.CreateOrUpdateConsumer(ctx, jsStream, jetstream.ConsumerConfig{
			Durable: fmt.Sprintf("n%d", cfg.Index), AckPolicy: jetstream.AckExplicitPolicy,
			DeliverPolicy: jetstream.DeliverNewPolicy, MaxAckPending: 20_000})
		if err != nil {
			return nil, fmt.Errorf("create consumer: %w", err)
		}
		s.cc, err = cons.Consume(func(msg jetstream.Msg) {
			handle(msg.Data())
			if err := msg.Ack(); err != nil {
				s.errs.Add(1)
			}
		}, jetstream.PullMaxMessages(5000))
		if err != nil {
			return nil, err
		}
	} else {
		sub, err := s.sub.Subscribe(topic, func(m *nats.Msg) { handle(m.Data) })
		if err != nil {
			return nil, err
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil { // never a client-side slow-consumer drop
			return nil, err
		}
		if err := s.sub.Flush(); err != nil {
			return nil, err
		}
	}
	if cfg.Index == 0 {
		for i := 0; i < max(cfg.Pubs, 1); i++ {
			nc, err := nats.Connect(cfg.NatsURL, nats.Name(fmt.Sprintf("pub%d", i)))
			if err != nil {
				return nil, err
			}
			s.pubConns = append(s.pubConns, nc)
			if s.js {
				js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096),
					jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
						if s.errs.Add(1) == 1 {
							fmt.Fprintf(os.Stderr, "jetstream publish: %v\n", err)
						}
					}))
				if err != nil {
					return nil, err
				}
				s.pubJS = append(s.pubJS, js)
			}
		}
	}
	return s, nil
}

func (s *natsSys) ready() (bool, string) {
	if err := s.sub.Flush(); err != nil {
		return false, err.Error()
	}
	return true, ""
}

func (s *natsSys) publish(pub int, m *testpb.Stamp) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	if s.js {
		// Back-pressure, not loss: wait for room as long as it takes.
		_, err = s.pubJS[pub].PublishAsync(topic, b, jetstream.WithStallWait(time.Minute))
		return err
	}
	return s.pubConns[pub].Publish(topic, b)
}

func (s *natsSys) flush() error {
	for i, nc := range s.pubConns {
		if s.js {
			select {
			case <-s.pubJS[i].PublishAsyncComplete():
			case <-time.After(60 * time.Second):
				return fmt.Errorf("jetstream publishes not acked in 60s")
			}
		}
		if err := nc.FlushTimeout(30 * time.Second); err != nil {
			return err
		}
	}
	if n := s.errs.Load(); n > 0 {
		return fmt.Errorf("%d publish errors", n)
	}
	return nil
}

func (s *natsSys) close() {
	if s.cc != nil {
		s.cc.Stop()
	}
	for _, nc := range s.pubConns {
		nc.Close()
	}
	s.sub.Close()
}
