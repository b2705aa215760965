package gateway_test

import (
	"runtime"
	"testing"

	"github.com/echopubsub/echopubsub/gateway"
	"github.com/echopubsub/echopubsub/test"
)

// An idle socket costs little heap: its outbound queue grows when frames
// come (issue 37, item 9: it used to reserve OutboundQueue slots, 192 KiB
// at the default 4,096, when it opened). The figure is both ends of each
// socket together (the clients live in this process too), with the
// default OutboundQueue.
func TestGatewayIdleSocketMemory(t *testing.T) {
	const sockets = 200
	const maxPerSocket = 64 << 10
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	cfg := gateway.DefaultConfig()
	gw, url := serveGateway(t, nodes[0], nil, cfg)
	dialGateway(t, url) // the first socket's one-time allocations (pools, the HTTP server's) are not counted
	before := liveHeap()
	for i := 0; i < sockets; i++ {
		dialGateway(t, url)
	}
	// Every socket is open on the server side (its hello came).
	if n := gw.Sockets(); n != sockets+1 {
		t.Fatalf("%d sockets open, want %d", n, sockets+1)
	}
	per := (int64(liveHeap()) - int64(before)) / sockets
	t.Logf("heap per idle socket (both ends): %d bytes", per)
	if per > maxPerSocket {
		t.Fatalf("an idle socket holds %d bytes of heap, want at most %d", per, maxPerSocket)
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
