package cluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"

	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
)

// Static is the embedded default membership: a fixed list of advertised
// addresses. A listed node is a candidate; producers count it as joined from
// its first successful registration handshake. Static forwards protoactor's
// remote EndpointConnectedEvent as Reachable so a returning node is served
// without waiting for the retry interval.
type Static struct {
	addrs []string

	mu      sync.Mutex // guards sub and stopped against Stop racing Start
	env     Env
	sub     *eventstream.Subscription
	stopped bool
	err     error
}

// NewStatic lists the advertised remote addresses (host:port) of all nodes,
// this one included. Duplicates are ignored. Start refuses an empty list and
// a list without this node's advertised address.
func NewStatic(addrs ...string) *Static {
	seen := make(map[string]bool, len(addrs))
	s := &Static{}
	if len(addrs) == 0 {
		s.err = fmt.Errorf("cluster: static membership lists no address: list every node's host:port, this one included")
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil && s.err == nil {
			s.err = fmt.Errorf("cluster: static address %q is not host:port: %w", a, err)
		}
		if !seen[a] {
			seen[a] = true
			s.addrs = append(s.addrs, a)
		}
	}
	return s
}

// Start implements Membership.
func (s *Static) Start(env Env) error {
	if s.err != nil {
		return s.err
	}
	if !slices.Contains(s.addrs, env.Self.Address) {
		return fmt.Errorf("cluster: static membership %q does not list this node, %q: list every node's advertised address, this one included",
			s.addrs, env.Self.Address)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.env = env
	for _, a := range s.addrs {
		m := Member{Address: a, Name: a}
		if a == env.Self.Address {
			m = env.Self
		}
		env.System.Root.Send(env.Owner, &Event{Kind: Joined, Member: m})
	}
	env.System.Root.Send(env.Owner, &Event{Kind: Listed})
	s.sub = env.System.EventStream.Subscribe(func(evt interface{}) {
		if ev, ok := evt.(*remote.EndpointConnectedEvent); ok && s.listed(ev.Address) {
			env.System.Root.Send(env.Owner, &Event{Kind: Reachable, Member: Member{Address: ev.Address, Name: ev.Address}})
		}
	})
	return nil
}

func (s *Static) listed(addr string) bool {
	for _, a := range s.addrs {
		if a == addr {
			return true
		}
	}
	return false
}

// Members implements Membership.
func (s *Static) Members() []Member {
	out := make([]Member, 0, len(s.addrs))
	for _, a := range s.addrs {
		out = append(out, Member{Address: a, Name: a})
	}
	return out
}

// Stop implements Membership.
func (s *Static) Stop(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	if s.sub != nil {
		s.env.System.EventStream.Unsubscribe(s.sub)
	}
	return nil
}
