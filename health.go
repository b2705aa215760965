package echopubsub

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"time"
)

// Health is a pubsub's readiness and its view of every peer node.
type Health struct {
	// Ready: the pubsub runs and every member it lists is registered (this
	// node's producers reach it) or explicitly absent (left the membership).
	Ready bool   `json:"ready"`
	Node  string `json:"node"`
	// Reason says why it is not ready.
	Reason string       `json:"reason,omitempty"`
	Peers  []PeerHealth `json:"peers"`
}

// PeerHealth is one peer node, the worst over this node's pool groups.
type PeerHealth struct {
	Node       string `json:"node"`
	Registered bool   `json:"registered"`
	Absent     bool   `json:"absent"`
	// Lag is the messages the peer has not acknowledged; LastAckAge how
	// long ago it last answered (-1: never); Expirations the CursorExpired
	// it was told; Failures its consecutive failed calls.
	Lag         uint64        `json:"lag"`
	LastAckAge  time.Duration `json:"last_ack_age_ns"`
	Expirations int           `json:"expirations"`
	Failures    int           `json:"failures"`
}

// Health reports readiness (see Health.Ready) from every producer's view.
func (ps *PubSub) Health(ctx context.Context) Health {
	h := Health{Node: ps.rt.Node}
	groups, err := ps.Stats(ctx)
	if err != nil {
		h.Reason = err.Error()
		return h
	}
	peers := map[string]*PeerHealth{}
	never := map[string]bool{} // some group never heard from the node
	now := time.Now()
	for _, g := range groups {
		for _, ns := range g.Nodes {
			if ns.Node == ps.rt.Node {
				continue
			}
			p := peers[ns.Node]
			if p == nil {
				p = &PeerHealth{Node: ns.Node, Registered: true, Absent: true}
				peers[ns.Node] = p
			}
			p.Registered = p.Registered && ns.Registered
			p.Absent = p.Absent && ns.Absent
			p.Lag = max(p.Lag, ns.Lag)
			p.Expirations += ns.Expirations
			p.Failures = max(p.Failures, ns.Failures)
			if ns.LastAck.IsZero() {
				never[ns.Node] = true
			} else if age := now.Sub(ns.LastAck); age > p.LastAckAge {
				p.LastAckAge = age
			}
		}
	}
	h.Ready = true
	for _, p := range peers {
		if never[p.Node] {
			p.LastAckAge = -1
		}
		h.Peers = append(h.Peers, *p)
		if !p.Registered && !p.Absent {
			h.Ready = false
			h.Reason = "not registered with " + p.Node
		}
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
