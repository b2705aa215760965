package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// system is one system under test, as one node sees it.
type system interface {
	// ready tells whether this node is connected to every other node (and
	// its collector subscribed everywhere it must be); why says what is missing.
	ready() (ok bool, why string)
	// publish sends one message from publisher pub; it is called
	// concurrently by the publisher goroutines.
	publish(pub int, m *testpb.Stamp) error
	// flush waits until what was published has left this node (or been
	// confirmed, for the systems that confirm).
	flush() error
	close()
}

type nodeProc struct {
	cfg  nodeConfig
	coll *Collector
	sys  system

	out *proc.Child

	pubMu   sync.Mutex
	publish *pubRun
	prof    *os.File
	mem     *memSampler // nil unless cfg.MemSample
	tracer  *tailTracer // nil unless cfg.TraceTail
}

type pubRun struct {
	start, end atomic.Int64
	errs       atomic.Int64
}

// nodeMain is a node process: it sets the system up, says "ready", and
// serves commands until "quit" or end of stdin.
func nodeMain(cfg nodeConfig, in io.Reader, out io.Writer) error {
	n := &nodeProc{cfg: cfg, coll: newCollector(), out: proc.NewChild(out)}
	if cfg.MemSample {
		n.mem = startMemSampler(20 * time.Millisecond)
	}
	if cfg.TraceTail {
		n.tracer = newTailTracer()
		n.coll.trace = true
	}
	var err error
	switch cfg.System {
	case sysOurs:
		n.sys, err = startOurs(cfg, n.coll, n.tracer)
	case sysRaw:
		n.sys, err = startRaw(cfg, n.coll)
	case sysRelay:
		n.sys, err = startRelay(cfg, n.coll)
	case sysBatch:
		n.sys, err = startBatcher(cfg, n.coll)
	case sysCluster:
		n.sys, err = startCluster(cfg, n.coll)
	case sysNATS, sysJetStream:
		n.sys, err = startNATS(cfg, n.coll)
	default:
		err = fmt.Errorf("unknown system %q", cfg.System)
	}
	if err != nil {
		return err
	}
	defer n.sys.close()
	n.out.Send(event{Ev: proc.EvReady})
	for c := range proc.Commands[cmd](n.out, in) {
		if c.Op == "quit" {
			n.stopProfile()
			n.out.Send(event{Ev: proc.EvReply, ID: c.ID, OK: true})
			return nil
		}
		n.handle(c)
	}
	n.stopProfile()
	return nil
}

func (n *nodeProc) handle(c cmd) {
	reply := event{Ev: proc.EvReply, ID: c.ID, OK: true}
	switch c.Op {
	case "ready":
		reply.OK, reply.Why = n.sys.ready()
	case "reset":
		n.coll.Reset(c.Rep, c.Pubs, c.N, c.Latency)
		if n.tracer != nil {
			n.tracer.reset()
		}
	case "trace":
		if n.tracer != nil {
			reply.Trace = n.tracer.report(n.coll.Traced())
		}
	case "status":
		st := n.coll.Status()
		reply.Coll = &st
		n.pubMu.Lock()
		if p := n.publish; p != nil {
			reply.PubStart, reply.PubEnd, reply.PubErrs = p.start.Load(), p.end.Load(), p.errs.Load()
		}
		n.pubMu.Unlock()
	case "publish":
		p := &pubRun{}
		n.pubMu.Lock()
		n.publish = p
		n.pubMu.Unlock()
		go n.runPublish(c, p)
	case "latency":
		l := n.coll.Latencies()
		reply.Lat = &latSummary{Count: len(l), Samples: l}
	case "prof_start":
		f, err := os.Create(c.Path)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			reply.OK, reply.Err = false, err.Error()
		} else {
			n.prof = f
		}
	case "prof_stop":
		n.stopProfile()
	default:
		if !n.handleMem(c, &reply) {
			reply.OK, reply.Err = false, "unknown op "+c.Op
		}
	}
	n.out.Send(reply)
}

func (n *nodeProc) stopProfile() {
	if n.prof != nil {
		pprof.StopCPUProfile()
		_ = n.prof.Close()
		n.prof = nil
	}
}

// runPublish sends c.N messages from c.Pubs goroutines, as fast as the
// system takes them or at c.Rate msg/s in total.
func (n *nodeProc) runPublish(c cmd, p *pubRun) {
	pad := make([]byte, c.Pad)
	for i := range pad {
		pad[i] = byte('a' + i%26)
	}
	per := (c.N + c.Pubs - 1) / c.Pubs
	var wg sync.WaitGroup
	p.start.Store(time.Now().UnixNano())
	start := time.Now()
	for pub := 0; pub < c.Pubs; pub++ {
		count := per
		if rest := c.N - pub*per; rest < per {
			count = max(rest, 0)
		}
		wg.Add(1)
		go func(pub, count int) {
			defer wg.Done()
			var interval time.Duration
			if c.Rate > 0 {
				interval = time.Duration(float64(time.Second) * float64(c.Pubs) / float64(c.Rate))
			}
			for i := 0; i < count; i++ {
				if interval > 0 {
					if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
						time.Sleep(d)
					}
				}
				m := &testpb.Stamp{Seq: makeSeq(c.Rep, pub, i), Pad: pad}
				if c.Rate > 0 {
					m.SentUnixNano = time.Now().UnixNano()
				}
				if err := n.sys.publish(pub, m); err != nil {
					if p.errs.Add(1) == 1 {
						fmt.Fprintf(os.Stderr, "publish: %v\n", err)
					}
				}
			}
		}(pub, count)
	}
	wg.Wait()
	if err := n.sys.flush(); err != nil {
		p.errs.Add(1)
		fmt.Fprintf(os.Stderr, "flush: %v\n", err)
	}
	p.end.Store(time.Now().UnixNano())
}
