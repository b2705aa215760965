package supervision

import (
	"fmt"
	"strings"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/echopubsub/echopubsub/actors/delivery"
	"github.com/echopubsub/echopubsub/actors/stream"
	"github.com/echopubsub/echopubsub/cluster"
	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/messages"
)

// Tree returns the props of the pubsub's root supervisor: the tree drawn in
// the package doc, with d as the local delivery the workers and producers
// hand messages to. Spawn it under the name core.RootName(cfg.Name)
// (echopubsub.Start does).
func Tree(rt *core.Runtime, d *delivery.Dispatcher) *actor.Props {
	members := map[string]cluster.Member{} // survives a restart of the root, as the membership does not resend
	listed := new(bool)                    // likewise: cluster.Listed came
	warm := new(*delivery.WarmDispatcher)  // the producers' and workers' dispatcher, made at the first start
	return actor.PropsFromProducer(func() actor.Actor {
		return &root{rt: rt, d: d, members: members, listed: listed, warm: warm}
	}, actor.WithSupervisor(OneForOne()), IgnorePoisonPill())
}

type root struct {
	rt       *core.Runtime
	d        *delivery.Dispatcher
	members  map[string]cluster.Member
	listed   *bool
	warm     **delivery.WarmDispatcher
	stopping bool
}

func (r *root) publishMembers() {
	addrs := make([]string, 0, len(r.members))
	for _, m := range r.members {
		addrs = append(addrs, m.Address)
	}
	r.rt.SetMembers(addrs)
}

func (r *root) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		rt := r.rt
		if *r.warm == nil { // ends with the pubsub (Done): Stop closes it first
			*r.warm = delivery.NewWarmDispatcher(2*rt.Cfg.PoolSize+2, rt.Done())
		}
		if _, err := ctx.SpawnNamed(actor.PropsFromProducer(delivery.NewRegistry(r.d, rt.Cfg.MaxQueueLen), IgnorePoisonPill()), "registry"); err != nil {
			rt.Log.Error().Err(err).Msg("spawn registry")
		}
		for g := 0; g < rt.Cfg.PoolSize; g++ {
			group := uint32(g)
			props := Props(
				Child{Name: "producer", Props: actor.PropsFromProducer(stream.NewProducer(rt, group, ctx.Self(), r.d), IgnorePoisonPill(),
					actor.WithDispatcher(*r.warm))},
				Child{Name: "worker", Props: actor.PropsFromProducer(stream.NewWorker(rt, group, r.d), IgnorePoisonPill(),
					actor.WithDispatcher(*r.warm))},
			)
			if _, err := ctx.SpawnNamed(props, fmt.Sprintf("g%d", g)); err != nil {
				rt.Log.Error().Err(err).Msg("spawn pool group")
			}
		}
	case *actor.Stopping, *actor.Restarting:
		r.stopping = true
	case *actor.Stopped:
		// Stop closed done first; anything else that stops the root (its
		// parent giving up on restarts, a local Stop) leaves a pubsub that
		// can no longer deliver: say so from now on.
		if r.rt.Fail(fmt.Errorf("%w: the pubsub's root actor %s stopped", core.ErrStopped, ctx.Self().Id)) {
			r.rt.Log.Error().Msg("pubsub root stopped without Stop: this pubsub no longer delivers")
		}
	case *actor.Terminated:
		if !r.stopping && strings.HasPrefix(m.Who.Id, ctx.Self().Id+"/") {
			r.rt.Log.Error().Str("child", m.Who.Id).Msg("pubsub child stopped for good (restart intensity exceeded): this pubsub no longer delivers")
			r.rt.Fail(fmt.Errorf("%w: %s stopped for good (restart intensity exceeded)", core.ErrStopped, m.Who.Id))
		}
	case *cluster.Event:
		switch m.Kind {
		case cluster.Joined, cluster.Updated:
			r.members[m.Member.Name] = m.Member
		case cluster.Left:
			delete(r.members, m.Member.Name)
		case cluster.Listed:
			*r.listed = true
		}
		r.publishMembers()
		for g := 0; g < r.rt.Cfg.PoolSize; g++ {
			ctx.Send(r.rt.ProducerPID(uint32(g)), m)
		}
	case *core.MembersQuery:
		snap := &core.MemberSnapshot{Listed: *r.listed}
		for _, mem := range r.members {
			snap.Members = append(snap.Members, mem)
		}
		ctx.Respond(snap)
	case *messages.Broadcast:
		err := r.broadcast(ctx, m)
		if ctx.Sender() != nil {
			res := &messages.BroadcastResult{}
			if err != nil {
				res.Error = err.Error()
			}
			ctx.Respond(res)
		} else if err != nil {
			r.rt.Log.Error().Err(err).Str("topic", m.Topic).Msg("broadcast from actor failed")
		}
	}
}

// broadcast routes a Broadcast message sent by an actor exactly as
// ps.Broadcast would with the sender's PID. The payload bytes in the Any are
// buffered as they are: nothing is re-encoded.
func (r *root) broadcast(ctx actor.Context, m *messages.Broadcast) error {
	if m.Message == nil {
		return fmt.Errorf("echopubsub: broadcast message is nil")
	}
	typeName := string(m.Message.MessageName())
	if typeName == "" || !strings.Contains(m.Message.TypeUrl, "/") {
		return fmt.Errorf("echopubsub: broadcast message has an invalid type URL %q", m.Message.TypeUrl)
	}
	if core.ReservedTopic(m.Topic) { // only the request/reply path writes there (echopubsub.SessionInboxPrefix)
		return fmt.Errorf("echopubsub: topic %q is reserved for session requests and replies", m.Topic)
	}
	from := ctx.Sender()
	w := &core.Write{Topic: m.Topic, PayloadType: typeName, Payload: m.Message.Value, OnlyNode: m.OnlyNode}
	if m.ExcludeSender && from != nil {
		w.Exclude = delivery.Key(from)
	}
	if err := r.rt.CheckWrite(w); err != nil { // the input rule, as ps.Broadcast's
		return err
	}
	if m.Local {
		r.d.DeliverLocal(w)
		return nil
	}
	return r.rt.Enqueue(core.Wait{}, from, w)
}
