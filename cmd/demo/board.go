package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub/cmd/demo/scorepb"
	"github.com/echopubsub/echopubsub/messages"
)

// A node's board is derived only from EchoPubSub messages. Each message is
// absolute state (the whole score) versioned by its goal number, so the
// board applies a message only when its goal number is higher than what it
// shows. That makes at-least-once delivery harmless: a batch redelivered
// after a lost acknowledgement, or an older goal arriving from another
// producer, is recognised and ignored. A delta ("+1 home") would count such
// a duplicate twice.

// Board is the score a node shows.
type Board struct {
	Goal   uint64 `json:"goal"`
	Home   uint32 `json:"home"`
	Away   uint32 `json:"away"`
	Scorer string `json:"scorer,omitempty"`
}

func boardOf(s *scorepb.Score) Board {
	return Board{Goal: s.GetGoal(), Home: s.GetHome(), Away: s.GetAway(), Scorer: s.GetScorer()}
}

// Delivered is one line of a node's recent-deliveries list.
type Delivered struct {
	Goal     uint64 `json:"goal"`
	Home     uint32 `json:"home"`
	Away     uint32 `json:"away"`
	Via      uint32 `json:"via"`
	Cursor   uint64 `json:"cursor"`
	LateMs   int64  `json:"late_ms"`
	Kind     string `json:"kind"` // "live", "replayed", "duplicate" or "reload"
	AtUnixMs int64  `json:"at_unix_ms"`
}

// Expiry is the last CursorExpired a node received and what it did.
type Expiry struct {
	From       string `json:"from"`   // producer node address
	Missed     uint64 `json:"missed"` // messages it can no longer replay
	Reason     string `json:"reason"`
	AtUnixMs   int64  `json:"at_unix_ms"`
	Reloaded   bool   `json:"reloaded"`
	ReloadGoal uint64 `json:"reload_goal"`
	ReloadErr  string `json:"reload_error,omitempty"`
}

// replayLate: a message delivered this late was held by a peer and replayed.
const replayLate = time.Second

const recentMax = 8

// BoardState is one node's board and what happened to it. Written by the
// board actor, read by the node's HTTP handler; safe for concurrent use.
type BoardState struct {
	mu         sync.Mutex
	board      Board
	applied    uint64
	replayed   uint64
	duplicates uint64
	gaps       uint64 // cursor jumps with no CursorExpired: must stay 0
	expiries   uint64
	reloads    uint64
	reloading  bool
	last       *Expiry
	recent     []Delivered
	cursors    map[stream]uint64 // last cursor seen per producer stream
}

type stream struct {
	node        string
	group       uint32
	incarnation uint64
}

// BoardSnapshot is BoardState as JSON.
type BoardSnapshot struct {
	Board      Board       `json:"board"`
	Applied    uint64      `json:"applied"`
	Replayed   uint64      `json:"replayed"`
	Duplicates uint64      `json:"duplicates"`
	Gaps       uint64      `json:"gaps"`
	Expiries   uint64      `json:"expiries"`
	Reloads    uint64      `json:"reloads"`
	Reloading  bool        `json:"reloading"`
	Last       *Expiry     `json:"last_expiry,omitempty"`
	Recent     []Delivered `json:"recent"`
}

func newBoardState() *BoardState { return &BoardState{cursors: map[stream]uint64{}} }

// Snapshot copies the state.
func (b *BoardState) Snapshot() BoardSnapshot {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := BoardSnapshot{Board: b.board, Applied: b.applied, Replayed: b.replayed, Duplicates: b.duplicates,
		Gaps: b.gaps, Expiries: b.expiries, Reloads: b.reloads, Reloading: b.reloading,
		Recent: append([]Delivered(nil), b.recent...)}
	if b.last != nil {
		e := *b.last
		s.Last = &e
	}
	return s
}

func (b *BoardState) note(d Delivered) {
	b.recent = append([]Delivered{d}, b.recent...)
	if len(b.recent) > recentMax {
		b.recent = b.recent[:recentMax]
	}
}

// deliver applies one delivery and checks its producer stream for a gap.
func (b *BoardState) deliver(d *messages.Delivery, s *scorepb.Score, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !d.Local {
		k := stream{d.Node, d.Group, d.Incarnation}
		if last, ok := b.cursors[k]; ok && d.Cursor > last+1 {
			b.gaps++ // never expected: the guarantee says we would have been told
		}
		if last := b.cursors[k]; d.Cursor > last {
			b.cursors[k] = d.Cursor
		}
	}
	line := Delivered{Goal: s.GetGoal(), Home: s.GetHome(), Away: s.GetAway(), Via: s.GetViaNode(),
		Cursor: d.Cursor, LateMs: now.UnixMilli() - s.GetScoredAtUnixMs(), AtUnixMs: now.UnixMilli()}
	switch {
	case s.GetGoal() <= b.board.Goal:
		b.duplicates++
		line.Kind = "duplicate"
	case time.Duration(line.LateMs)*time.Millisecond >= replayLate:
		b.board = boardOf(s)
		b.applied++
		b.replayed++
		line.Kind = "replayed"
	default:
		b.board = boardOf(s)
		b.applied++
		line.Kind = "live"
	}
	b.note(line)
}

// expired records a CursorExpired: the board can no longer trust its
// stream from that producer and must reload.
func (b *BoardState) expired(m *messages.CursorExpired, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.cursors {
		if k.node == m.GetNode() {
			delete(b.cursors, k) // the stream restarts after the jump
		}
	}
	b.expiries++
	b.reloading = true
	b.last = &Expiry{From: m.GetNode(), Missed: m.GetMissed(), Reason: m.GetReason(), AtUnixMs: now.UnixMilli()}
}

// reloaded applies the source of truth fetched after an expiry.
func (b *BoardState) reloaded(s *scorepb.Score, err error, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reloading = false
	if err != nil {
		if b.last != nil {
			b.last.ReloadErr = err.Error()
		}
		return
	}
	b.reloads++
	if b.last != nil {
		b.last.Reloaded = true
		b.last.ReloadGoal = s.GetGoal()
		b.last.ReloadErr = ""
	}
	if s.GetGoal() > b.board.Goal {
		b.board = boardOf(s)
	}
	b.note(Delivered{Goal: s.GetGoal(), Home: s.GetHome(), Away: s.GetAway(), Kind: "reload", AtUnixMs: now.UnixMilli()})
}

// boardActor is the node's subscriber: it turns EchoPubSub deliveries into
// the board, and on CursorExpired reloads from the source of truth.
type boardActor struct {
	state  *BoardState
	fetch  func() (*scorepb.Score, error) // GET the source of truth; blocking
	system *actor.ActorSystem
	log    zerolog.Logger
}

type reloadDone struct {
	score *scorepb.Score
	err   error
	try   int
}

type reloadRetry struct{ try int }

func (a *boardActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *messages.Delivery:
		if s, ok := m.Message.(*scorepb.Score); ok {
			a.state.deliver(m, s, time.Now())
		} else {
			a.log.Warn().Str("type", fmt.Sprintf("%T", m.Message)).Msg("unexpected message on the match topic")
		}
	case *messages.CursorExpired:
		a.log.Warn().Str("from", m.GetNode()).Uint64("missed", m.GetMissed()).Msg("fell behind: reloading from the source of truth")
		a.state.expired(m, time.Now())
		a.reload(ctx, 1)
	case *reloadRetry:
		a.reload(ctx, m.try)
	case *reloadDone:
		if m.err != nil && m.try < 10 {
			a.log.Warn().Err(m.err).Int("try", m.try).Msg("reload failed, retrying")
			self, next := ctx.Self(), m.try+1
			time.AfterFunc(500*time.Millisecond, func() { a.system.Root.Send(self, &reloadRetry{try: next}) })
			return
		}
		a.state.reloaded(m.score, m.err, time.Now())
	}
}

// reload fetches the truth off the actor's goroutine and sends the result
// back to the actor, so deliveries keep flowing meanwhile.
func (a *boardActor) reload(ctx actor.Context, try int) {
	self := ctx.Self()
	go func() {
		s, err := a.fetch()
		a.system.Root.Send(self, &reloadDone{score: s, err: err, try: try})
	}()
}
