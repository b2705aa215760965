package stream

import (
	"fmt"
	"net"

	"github.com/asynkron/protoactor-go/actor"
)

// Reaching a peer before a call, when its last call failed or it never
// answered.
//
// A call to a node whose port refuses connections leaves protoactor's
// endpoint to it in a failed dial: the endpoint writer sleeps two seconds,
// then dead-letters everything queued for the node meanwhile and goes away.
// Whatever this node sends there in those two seconds is lost, and the
// peer's requests too wait in vain: their answers, queued behind the failed
// dial, are dead-lettered (not answered), so the peer's call waits out its
// whole CallTimeout. That is what made a first delivery take 5 s when the
// receiver started first, and 2 s the other way round.
//
// So a producer hands a request to protoactor only for a node that accepts
// a connection: it first connects to the node's address itself (and closes
// the connection at once, before any byte is sent). A refused connection is
// an answer, like a dead-lettered call: the producer retries after
// RetryInterval. Once the node answers a call, calls go straight out again
// until one fails.

// reached is the result of reach, for the producer's mailbox.
type reached struct {
	pe  *peer
	err error
}

// reach connects to pe's address off the producer's goroutine (within
// CallTimeout, or until the producer stops) and sends the result to the
// producer. The call is pe's one in flight until then.
func (p *producer) reach(ctx actor.Context, pe *peer) {
	pe.inFlight = true
	self, root := ctx.Self(), ctx.ActorSystem().Root
	dctx, timeout := p.dialCtx, p.cfg.CallTimeout
	addr := pe.m.Address
	go func() {
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(dctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
		} else {
			err = fmt.Errorf("node %s does not accept connections: %w", addr, err)
		}
		root.Send(self, &reached{pe: pe, err: err})
	}()
}

// onReached goes on with pe's call once its address accepted a connection,
// or fails the call (retried after RetryInterval).
func (p *producer) onReached(ctx actor.Context, m *reached) {
	pe := m.pe
	if p.peers[pe.m.Name] != pe { // forgotten meanwhile
		return
	}
	pe.inFlight = false
	if m.err != nil {
		pe.lastErr = m.err.Error()
		p.failed(ctx, pe, m.err)
		return
	}
	pe.callable = true
	p.service(ctx, pe)
}
