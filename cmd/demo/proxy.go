package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// The fault is a real cut in the transport path. Every node advertises the
// address of a TCP proxy in this (parent) process instead of its own remote
// port, so every connection to node i passes through proxy i. Each node's
// gRPC dialer also writes a two-byte preamble (preambleMagic, its own index)
// on every connection it opens, so a proxy knows both ends of each
// connection. Cutting node i then closes every connection to or from it and
// refuses new ones, in both directions: the node is really partitioned,
// while its process, its page column and its HTTP control port keep running.

const preambleMagic = 0xEC

// Fabric is the set of proxies and which nodes are cut off. Safe for
// concurrent use.
type Fabric struct {
	log zerolog.Logger

	mu      sync.Mutex
	offline map[int]bool
	gen     map[int]uint64 // bumped by every Cut/Restore: stale timers do nothing
	links   map[*link]struct{}
	proxies []*proxy
	closed  bool
	wg      sync.WaitGroup
}

// link is one proxied connection from node src to node dst.
type link struct {
	src, dst int
	down     net.Conn // from the dialing node

	mu     sync.Mutex // guards up and closed
	up     net.Conn   // to the target node's remote port
	closed bool
}

// close closes both ends. Safe to call more than once, from any goroutine.
func (l *link) close() {
	l.mu.Lock()
	l.closed = true
	up := l.up
	l.mu.Unlock()
	_ = l.down.Close()
	if up != nil {
		_ = up.Close()
	}
}

// setUp records the upstream connection, unless the link was closed.
func (l *link) setUp(up net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.up = up
	return true
}

type proxy struct {
	node   int
	ln     net.Listener
	target string
}

// NewFabric returns a fabric with no proxies and every node online.
func NewFabric(log zerolog.Logger) *Fabric {
	return &Fabric{log: log, offline: map[int]bool{}, gen: map[int]uint64{}, links: map[*link]struct{}{}}
}

// Listen opens node's proxy on a free loopback port and returns its address
// (the node's advertised address). It forwards to target, the node's real
// remote address.
func (f *Fabric) Listen(node int, target string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("proxy for node %d: %w", node, err)
	}
	p := &proxy{node: node, ln: ln, target: target}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		_ = ln.Close()
		return "", errors.New("proxy: fabric closed")
	}
	f.proxies = append(f.proxies, p)
	f.wg.Add(1)
	go func() { defer f.wg.Done(); f.accept(p) }()
	return ln.Addr().String(), nil
}

func (f *Fabric) accept(p *proxy) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed by Close
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			_ = c.Close()
			return
		}
		f.wg.Add(1)
		f.mu.Unlock()
		go func() { defer f.wg.Done(); f.serve(p, c) }()
	}
}

func (f *Fabric) serve(p *proxy, down net.Conn) {
	var pre [2]byte
	_ = down.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(down, pre[:]); err != nil || pre[0] != preambleMagic {
		_ = down.Close()
		return
	}
	_ = down.SetReadDeadline(time.Time{})
	l := &link{src: int(pre[1]), dst: p.node, down: down}
	if !f.add(l) {
		l.close() // refused: one end is offline
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		f.remove(l)
		l.close()
		return
	}
	if !l.setUp(up) { // cut while dialing
		_ = up.Close()
		f.remove(l)
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, down); done <- struct{}{} }()
	go func() { _, _ = io.Copy(down, up); done <- struct{}{} }()
	<-done
	l.close() // one direction ended: end the other
	<-done
	f.remove(l)
}

// add registers l unless one of its ends is offline.
func (f *Fabric) add(l *link) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.offline[l.src] || f.offline[l.dst] {
		return false
	}
	f.links[l] = struct{}{}
	return true
}

func (f *Fabric) remove(l *link) {
	f.mu.Lock()
	delete(f.links, l)
	f.mu.Unlock()
}

// Online reports whether node is connected to the cluster.
func (f *Fabric) Online(node int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.offline[node]
}

// Cut takes node offline: every connection to or from it is closed and new
// ones are refused until Restore.
func (f *Fabric) Cut(node int) {
	f.mu.Lock()
	f.offline[node] = true
	f.gen[node]++
	var cut []*link
	for l := range f.links {
		if l.src == node || l.dst == node {
			cut = append(cut, l)
			delete(f.links, l)
		}
	}
	f.mu.Unlock()
	for _, l := range cut {
		l.close()
	}
	f.log.Info().Int("node_index", node).Int("connections_cut", len(cut)).Msg("node offline")
}

// Restore brings node back online.
func (f *Fabric) Restore(node int) {
	f.mu.Lock()
	delete(f.offline, node)
	f.gen[node]++
	f.mu.Unlock()
	f.log.Info().Int("node_index", node).Msg("node online")
}

// CutFor cuts node off and restores it after d, unless something else
// (Back online, Go offline) touches the node in the meantime.
func (f *Fabric) CutFor(node int, d time.Duration, restored func()) {
	f.Cut(node)
	f.mu.Lock()
	gen := f.gen[node]
	f.mu.Unlock()
	time.AfterFunc(d, func() {
		f.mu.Lock()
		stale := f.closed || f.gen[node] != gen
		f.mu.Unlock()
		if !stale {
			f.Restore(node)
			restored()
		}
	})
}

// Close stops every proxy and closes every connection, then waits for the
// proxy goroutines. Idempotent.
func (f *Fabric) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	links := f.links
	f.links = map[*link]struct{}{}
	proxies := f.proxies
	f.mu.Unlock()
	for _, p := range proxies {
		_ = p.ln.Close()
	}
	for l := range links {
		l.close()
	}
	f.wg.Wait()
}
