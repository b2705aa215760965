package stream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/messages"
)

// nack handles an answer that is not OK. It returns false to have the call
// treated as failed (retried after RetryInterval).
func (p *producer) nack(pe *peer, res interface{}) bool {
	status, detail := messages.AckStatus_ACK_STATUS_UNSPECIFIED, fmt.Sprintf("%T", res)
	switch r := res.(type) {
	case *messages.BatchAck:
		status, detail = r.Status, r.Error
	case *messages.RegisterAck:
		status, detail = r.Status, r.Error
	}
	if status == messages.AckStatus_ACK_STATUS_UNKNOWN_PRODUCER {
		pe.registered = false // the worker lost us (it restarted): handshake again
		pe.version = 0        // in whatever version its new incarnation speaks
		pe.lastErr = "worker does not know this producer"
		return false
	}
	pe.lastErr = fmt.Sprintf("%v: %s", status, detail)
	return false
}

// call sends req to pe's worker as a request and runs onAck with the answer
// on the producer's goroutine. onAck returns false for a negative answer.
func (p *producer) call(ctx actor.Context, pe *peer, req proto.Message, onAck func(res interface{}) bool) {
	pe.inFlight = true
	p.request(ctx, pe, req, func(res interface{}, err error) {
		pe.inFlight = false
		if err == nil && onAck(res) {
			p.answered(pe)
			return
		}
		if err == nil {
			err = fmt.Errorf("%s", pe.lastErr)
		}
		p.failed(ctx, pe, err)
	})
}

// request sends req to pe's worker and runs done with the answer on the
// producer's goroutine; a send the fault hook refuses is answered at once
// with its error. A continuation of a restarted producer or a forgotten peer
// is dropped.
func (p *producer) request(ctx actor.Context, pe *peer, req proto.Message, done func(res interface{}, err error)) {
	if p.hook != nil {
		if err := p.hook.Send(pe.m.Name, req); err != nil {
			done(nil, err)
			return
		}
	}
	f := ctx.RequestFuture(pe.worker, req, p.cfg.CallTimeout)
	ctx.ReenterAfter(f, func(res interface{}, err error) {
		if p.dead || p.peers[pe.m.Name] != pe {
			return
		}
		done(res, err)
	})
}

// answered records that pe answered a call: its failures end.
func (p *producer) answered(pe *peer) {
	if pe.failures > 0 {
		p.log.Info().Str("peer", pe.m.Name).Int("failed_calls", pe.failures).Msg("node reachable again")
	}
	pe.failures, pe.lastErr, pe.lastAck, pe.callable = 0, "", time.Now(), true
	pe.failWarned = false
	pe.gauge.Failures.Store(0)
	p.reachability(pe, core.Pending)
}

// failed leaves pe's cursor where it is and retries after RetryInterval. It
// logs the first failure and then every 50th, never one line per attempt.
//
// A healthy start or a normal stop does not warn: while a run of failures
// is younger than StallAfter, a node that never answered this producer (it
// is still starting), whose pubsub is not running (a dead letter: it is
// starting or was stopped on purpose) or that retired its own producers
// here (stopped on purpose) is logged at Info, once. A run that
// lasts longer is a warning, the first time a failure sees it so.
func (p *producer) failed(ctx actor.Context, pe *peer, err error) {
	pe.failures++
	pe.lastFail = err.Error()
	pe.callable = false // the next call waits until the node accepts a connection (reach.go)
	p.reachability(pe, core.Unreachable)
	if pe.failures == 1 {
		pe.failingSince = time.Now()
	}
	failingFor := time.Since(pe.failingSince)
	quiet := failingFor < p.cfg.StallAfter() &&
		(pe.lastAck.IsZero() || errors.Is(err, actor.ErrDeadLetter) || p.departed(pe.m.Address))
	switch {
	case quiet && pe.failures == 1:
		p.log.Info().Str("peer", pe.m.Name).Err(err).
			Msg("node not answering yet (its pubsub is starting, or was stopped): will retry")
	case !quiet && (!pe.failWarned || pe.failures%50 == 0):
		pe.failWarned = true
		p.log.Warn().Str("peer", pe.m.Name).Err(err).Int("failures", pe.failures).
			Dur("failing_for_ms", failingFor.Round(time.Millisecond)).Msg("call to node failed: will retry")
	}
	pe.retrying = true
	pe.retryCancel = p.sched.SendOnce(p.cfg.RetryInterval, ctx.Self(), &retryPeer{node: pe.m.Name})
	p.m.Retries.Add(context.Background(), 1, pe.gauge.Attrs)
	pe.gauge.Failures.Store(int64(pe.failures))
	es := ctx.ActorSystem().EventStream
	es.Publish(&messages.SyncFailed{Pubsub: p.cfg.Name, Group: p.group, Node: pe.m.Name, Err: err.Error(), Failures: pe.failures})
	es.Publish(&messages.RetryScheduled{Pubsub: p.cfg.Name, Group: p.group, Node: pe.m.Name, After: p.cfg.RetryInterval})
	p.checkDrain(ctx) // a node that fails calls is not waited for
}

// expired counts and announces a CursorExpired told to pe (missed 0: not
// known; overwritten: the part of missed that was overwritten).
func (p *producer) expired(ctx actor.Context, pe *peer, missed, overwritten uint64) {
	pe.expired++
	p.m.ExpiredSent.Add(context.Background(), 1, pe.gauge.Attrs)
	ctx.ActorSystem().EventStream.Publish(&messages.Expired{Pubsub: p.cfg.Name, Group: p.group, Node: pe.m.Name, Missed: missed, Overwritten: overwritten})
}
