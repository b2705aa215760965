package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// View is everything the page shows, pushed over the WebSocket.
type View struct {
	NowUnixMs   int64      `json:"now_unix_ms"`
	Truth       Board      `json:"truth"`
	Converged   bool       `json:"converged"`
	Behind      []int      `json:"behind"`
	Publisher   int        `json:"publisher"`
	BufferSize  int        `json:"buffer_size"`
	BatchMs     int64      `json:"batch_ms"`
	GoalEveryMs int64      `json:"goal_every_ms"`
	BurstSize   int        `json:"burst_size"`
	Nodes       []NodeView `json:"nodes"`
	Events      []Event    `json:"events"`
}

// NodeView is one node's column.
type NodeView struct {
	Index       int           `json:"index"`
	Addr        string        `json:"addr"`
	PID         int           `json:"pid"`
	Responding  bool          `json:"responding"`
	Link        string        `json:"link"` // online, offline, blip, outage
	LinkSinceMs int64         `json:"link_since_ms"`
	RestoreInMs int64         `json:"restore_in_ms,omitempty"`
	Board       BoardSnapshot `json:"board"`
	Held        uint64        `json:"held"`    // messages its peers hold for it
	HeldBy      []HeldBy      `json:"held_by"` // per peer
	Expired     bool          `json:"expired"` // a peer overwrote messages it needs
	InSync      bool          `json:"in_sync"`
	Status      string        `json:"status"`
	StatusKind  string        `json:"status_kind"` // ok, offline, catching, expired, reloading, behind, down
}

// HeldBy is what one peer holds for a node.
type HeldBy struct {
	Peer     int    `json:"peer"`
	Lag      uint64 `json:"lag"`
	Expired  bool   `json:"expired"`
	Failures int    `json:"failures"`
}

// divergedAfter: a node that has not shown the true score for this long
// is diverged (a goal just scored is still in flight before that).
const divergedAfter = 1500 * time.Millisecond

// pollLoop asks every node for its state a few times a second and pushes
// the resulting view to the page.
func (d *Demo) pollLoop(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		reports := d.pollNodes(ctx)
		if ctx.Err() != nil {
			return
		}
		if allRegistered(reports) {
			d.readyOnce.Do(func() { close(d.ready) })
		}
		v := d.buildView(reports, time.Now())
		if b, err := json.Marshal(v); err == nil {
			d.hub.publish(b)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Demo) pollNodes(ctx context.Context) []*NodeReport {
	out := make([]*NodeReport, len(d.children))
	var wg sync.WaitGroup
	for i, c := range d.children {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.control+"/state", nil)
			if err != nil {
				return
			}
			resp, err := d.client.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			var r NodeReport
			if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&r) == nil {
				out[i] = &r
			}
		}()
	}
	wg.Wait()
	return out
}

func (d *Demo) buildView(reports []*NodeReport, now time.Time) View {
	truth := boardOf(d.authority.Truth())
	d.mu.Lock()
	defer d.mu.Unlock()
	v := View{NowUnixMs: now.UnixMilli(), Truth: truth, Publisher: d.publisher, BufferSize: d.cfg.BufferSize,
		BatchMs: d.cfg.BatchInterval.Milliseconds(), GoalEveryMs: d.cfg.GoalEvery.Milliseconds(),
		BurstSize: d.cfg.burstSize(), Converged: true}

	// What each node's peers hold for it, from the peers' producer stats.
	held := map[int][]HeldBy{}
	for _, r := range reports {
		if r == nil {
			continue
		}
		for _, h := range r.Held {
			if target, ok := d.byAddr[h.Node]; ok {
				held[target] = append(held[target], HeldBy{Peer: r.Index, Lag: h.Lag, Expired: h.Expired, Failures: h.Failures})
			}
		}
	}

	for i, c := range d.children {
		n := NodeView{Index: c.index, Addr: c.spec.Advertise, Link: "online"}
		if l := d.links[c.index]; l != nil {
			n.Link, n.LinkSinceMs = l.mode, l.changedAt.UnixMilli()
			if l.mode == "outage" {
				n.RestoreInMs = max(0, l.restoreAt.Sub(now).Milliseconds())
			}
		}
		if r := reports[i]; r != nil {
			n.Responding, n.PID, n.Board = true, r.PID, r.Board
		}
		n.HeldBy = held[c.index]
		for _, h := range n.HeldBy {
			n.Held += h.Lag
			n.Expired = n.Expired || h.Expired
		}
		if n.Board.Board.Goal >= truth.Goal {
			d.inSyncAt[c.index] = now
		}
		n.InSync = n.Responding && now.Sub(d.inSyncAt[c.index]) < divergedAfter
		if !n.InSync {
			v.Converged = false
			v.Behind = append(v.Behind, c.index)
		}
		n.Status, n.StatusKind = status(n, truth, now, d.cfg)
		d.noticeChanges(n, truth)
		v.Nodes = append(v.Nodes, n)
	}
	v.Events = make([]Event, len(d.events))
	for i, e := range d.events { // newest first
		v.Events[len(d.events)-1-i] = e
	}
	return v
}

// status is the one-line state of a node's column.
func status(n NodeView, truth Board, now time.Time, cfg Config) (string, string) {
	since := now.Sub(time.UnixMilli(n.LinkSinceMs))
	switch {
	case !n.Responding:
		return "Not responding to the demo", "down"
	case n.Link != "online" && n.Expired:
		return fmt.Sprintf("Offline, and it missed more than the %d messages a peer keeps: it will be told it fell behind", cfg.BufferSize), "expired"
	case n.Link != "online":
		return "Offline: cut off from the cluster, its board is frozen", "offline"
	case n.Board.Reloading:
		return "Told it fell behind (CursorExpired): reloading from the source of truth", "reloading"
	case n.Expired:
		return "Back online, but a peer overwrote messages it needed: it is about to get CursorExpired", "expired"
	case n.Held > 0 && n.Board.Board.Goal < truth.Goal && since < 15*time.Second:
		return fmt.Sprintf("Back online: peers reconnect, then replay the %d held messages in order", n.Held), "catching"
	case n.Held > 0 && !n.InSync:
		return fmt.Sprintf("Catching up: %d messages held for it", n.Held), "catching"
	case !n.InSync:
		return "Behind the true score", "behind"
	}
	return "In sync with the true score", "ok"
}

// noticeChanges turns what changed on a node since the last poll into
// timeline events. Called with d.mu held.
func (d *Demo) noticeChanges(n NodeView, truth Board) {
	if !n.Responding {
		return
	}
	prev, seen := d.prev[n.Index]
	d.prev[n.Index] = n.Board
	if !seen {
		return
	}
	add := func(kind, text string) {
		d.events = append(d.events, Event{AtUnixMs: time.Now().UnixMilli(), Kind: kind, Node: n.Index, Text: text})
		if len(d.events) > maxEvents {
			d.events = d.events[len(d.events)-maxEvents:]
		}
	}
	b := n.Board
	if b.Expiries > prev.Expiries && b.Last != nil {
		from := b.Last.From
		if p, ok := d.byAddr[from]; ok {
			from = fmt.Sprintf("node %d", p)
		}
		lost := "messages"
		if b.Last.Missed != 0 { // 0: not known
			lost = plural(b.Last.Missed, "message", "messages")
		}
		add("expired", fmt.Sprintf("Node %d got CursorExpired from %s: it will never get %s (overwritten, or skipped past with them)", n.Index, from, lost))
	}
	if b.Reloads > prev.Reloads && b.Last != nil {
		add("reload", fmt.Sprintf("Node %d reloaded the score from the source of truth (goal #%d)", n.Index, b.Last.ReloadGoal))
	}
	if b.Replayed > prev.Replayed {
		add("replay", fmt.Sprintf("Node %d: %s replayed in order, now at goal #%d", n.Index, plural(b.Replayed-prev.Replayed, "held goal", "held goals"), b.Board.Goal))
	}
	if b.Gaps > prev.Gaps {
		add("gap", fmt.Sprintf("Node %d: SILENT GAP detected (%d) - this must never happen", n.Index, b.Gaps))
	}
}

// allRegistered reports whether every node answered and registered with
// every other node.
func allRegistered(reports []*NodeReport) bool {
	for _, r := range reports {
		if r == nil || len(r.Held) != len(reports)-1 {
			return false
		}
		for _, h := range r.Held {
			if !h.Registered {
				return false
			}
		}
	}
	return true
}

func plural(n uint64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
