package consul

import (
	"context"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/scheduler"
	"github.com/hashicorp/consul/api"

	"github.com/echopubsub/echopubsub/internal/retry"
)

// heartbeat registers this node and refreshes its TTL check. It runs one
// call at a time from its mailbox, each bounded by RequestTimeout and
// aborted by Stop; its next tick is scheduled only after a call returns, so
// a slow Consul never piles up ticks.
type heartbeat struct {
	c          *Membership
	reg        *api.AgentServiceRegistration
	sched      *scheduler.TimerScheduler
	cancelTick scheduler.CancelFunc
	bo         retry.Backoff
	registered bool // Consul accepted the registration (and has not lost it since, as far as we know)
	ever       bool
}

type heartbeatTick struct{}

func (h *heartbeat) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		h.sched = scheduler.NewTimerScheduler(ctx)
		h.bo = retry.Backoff{Min: h.c.cfg.RetryMin, Max: h.c.cfg.RetryMax}
		h.tick(ctx)
	case *heartbeatTick:
		h.tick(ctx)
	case *actor.Stopping, *actor.Restarting:
		if h.cancelTick != nil {
			h.cancelTick()
		}
	}
}

func (h *heartbeat) tick(ctx actor.Context) {
	c := h.c
	if c.ctx.Err() != nil {
		return
	}
	rctx, cancel := context.WithTimeout(c.ctx, c.cfg.RequestTimeout)
	defer cancel()
	if !h.registered {
		err := c.client.Agent().ServiceRegisterOpts(h.reg, api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(rctx))
		if c.ctx.Err() != nil {
			return
		}
		if err != nil {
			c.avail.Fail("register", err, c.cfg.RetryMax)
			h.after(ctx, h.bo.Next())
			return
		}
		c.avail.OK("register")
		h.bo.Reset()
		h.registered = true
		if h.ever {
			c.env.Log.Info().Str("service_id", h.reg.ID).Msg("registered with consul again (it had lost this node)")
		} else {
			c.env.Log.Info().Str("service_id", h.reg.ID).Dur("ttl_ms", c.cfg.TTL).Msg("registered with consul")
		}
		h.ever = true
		h.after(ctx, c.cfg.RefreshInterval)
		return
	}
	err := c.client.Agent().UpdateTTLOpts(h.reg.Check.CheckID, "", api.HealthPassing, (&api.QueryOptions{}).WithContext(rctx))
	if c.ctx.Err() != nil {
		return
	}
	var status api.StatusError
	switch {
	case err == nil:
		c.avail.OK("register")
		h.bo.Reset()
		h.after(ctx, c.cfg.RefreshInterval)
	case errors.As(err, &status):
		// Consul answered but does not know the check (a dev agent that
		// restarted, an operator who deregistered us): register again now.
		c.avail.OK("register")
		h.registered = false
		h.after(ctx, 0)
	default:
		c.avail.Fail("register", err, c.cfg.RetryMax)
		h.after(ctx, h.bo.Next())
	}
}

func (h *heartbeat) after(ctx actor.Context, d time.Duration) {
	if d <= 0 {
		ctx.Send(ctx.Self(), &heartbeatTick{})
		return
	}
	h.cancelTick = h.sched.SendOnce(d, ctx.Self(), &heartbeatTick{})
}
