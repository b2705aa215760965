package echopubsub_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// countingProxy forwards every connection made to addr to target, and
// counts the bytes target sends back (the receiving node's control frames:
// SETTINGS, WINDOW_UPDATE, PING).
type countingProxy struct {
	addr string
	back atomic.Int64
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	conn []net.Conn
}

func newCountingProxy(t *testing.T, target string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{addr: ln.Addr().String(), ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conn = append(p.conn, in, out)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() {
				defer p.wg.Done()
				buf := make([]byte, 32<<10)
				for {
					n, err := out.Read(buf)
					p.back.Add(int64(n))
					if n > 0 {
						if _, werr := in.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				_ = in.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conn {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// link is a sending node and a receiving node, both on RemoteConfig, with
// the receiving node's traffic through a countingProxy: the receiving node
// advertises the proxy, so what is sent to its actors goes through it.
type link struct {
	proxy *countingProxy
	send  *actor.ActorSystem
	sink  *actor.PID // the receiving node's actor, reached through the proxy
	got   chan *testpb.Stamp
}

func newLink(t *testing.T) *link {
	t.Helper()
	log := test.Logger(t, zerolog.WarnLevel)
	port := test.FreePort(t)
	l := &link{proxy: newCountingProxy(t, fmt.Sprintf("127.0.0.1:%d", port)), got: make(chan *testpb.Stamp, 1)}
	recvSys := actor.NewActorSystem(echopubsub.ActorSystemLogger(log))
	recv := remote.NewRemote(recvSys, echopubsub.RemoteConfig("127.0.0.1", port, log, remote.WithAdvertisedHost(l.proxy.addr)))
	recv.Start()
	t.Cleanup(func() { recv.Shutdown(false); recvSys.Shutdown() })
	if _, err := recvSys.Root.SpawnNamed(actor.PropsFromFunc(func(ctx actor.Context) {
		if m, ok := ctx.Message().(*testpb.Stamp); ok {
			l.got <- m
		}
	}), "sink"); err != nil {
		t.Fatal(err)
	}
	var send *remote.Remote
	l.send, send = test.StartRemote(t, log)
	t.Cleanup(func() { send.Shutdown(false); l.send.Shutdown() })
	l.sink = actor.NewPID(l.proxy.addr, "sink")
	return l
}

// oneByOne sends Stamps from to to-1, each after the one before it was
// received: each travels in a frame of its own.
func (l *link) oneByOne(t *testing.T, from, to uint64) {
	t.Helper()
	for i := from; i < to; i++ {
		l.send.Root.Send(l.sink, &testpb.Stamp{Publisher: "link", Seq: i})
		l.receive(t, i)
	}
}

func (l *link) receive(t *testing.T, seq uint64) *testpb.Stamp {
	t.Helper()
	select {
	case m := <-l.got:
		if m.Seq != seq {
			t.Fatalf("received %d, want %d", m.Seq, seq)
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("message %d not received within 10s", seq)
		return nil
	}
}

// TestGuardKeepsAQuietLinkQuiet: a link that carries one small message at a
// time, each in an HTTP/2 frame of its own (a moderate rate), carries no
// control frame back per message. With gRPC's default, growing window, the
// receiving node answered nearly every data frame with a WINDOW_UPDATE and
// a PING (its probe of the link), and the sender answered the PING: at
// 10,000 msg/s on 3 nodes that was about 40 % of the cluster's system calls
// (FlowWindowBytes). The guard's fixed window ends it.
func TestGuardKeepsAQuietLinkQuiet(t *testing.T) {
	l := newLink(t)
	l.oneByOne(t, 0, 20) // the connection is up, the settings exchanged
	before := l.proxy.back.Load()
	const n = 300
	l.oneByOne(t, 20, 20+n)
	back := l.proxy.back.Load() - before
	// A keepalive PING's ack (17 bytes) may fall in a slow run; the probes
	// were 12 bytes per message here (3,553 in all), more on a slower link.
	if back > 300 {
		t.Fatalf("the receiving node sent %d bytes back for %d one-by-one messages (%.1f per message): "+
			"control frames answer data frames (the growing window's probes)", back, n, float64(back)/n)
	}
	t.Logf("%d bytes back for %d one-by-one messages", back, n)
}

// TestGuardPassesAMessageLargerThanItsWindow: a message over
// FlowWindowBytes (and gRPC's 4 MiB default frame) passes whole, in order
// with the small ones around it.
func TestGuardPassesAMessageLargerThanItsWindow(t *testing.T) {
	l := newLink(t)
	l.oneByOne(t, 0, 3)
	pad := make([]byte, echopubsub.FlowWindowBytes+5<<20)
	for i := range pad {
		pad[i] = byte(i % 251)
	}
	l.send.Root.Send(l.sink, &testpb.Stamp{Publisher: "link", Seq: 3, Pad: pad})
	l.send.Root.Send(l.sink, &testpb.Stamp{Publisher: "link", Seq: 4})
	if m := l.receive(t, 3); !bytes.Equal(m.Pad, pad) {
		t.Fatalf("the large message arrived with %d bytes, not the %d sent", len(m.Pad), len(pad))
	}
	l.receive(t, 4)
	l.oneByOne(t, 5, 8)
}
