package gateway

import (
	"context"
	"errors"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
)

// replay runs the replay command: one ReplaySession page of stream for the
// socket's own session. The rows arrive as envelopes (replayed, with their
// cursor) before the result frame, which carries the page's stats.
func (s *socket) replay(f *clientFrame) *frameError {
	if err := s.authorize(opReplay, f.Stream); err != nil {
		return err
	}
	limit := s.gw.cfg.DefaultReplayLimit
	if f.Limit != nil {
		limit = *f.Limit
	}
	if limit > s.gw.cfg.MaxReplayLimit {
		return ferr(CodeInvalidArgument, "limit must be <= %d, got %d", s.gw.cfg.MaxReplayLimit, limit)
	}
	var from uint64
	if f.from != nil {
		from = *f.from
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.gw.ps.Config().CallTimeout)
	defer cancel()
	st, err := s.gw.ps.ReplaySession(ctx, s.sid, f.Stream, echopubsub.ReplayOptions{Limit: limit, From: from})
	if err != nil {
		if errors.Is(err, echopubsub.ErrNoStore) {
			return ferr(CodeReplayUnavailable, "replay needs a store holding %q: %s", clip(f.Stream), clip(err.Error()))
		}
		return libErr(err)
	}
	// Through the owner's mailbox, after the rows ReplaySession sent there
	// from this goroutine: the result frame follows the page's envelopes.
	res := replayResult{ResumeCursor: st.ResumeCursor, NextCursor: st.NextCursor, Delivered: st.Delivered,
		Dropped: st.Dropped, Stopped: st.Stopped, Gaps: st.Gaps, Missed: st.Missed}
	s.gw.ps.ActorSystem().Root.Send(s.owner, &ownerFrame{raw: mustJSON(resultFrame{Type: "result", ID: f.ID, Op: f.Op, Result: res})})
	return nil
}

// ownerFrame is a frame queued through the owner actor, behind what the
// session already sent it.
type ownerFrame struct{ raw []byte }

// replayResult is the replay command's result.
type replayResult struct {
	ResumeCursor uint64 `json:"resume_cursor"`
	NextCursor   uint64 `json:"next_cursor"`
	Delivered    int    `json:"delivered"`
	Dropped      int    `json:"dropped"`
	Stopped      bool   `json:"stopped"`
	Gaps         int    `json:"gaps"`
	Missed       uint64 `json:"missed"`
}

// publish broadcasts a client's message (appended to its stream first when
// the topic is durable: WithDurableTopics). traced, when not nil, carries
// the client's trace context, which the broadcast continues when the
// pubsub traces (WithTracerProvider).
func (s *socket) publish(topic string, msg proto.Message, traced context.Context) error {
	if traced == nil {
		return s.gw.ps.Broadcast(nil, topic, msg)
	}
	// Bounded as Broadcast's wait for room is (CallTimeout).
	ctx, cancel := context.WithTimeout(traced, s.gw.ps.Config().CallTimeout)
	defer cancel()
	return s.gw.ps.BroadcastContext(ctx, nil, topic, msg)
}
