package echopubsub

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"
)

// Health is a pubsub's readiness and its view of every peer node.
type Health struct {
	// Ready: start-up is done. The membership sent its first complete
	// member list (cluster.Listed) and this node tried every member listed
	// then once (it answered a call, or a call failed). From then on Ready
	// stays true while the pubsub runs, whatever its peers do: a peer that
	// is down, or joins later, is reported in Peers, never by readiness, so
	// one node down does not make every node unready. Use it for a
	// readiness probe (HealthHandler).
	Ready bool `json:"ready"`
	// Live: the pubsub runs (Err is nil). Use it for a liveness probe
	// (LivenessHandler): false means it no longer delivers, for good.
	Live bool   `json:"live"`
	Node string `json:"node"`
	// Reason says why it is not ready.
	Reason string       `json:"reason,omitempty"`
	Peers  []PeerHealth `json:"peers"`
	// Store, when set, says that this node's node-local durable store
	// fails to write, since when and why. The node stays ready: live
	// delivery goes on, and the durable rows it could not store become
	// gap rows once the store recovers (docs/operations.md, "Durable
	// streams", "A failing store"). The gauge echopubsub.store.failing
	// says the same.
	Store *StoreHealth `json:"store,omitempty"`
}

// PeerHealth is one peer node, the worst over this node's pool groups.
type PeerHealth struct {
	Node       string `json:"node"`
	Registered bool   `json:"registered"`
	Absent     bool   `json:"absent"`
	// Lag is the messages the peer is owed and has not acknowledged;
	// LagUnknown says the peer never answered, so what it is owed depends
	// on when it started: Lag is then the most it can be owed. LastAckAge
	// is how long ago it last answered (-1: never); Expirations the
	// CursorExpired it was told; Failures its consecutive failed calls.
	Lag         uint64        `json:"lag"`
	LagUnknown  bool          `json:"lag_unknown"`
	LastAckAge  time.Duration `json:"last_ack_age_ns"`
	Expirations int           `json:"expirations"`
	Failures    int           `json:"failures"`
	// Stalled: the stream to the peer (of some pool group) makes no
	// progress while the peer is owed messages (messages.NodeStats.Stalled);
	// StallReason says why. A stalled peer does not make this node unready.
	Stalled     bool   `json:"stalled"`
	StallReason string `json:"stall_reason,omitempty"`
}

// Health reports readiness (see Health.Ready) from every producer's view.
func (ps *PubSub) Health(ctx context.Context) Health {
	h := Health{Node: ps.rt.Node, Live: ps.rt.Err() == nil, Store: storeHealth(ps.dur)}
	groups, err := ps.Stats(ctx)
	if err != nil {
		h.Reason = err.Error()
		return h
	}
	peers := map[string]*PeerHealth{}
	never := map[string]bool{} // some group never heard from the node
	now := time.Now()
	startedUp, reason := true, ""
	for _, g := range groups {
		if !g.Listed {
			startedUp, reason = false, "the membership has not listed the members yet"
		}
		for _, ns := range g.Nodes {
			if ns.Node == ps.rt.Node {
				continue
			}
			if !ns.Registered && !ns.Absent && ns.Failures == 0 && ns.LastAck.IsZero() && reason == "" {
				startedUp, reason = false, "not tried yet: "+ns.Node
			}
			p := peers[ns.Node]
			if p == nil {
				p = &PeerHealth{Node: ns.Node, Registered: true, Absent: true}
				peers[ns.Node] = p
			}
			p.Registered = p.Registered && ns.Registered
			p.Absent = p.Absent && ns.Absent
			p.Lag = max(p.Lag, ns.Lag)
			p.LagUnknown = p.LagUnknown || ns.LagUnknown
			p.Expirations += ns.Expirations
			p.Failures = max(p.Failures, ns.Failures)
			if ns.Stalled && !p.Stalled {
				p.Stalled, p.StallReason = true, fmt.Sprintf("group %d: %s", g.Group, ns.StallReason)
			}
			if ns.LastAck.IsZero() {
				never[ns.Node] = true
			} else if age := now.Sub(ns.LastAck); age > p.LastAckAge {
				p.LastAckAge = age
			}
		}
	}
	if startedUp {
		ps.startedUp.Store(true) // once done, start-up stays done: no flapping
	}
	h.Ready = ps.startedUp.Load()
	if !h.Ready {
		h.Reason = reason
	}
	for _, p := range peers {
		if never[p.Node] {
			p.LastAckAge = -1
		}
		h.Peers = append(h.Peers, *p)
	}
	sort.Slice(h.Peers, func(i, j int) bool { return h.Peers[i].Node < h.Peers[j].Node })
	return h
}

// HealthHandler serves ps.Health as JSON for readiness probes: 200 when
// ready, 503 otherwise.
func HealthHandler(ps *PubSub) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), ps.rt.Cfg.CallTimeout)
		defer cancel()
		h := ps.Health(ctx)
		w.Header().Set("Content-Type", "application/json")
		if !h.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(h)
	})
}

// LivenessHandler serves liveness probes: 200 while the pubsub runs, 503
// with the reason once it stopped delivering for good (Err), as JSON
// {"live": ..., "reason": ...}. It asks no actor, so a busy node still
// answers it.
func LivenessHandler(ps *PubSub) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := struct {
			Live   bool   `json:"live"`
			Reason string `json:"reason,omitempty"`
		}{Live: true}
		if err := ps.Err(); err != nil {
			res.Live, res.Reason = false, err.Error()
		}
		w.Header().Set("Content-Type", "application/json")
		if !res.Live {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(res)
	})
}
