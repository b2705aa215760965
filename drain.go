package echopubsub

import (
	"context"
	"sort"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/actors/stream"
)

// drain is the first step of a graceful Stop: with writes closed, every
// producer delivers what it holds to every reachable node and retires its
// incarnation there, so the node's next start is not announced to their
// subscribers as a "producer restarted" CursorExpired. It waits within ctx;
// nodes that are away are not waited for (they are told when they return),
// and what is left unacknowledged is logged with counts (a warning when a
// node may lack messages).
//
// Each producer answers within its budget, nine tenths of the wait, whatever
// its peers do (a stopped peer's calls each time out after a whole
// CallTimeout), so that where every producer ended is recorded (ended) in
// every case: a node-local store's peers compare it with what they hold
// when this node's next incarnation joins, and mark a gap only for what
// they really lack.
func (ps *PubSub) drain(ctx context.Context) {
	start := time.Now()
	until := drainDeadline(ctx, 2*ps.rt.Cfg.CallTimeout)
	retired, away, owed := 0, map[string]uint64{}, false
	timeout := time.Until(until)
	if timeout <= 0 { // protoactor treats a negative timeout as none at all
		ps.rt.Log.Warn().Msg("graceful stop: no time left to drain")
		return
	}
	// Every group drains at once: one group waiting for a failing node does
	// not eat the others' time.
	futures := make([]*actor.Future, ps.rt.Cfg.PoolSize)
	for g := range futures {
		futures[g] = ps.rt.System.Root.RequestFuture(ps.rt.ProducerPID(uint32(g)), &stream.Drain{Budget: timeout * 9 / 10}, timeout)
	}
	for g, f := range futures {
		res, err := f.Result()
		d, ok := res.(*stream.Drained)
		if err != nil || !ok {
			ps.rt.Log.Warn().Err(err).Uint32("group", uint32(g)).Msg("graceful stop: drain did not finish: peers that had not acknowledged everything will be told CursorExpired")
			continue
		}
		retired += d.Retired
		owed = owed || d.Owed
		ps.dur.Ended(d.Group, d.Incarnation, d.WriteCursor, d.LastWrite)
		for node, lag := range d.Away {
			away[node] += lag
		}
	}
	// A warning only when a node may lack messages: one that is away
	// owing nothing (it was stopped first, on purpose) is listed at Info.
	ev := ps.rt.Log.Info()
	if owed {
		ev = ps.rt.Log.Warn()
	}
	if len(away) > 0 {
		ev = ev.Array("unacked", unackedList(away))
	}
	ev.Int("retired", retired).Int("away", len(away)).Dur("took_ms", time.Since(start)).Msg("graceful stop: drained")
}

// unackedList is what the nodes that were away had not acknowledged, as
// [{"node": address, "lag": messages}, ...] in address order: the node is a
// value, never part of a key, so a log query names one key for every node.
func unackedList(away map[string]uint64) *zerolog.Array {
	nodes := make([]string, 0, len(away))
	for node := range away {
		nodes = append(nodes, node)
	}
	sort.Strings(nodes)
	arr := zerolog.Arr()
	for _, node := range nodes {
		arr = arr.Dict(zerolog.Dict().Str("node", node).Uint64("lag", away[node]))
	}
	return arr
}

// drainDeadline bounds the drain by at most d, and by three quarters of
// what is left of ctx, keeping the rest for stopping the tree.
func drainDeadline(ctx context.Context, d time.Duration) time.Time {
	now := time.Now()
	until := now.Add(d)
	if dl, ok := ctx.Deadline(); ok {
		if q := now.Add(dl.Sub(now) * 3 / 4); q.Before(until) {
			until = q
		}
	}
	return until
}
