package chaos

import (
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// Publisher is one publisher of a node process (chaosnode, test/e2e's
// sessionnode): it broadcasts rate stamps a second on a topic, numbered 1,
// 2, 3, ..., and records each one Broadcast accepted. A number is used up
// only when Broadcast accepted it, so a refused broadcast (ErrBusy, a
// durable append that failed) is retried, never a gap of the publisher's
// own making.
type Publisher struct {
	Name  string
	From  *actor.PID
	Node  string
	Group uint32

	ps     *echopubsub.PubSub
	rec    *Recorder
	log    zerolog.Logger
	topic  string
	last   atomic.Uint64
	lastAt atomic.Int64 // when last was broadcast, unix ns
	skip   atomic.Bool  // skip the next sequence number (OpSkip)
	cancel chan struct{}
	done   chan struct{}
}

// StartPublisher starts publisher index of node (named node#incarnation/p<index>)
// on topic, with pad bytes of padding per stamp.
func StartPublisher(ps *echopubsub.PubSub, rec *Recorder, log zerolog.Logger, topic, node string, incarnation, index, pool, rate, pad int) *Publisher {
	p := &Publisher{Name: fmt.Sprintf("%s#%d/p%d", node, incarnation, index), Node: ps.NodeName(),
		From: actor.NewPID(ps.NodeName(), fmt.Sprintf("chaos-publisher-%d", index)),
		ps:   ps, rec: rec, log: log, topic: topic, cancel: make(chan struct{}), done: make(chan struct{})}
	p.Group = GroupOf(p.From, pool)
	go p.run(rate, pad)
	return p
}

// Publishers is a node process's publishers, started one by one and
// stopped together; safe for concurrent use (the zero value is empty).
type Publishers struct {
	mu   sync.Mutex
	pubs []*Publisher
}

// Start starts the node's next publisher (StartPublisher, its index the
// number started before it).
func (s *Publishers) Start(ps *echopubsub.PubSub, rec *Recorder, log zerolog.Logger, topic, node string, incarnation, pool, rate, pad int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pubs = append(s.pubs, StartPublisher(ps, rec, log, topic, node, incarnation, len(s.pubs), pool, rate, pad))
}

// Stop stops every publisher (Publisher.Stop), outside the lock: Info
// answers meanwhile.
func (s *Publishers) Stop() {
	s.mu.Lock()
	pubs := append([]*Publisher(nil), s.pubs...)
	s.mu.Unlock()
	for _, p := range pubs {
		p.Stop()
	}
}

// Skip makes every publisher skip its next number (OpSkip).
func (s *Publishers) Skip() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pubs {
		p.Skip()
	}
}

// Info is what each publisher sent so far.
func (s *Publishers) Info() []PubInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []PubInfo
	for _, p := range s.pubs {
		out = append(out, p.Info())
	}
	return out
}

// GroupOf is the pool group the library routes a sender's broadcasts
// through (core.Runtime.Group), so a publisher nobody heard from still
// has its producer stream.
func GroupOf(from *actor.PID, pool int) uint32 {
	if pool <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(from.Address))
	_, _ = h.Write([]byte{'/'})
	_, _ = h.Write([]byte(from.Id))
	return h.Sum32() % uint32(pool)
}

// Skip makes the publisher skip its next sequence number: a gap of the
// test's own making (OpSkip).
func (p *Publisher) Skip() { p.skip.Store(true) }

// Info is what the publisher sent so far.
func (p *Publisher) Info() PubInfo {
	return PubInfo{Name: p.Name, Node: p.Node, Group: p.Group, Last: p.last.Load(), LastAt: p.lastAt.Load()}
}

// Stop stops the publisher and waits up to 10 s for it; idempotent.
func (p *Publisher) Stop() {
	select {
	case <-p.cancel:
	default:
		close(p.cancel)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.log.Error().Str("publisher", p.Name).Msg("chaos: publisher did not stop within 10s")
	}
}

func (p *Publisher) run(rate, pad int) {
	defer close(p.done)
	padding := make([]byte, pad)
	start := time.Now()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-p.cancel:
			return
		case <-t.C:
		}
		due := uint64(time.Since(start).Seconds() * float64(rate))
		for p.last.Load() < due {
			seq := p.last.Load() + 1
			if p.skip.CompareAndSwap(true, false) {
				p.last.Store(seq) // never sent: a planted gap
				seq++
			}
			at := time.Now().UnixNano()
			err := p.ps.Broadcast(p.From, p.topic, &testpb.Stamp{Publisher: p.Name, Seq: seq, Pad: padding, SentUnixNano: at})
			if err != nil {
				failures++
				if failures == 1 || failures%100 == 0 {
					p.log.Warn().Err(err).Str("publisher", p.Name).Int("failures", failures).Msg("chaos: broadcast refused: retrying")
				}
				break
			}
			p.rec.Published(p.Name, p.Node, p.Group, seq, at)
			p.last.Store(seq)
			p.lastAt.Store(at)
			select {
			case <-p.cancel:
				return
			default:
			}
		}
	}
}
