package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test/chaos"
)

// route is one listening address forwarded to one target (a node's remote
// port). Its mode applies to existing and new connections alike.
type route struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	mode    string
	latency time.Duration
	resume  chan struct{} // closed when a blackhole ends
	conns   map[net.Conn]struct{}

	// What the faults did, observed here (the harness confirms each fault
	// by them): connections closed by a cut, connections refused while cut,
	// chunks held by a blackhole, chunks delayed by latency.
	closed, refused, held, delayed atomic.Int64
}

func (r *route) state() (mode string, latency time.Duration, resume chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mode, r.latency, r.resume
}

func (r *route) setMode(mode string, latency time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mode == chaos.ModeBlackhole && mode != chaos.ModeBlackhole {
		close(r.resume)
	}
	if mode == chaos.ModeBlackhole && r.mode != chaos.ModeBlackhole {
		r.resume = make(chan struct{})
	}
	r.mode, r.latency = mode, latency
	if mode == chaos.ModeCut {
		for c := range r.conns {
			_ = c.Close()
			r.closed.Add(1)
		}
	}
}

func (r *route) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mode == chaos.ModeCut {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *route) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

func (r *route) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // listener closed
		}
		go r.handle(c)
	}
}

func (r *route) handle(client net.Conn) {
	if !r.track(client) {
		_ = client.Close()
		r.refused.Add(1)
		return
	}
	defer r.untrack(client)
	// A blackholed route accepts but does not connect onward until it ends.
	if mode, _, resume := r.state(); mode == chaos.ModeBlackhole {
		<-resume
	}
	server, err := net.DialTimeout("tcp", r.target, 2*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !r.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	defer r.untrack(server)
	done := make(chan struct{}, 2)
	go func() { r.pump(client, server); done <- struct{}{} }()
	go func() { r.pump(server, client); done <- struct{}{} }()
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
}

type chunk struct {
	at   time.Time
	data []byte
}

// pump copies src to dst through a delay line, so latency delays every byte
// by the same amount without limiting throughput.
func (r *route) pump(src, dst net.Conn) {
	line := make(chan chunk, 256) // bounds what a blackhole holds: 8 MiB
	go func() {
		defer close(line)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				line <- chunk{at: time.Now(), data: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range line {
		for {
			mode, latency, resume := r.state()
			if mode == chaos.ModeBlackhole {
				r.held.Add(1)
				<-resume // held, as a network that drops every packet holds TCP's retransmits
				continue
			}
			if mode == chaos.ModeLatency {
				r.delayed.Add(1)
				time.Sleep(time.Until(ch.at.Add(latency)))
			}
			break
		}
		if _, err := dst.Write(ch.data); err != nil {
			_ = src.Close()
			for range line { // drain until the reader sees the close
			}
			return
		}
	}
	_ = dst.Close()
}

func runProxy(in io.Reader, out io.Writer, sig <-chan os.Signal) error {
	var routes = map[string]*route{}
	child := proc.NewChild(out)
	child.Send(chaos.Event{Ev: proc.EvReady})
	cmds := proc.Commands[chaos.Command](child, in)
	for {
		select {
		case <-sig:
			return nil
		case c, ok := <-cmds:
			if !ok || c.Op == chaos.OpQuit {
				return nil
			}
			ev := chaos.Event{Ev: proc.EvReply, ID: c.ID}
			switch c.Op {
			case chaos.OpRoute:
				ln, err := net.Listen("tcp", c.Listen)
				if err != nil {
					ev.Err = err.Error()
					break
				}
				r := &route{ln: ln, target: c.Target, mode: chaos.ModePass, conns: map[net.Conn]struct{}{}}
				routes[c.Listen] = r
				ev.Addr = ln.Addr().String()
				go r.serve()
			case chaos.OpMode:
				r := routes[c.Listen]
				if r == nil {
					ev.Err = fmt.Sprintf("no route listening on %q", c.Listen)
					break
				}
				switch c.Mode {
				case chaos.ModePass, chaos.ModeCut, chaos.ModeBlackhole, chaos.ModeLatency:
					r.setMode(c.Mode, time.Duration(c.LatencyMS)*time.Millisecond)
				default:
					ev.Err = fmt.Sprintf("unknown mode %q", c.Mode)
				}
			case chaos.OpCounters:
				r := routes[c.Listen]
				if r == nil {
					ev.Err = fmt.Sprintf("no route listening on %q", c.Listen)
					break
				}
				ev.Counters = &chaos.ProxyCounters{Closed: r.closed.Load(), Refused: r.refused.Load(),
					Held: r.held.Load(), Delayed: r.delayed.Load()}
			default:
				ev.Err = fmt.Sprintf("unknown op %q", c.Op)
			}
			child.Send(ev)
		}
	}
}
