package gateway

import (
	"errors"

	"github.com/echopubsub/echopubsub/presence"
)

// Presence through the gateway (Config.Presence; docs/gateway.md): a
// socket tracks itself (key: its identity, process: its owner actor) and
// follows topics' presence as one presence_state frame, then
// presence_diff frames.

// presenceState asks the owner actor to send a topic's presence_state:
// the owner, which also receives the topic's Diffs, sends the whole list
// first and only then the Diffs (it drops those that came before: the
// tracker writes its view before it sends a Diff, so the list already
// holds them).
type presenceState struct {
	topic, id string
}

// metaJSON is one presence on the wire.
type metaJSON struct {
	Node string            `json:"node"`
	Ref  string            `json:"ref"`
	Meta map[string]string `json:"meta"`
}

// presenceStateFrame is a topic's whole list: key -> its presences (one
// per socket or process that tracks it, each with its own ref).
type presenceStateFrame struct {
	Type      string                `json:"type"` // "presence_state"
	Topic     string                `json:"topic"`
	Presences map[string][]metaJSON `json:"presences"`
}

// presenceDiffFrame is a change to a topic's list.
type presenceDiffFrame struct {
	Type   string                `json:"type"` // "presence_diff"
	Topic  string                `json:"topic"`
	Joins  map[string][]metaJSON `json:"joins"`
	Leaves map[string][]metaJSON `json:"leaves"`
}

func metasJSON(m map[string][]presence.Meta) map[string][]metaJSON {
	out := make(map[string][]metaJSON, len(m))
	for key, metas := range m {
		l := make([]metaJSON, 0, len(metas))
		for _, pm := range metas {
			meta := pm.Meta
			if meta == nil {
				meta = map[string]string{}
			}
			l = append(l, metaJSON{Node: pm.Node, Ref: pm.Ref, Meta: meta})
		}
		out[key] = l
	}
	return out
}

// presence runs track, untrack and presence on the handler goroutine.
func (s *socket) presence(f *clientFrame) *frameError {
	t := s.gw.cfg.Presence
	if t == nil {
		return ferr(CodePresenceDisabled, "this gateway has no presence (Config.Presence is nil)")
	}
	if f.Key != "" && f.Key != s.identity {
		return ferr(CodeForbiddenKey, "a socket tracks under its own identity %q only, got key %q", clip(s.identity), clip(f.Key))
	}
	if err := s.authorize(f.Op, f.Topic); err != nil {
		return err
	}
	if !s.tracked[f.Topic] && !s.watching[f.Topic] && len(s.tracked)+len(s.watching) >= s.gw.cfg.MaxSubscriptions {
		return ferr(CodeTooManySubs, "a socket tracks and follows at most %d presence topics", s.gw.cfg.MaxSubscriptions)
	}
	switch f.Op {
	case opTrack:
		if err := t.Track(s.owner, f.Topic, s.identity, f.meta); err != nil {
			return presenceErr(err)
		}
		s.tracked[f.Topic] = true
	case opUntrack:
		if err := t.Untrack(s.owner, f.Topic, s.identity); err != nil {
			return presenceErr(err)
		}
		delete(s.tracked, f.Topic)
	case opPresence:
		if err := t.Subscribe(s.owner, f.Topic); err != nil {
			return presenceErr(err)
		}
		s.watching[f.Topic] = true
		// The result, then the state, both through the owner: in order
		// before any Diff.
		s.gw.ps.ActorSystem().Root.Send(s.owner, &presenceState{topic: f.Topic, id: f.ID})
		return nil
	}
	return s.result(f, nil)
}

// untrackAll ends what the socket tracked (it closes). The owner actor's
// stop would end them too (the tracker watches it); this is at once. A
// stopped tracker has nothing left to untrack: its Stop already told the
// other nodes that this node's presences are gone.
func (s *socket) untrackAll() {
	t := s.gw.cfg.Presence
	if t == nil {
		return
	}
	for topic := range s.tracked {
		if err := t.Untrack(s.owner, topic, s.identity); err != nil && !errors.Is(err, presence.ErrNotTracked) && !errors.Is(err, presence.ErrStopped) {
			s.gw.log.Warn().Err(err).Str("session", s.sid).Str("topic", topic).Msg("gateway: untrack on close failed: the tracker drops it when the socket's actor stops")
		}
	}
}

// presenceState (owner actor) sends the result of a presence command and
// the topic's whole list.
func (s *socket) presenceState(m *presenceState) {
	s.send(outFrame{raw: mustJSON(resultFrame{Type: "result", ID: m.id, Op: opPresence, Result: struct{}{}})})
	s.send(outFrame{raw: mustJSON(presenceStateFrame{Type: "presence_state", Topic: m.topic,
		Presences: metasJSON(s.gw.cfg.Presence.List(m.topic))})})
	s.shown[m.topic] = true
}

// presenceDiff (owner actor) forwards a Diff once the topic's state was
// sent; one before it is in that state already.
func (s *socket) presenceDiff(d *presence.Diff) {
	if !s.shown[d.Topic] {
		return
	}
	s.send(outFrame{raw: mustJSON(presenceDiffFrame{Type: "presence_diff", Topic: d.Topic,
		Joins: metasJSON(d.Joins), Leaves: metasJSON(d.Leaves)})})
}

// presenceErr maps a tracker error to an error frame.
func presenceErr(err error) *frameError {
	code := CodeInvalidArgument
	switch {
	case errors.Is(err, presence.ErrAlreadyTracked):
		code = CodeAlreadyTracked
	case errors.Is(err, presence.ErrNotTracked):
		code = CodeNotTracked
	case errors.Is(err, presence.ErrStopped):
		code = CodeUnavailable
	}
	return ferr(code, "%s", clip(err.Error()))
}
