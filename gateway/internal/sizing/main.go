// Command sizing measures a gateway node's memory before, with and after
// many sockets (docs/gateway.md, "Sizing"): one node and its gateway in
// this process, the clients in a child process (this binary again), so
// that the figures are the server's alone.
//
//	cd gateway && go run ./internal/sizing -sockets 5000
//
// Each phase prints the process's resident set (VmRSS) and the Go
// runtime's view: live heap, heap held but free, heap returned to the OS,
// goroutine stacks.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/coder/websocket"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/gateway"
)

func main() {
	sockets := flag.Int("sockets", 5000, "sockets to open")
	burst := flag.Int("burst", 100, "messages (2 KB) broadcast to every socket while open; each client acks them")
	clients := flag.String("clients", "", "internal: run as the client process against this URL")
	heapProfile = flag.String("heapprofile", "", "write a heap profile here at the end")
	flag.Parse()
	var err error
	if *clients != "" {
		err = runClients(*clients, *sockets, *burst)
	} else {
		err = runServer(*sockets, *burst)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sizing:", err)
		os.Exit(1)
	}
}

var heapProfile *string

// scavengeWaits are the pauses after which the closed phase is sampled again.
var scavengeWaits = []time.Duration{10 * time.Second, 50 * time.Second}

func runServer(sockets, burst int) error {
	if *heapProfile != "" {
		runtime.MemProfileRate = 512
	}
	log := zerolog.New(os.Stderr).Level(zerolog.WarnLevel)
	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(log.Level(zerolog.Disabled)))
	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", 0, log))
	r.Start()
	defer r.Shutdown(false)
	ps, err := echopubsub.Start(system, echopubsub.DefaultConfig("sizing"),
		echopubsub.WithMembership(cluster.NewStatic(system.Address())), echopubsub.WithLogger(log))
	if err != nil {
		return err
	}
	defer func() { _ = ps.Stop(context.Background()) }()
	gw, err := gateway.New(ps, gateway.AnyIdentity, gateway.DefaultConfig())
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: gw}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()

	sample("before (no socket; after a GC)", true)
	child := exec.Command(os.Args[0], "-clients", "ws://"+ln.Addr().String(), "-sockets", strconv.Itoa(sockets), "-burst", strconv.Itoa(burst))
	child.Stderr = os.Stderr
	in, err := child.StdinPipe()
	if err != nil {
		return err
	}
	out, err := child.StdoutPipe()
	if err != nil {
		return err
	}
	if err := child.Start(); err != nil {
		return err
	}
	lines := bufio.NewScanner(out)
	expect := func(want string) error {
		if !lines.Scan() || lines.Text() != want {
			return fmt.Errorf("client process said %q, want %q (%v)", lines.Text(), want, lines.Err())
		}
		return nil
	}
	if err := expect("open"); err != nil {
		return err
	}
	if err := until(func() bool { return gw.Sockets() == sockets }); err != nil {
		return fmt.Errorf("%d sockets open, want %d", gw.Sockets(), sockets)
	}
	sample(fmt.Sprintf("with %d idle sockets (after a GC)", sockets), true)
	pad := wrapperspb.Bytes(make([]byte, 2048))
	for i := 0; i < burst; i++ {
		for ps.Broadcast(nil, "room", pad) != nil {
			time.Sleep(time.Millisecond) // ErrBusy: let the node catch up
		}
	}
	if err := expect("acked"); err != nil {
		return err
	}
	sample(fmt.Sprintf("with %d sockets, after %d x 2 KB to each, acked (no GC)", sockets, burst), false)
	sample(fmt.Sprintf("with %d sockets, after the burst (after a GC)", sockets), true)
	if _, err := fmt.Fprintln(in, "close"); err != nil {
		return err
	}
	if err := until(func() bool { return gw.Sockets() == 0 }); err != nil {
		return fmt.Errorf("%d sockets still open", gw.Sockets())
	}
	_ = in.Close()
	if err := child.Wait(); err != nil {
		return err
	}
	sample("all closed (no GC)", false)
	sample("all closed, after a GC", true)
	for _, d := range scavengeWaits {
		time.Sleep(d)
		sample(fmt.Sprintf("all closed, %v later (the background scavenger)", d), false)
	}
	debug.FreeOSMemory()
	sample("after debug.FreeOSMemory", false)
	if *heapProfile != "" {
		f, err := os.Create(*heapProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		return pprof.WriteHeapProfile(f)
	}
	return nil
}

// until polls cond for up to a minute.
func until(cond func() bool) error {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return nil
		}
	}
	return fmt.Errorf("timed out")
}

// sample prints one line of figures, after a full collection when gc.
func sample(phase string, gc bool) {
	if gc {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	mib := func(b uint64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
	fmt.Printf("| %s | %s | %s | %s | %s | %s | %d |\n", phase, mib(rss()), mib(m.HeapAlloc),
		mib(m.HeapIdle-m.HeapReleased), mib(m.HeapReleased), mib(m.StackInuse), runtime.NumGoroutine())
}

// rss is the process's resident set (VmRSS), 0 when /proc cannot say.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// runClients opens n sockets, subscribes each to "room", says "open",
// acks burst envelopes on each (ack_many per 50), says "acked", and closes
// them all when told "close" on stdin.
func runClients(url string, n, burst int) error {
	ctx := context.Background()
	conns := make([]*websocket.Conn, n)
	var acked atomic.Int64
	allAcked := make(chan struct{})
	var wg sync.WaitGroup
	for i := range conns {
		c, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			return fmt.Errorf("socket %d: %w", i, err)
		}
		conns[i] = c
		if err := c.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","topic":"room"}`)); err != nil {
			return err
		}
		for { // hello, then the subscribe's answer
			_, b, err := c.Read(ctx)
			if err != nil {
				return fmt.Errorf("socket %d: %w", i, err)
			}
			if strings.HasPrefix(string(b), `{"type":"result"`) {
				break
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ids []uint64
			got := 0
			for {
				_, b, err := c.Read(ctx)
				if err != nil {
					return // closed
				}
				var f struct {
					Type       string `json:"type"`
					DeliveryID uint64 `json:"delivery_id"`
				}
				if json.Unmarshal(b, &f) != nil || f.Type != "envelope" {
					continue
				}
				got++
				ids = append(ids, f.DeliveryID)
				if len(ids) == 50 || got == burst {
					cmd, _ := json.Marshal(map[string]interface{}{"op": "ack_many", "delivery_ids": ids})
					if c.Write(ctx, websocket.MessageText, cmd) != nil {
						return
					}
					ids = ids[:0]
				}
				if got == burst && acked.Add(1) == int64(n) {
					close(allAcked)
				}
			}
		}()
	}
	fmt.Println("open")
	if burst > 0 {
		<-allAcked
	}
	fmt.Println("acked")
	cmd := bufio.NewScanner(os.Stdin)
	if !cmd.Scan() || cmd.Text() != "close" {
		return fmt.Errorf("told %q, want close", cmd.Text())
	}
	for _, c := range conns {
		_ = c.CloseNow()
	}
	wg.Wait()
	return nil
}
