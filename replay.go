package echopubsub

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/internal/session"
	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/store"
)

// ReplayOptions bound one ReplaySession page.
type ReplayOptions struct {
	// Limit is the most rows read (> 0; no default: ErrBadLimit).
	Limit int
	// From is the cursor of the first row wanted: a previous call's
	// ResumeCursor, an envelope's Cursor + 1, or 0 (or 1) for the stream's
	// start.
	From uint64
}

// ReplayStats says what one ReplaySession page did.
type ReplayStats struct {
	// ResumeCursor is where the next call must start so that nothing is
	// skipped: past every row delivered (and every gap notified), at the
	// first row that was not.
	ResumeCursor uint64
	// NextCursor is the cursor after the last row read: ResumeCursor ==
	// NextCursor when the whole page was delivered.
	NextCursor uint64
	// Delivered is the number of rows delivered (each a durable delivery
	// with a reservation, its envelope marked Replayed).
	Delivered int
	// Dropped is the number of message rows read but not delivered (from
	// the row refused for pressure to the end of the page): they are at
	// and after ResumeCursor, and the next call offers them again.
	Dropped int
	// Stopped: a row was refused for pressure (the session's pending count
	// at SoftQueue, or the node's reservation table full); the page
	// stopped there.
	Stopped bool
	// Gaps is the number of gap rows passed (each handed to the session
	// as a *StreamGap before the rows after it); Missed sums their known
	// missing-message counts.
	Gaps   int
	Missed uint64
	// Truncated: the page began below what the store keeps (rows removed
	// under WithRetention): the session was handed a *StreamTruncated
	// before any row, and the page went on from FirstKept, the store's
	// first cursor still kept (its end + 1 when it keeps no row).
	Truncated bool
	FirstKept uint64
}

// StreamGap tells a session, during ReplaySession or a WithFrom catch-up,
// that this node's store
// does not hold some messages of the stream at this point: between the row
// before Cursor and the row after it, messages of producer Node were lost
// (Missed of them, 0 when unknown). As for CursorExpired, reload what they
// carried from a source of truth. Only a node-local store (store/bolt)
// has gaps; see the package doc, "Durable streams".
type StreamGap struct {
	SessionID string
	Stream    string
	Cursor    uint64
	Node      string
	Missed    uint64
	Reason    string
	// ProducerIncarnation, From and To: the messages the gap row stands
	// for, the cursors [From, To) of that incarnation of Node's producer
	// (the Delivery metadata's Incarnation and Cursor), as the
	// *messages.CursorExpired the node's subscribers were told (see
	// there). All 0 when not known: a gap row written by an earlier
	// build, one for rows this node's failing store could not take, or
	// one whose notice had no known range (RangeKnown false).
	ProducerIncarnation, From, To uint64
}

// gapNotice is the *StreamGap for gap row r of stream, for session id,
// with the row's range when it carries one (a messages.GapRange payload).
func gapNotice(id, stream string, r *Record) *StreamGap {
	g := &StreamGap{SessionID: id, Stream: stream, Cursor: r.Cursor, Node: r.Origin, Missed: r.Missed, Reason: r.Reason}
	var gr messages.GapRange
	if r.PayloadType == messages.GapRangeType && proto.Unmarshal(r.Payload, &gr) == nil && gr.To != 0 && gr.ProducerIncarnation != 0 {
		g.ProducerIncarnation, g.From, g.To = gr.ProducerIncarnation, gr.From, gr.To
	}
	return g
}

// ReplaySession reads one page of stream (at most opts.Limit rows from
// opts.From) from the pubsub's store and redelivers it to session id, a
// session of this node, through authorization (WithAuthorizer, asked once
// per call, before anything is read: it decides per session and stream)
// and the session's pressure rules: each row is a durable delivery (a
// reservation, an *Envelope with Replayed and Cursor set, the subscription's
// context when the session subscribed to stream) accepted only while the
// session's pending count stays at or below Config.SoftQueue and the
// node's reservation table has room. The first refused row stops the page
// (Stopped): ResumeCursor stays at it, and the next call starts there. A
// replay never closes a session.
//
// A page from a cursor below what the store keeps (WithRetention removed
// rows) first hands the session a *StreamTruncated{From, FirstKept}
// (through the same queue as the envelopes, so before them), then the rows
// from FirstKept: ReplayStats.Truncated, and ResumeCursor at least
// FirstKept. The store forgot, and says so; a page never jumps silently.
//
// Replayed rows and live deliveries of the stream are independent: a row
// can arrive both ways; use the envelope's Cursor (node-local store: the
// same node's cursors) or the message's own identity to tell. WithFrom
// does the handover itself: the stored rows, then live, no duplicate.
//
// Errors: ErrBadLimit, ErrEmptyTopic and ErrInvalidTopic (stream),
// ErrUnknownSession, ErrNoStore (no store, or stream not durable),
// ErrUnauthorized (wrapping the authorizer's error), ErrCursorBeyondEnd,
// ErrStopped, and the store's own. With an error, the stats say what was
// delivered before it, and ResumeCursor is still where to resume.
func (ps *PubSub) ReplaySession(ctx context.Context, id, stream string, opts ReplayOptions) (ReplayStats, error) {
	st := ReplayStats{ResumeCursor: max(opts.From, 1), NextCursor: max(opts.From, 1)}
	if ctx == nil {
		return st, fmt.Errorf("echopubsub: ReplaySession needs a context, got nil")
	}
	if opts.Limit <= 0 {
		return st, fmt.Errorf("%w: ReplayOptions.Limit is %d", ErrBadLimit, opts.Limit)
	}
	if err := ps.rt.CheckTopic(stream); err != nil {
		return st, err
	}
	s, rec, err := ps.session(id)
	if err != nil {
		return st, err
	}
	if !ps.dur.IsDurable(stream) {
		return st, fmt.Errorf("%w: %q", ErrNoStore, stream)
	}
	if auth := ps.dur.Authorize; auth != nil {
		if err := auth(id, stream); err != nil {
			return st, fmt.Errorf("%w: session %s, stream %q: %w", ErrUnauthorized, id, stream, err)
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, ps.dur.Timeout)
		defer cancel()
	}
	rows, next, err := ps.dur.Store.Read(ctx, stream, opts.From, opts.Limit)
	if err != nil {
		return st, fmt.Errorf("echopubsub: replay %q: %w", stream, err)
	}
	st.NextCursor = next
	if firstKept, truncated := store.Truncation(opts.From, rows, next); truncated {
		if !ps.sess.engine.Notify(s, &StreamTruncated{SessionID: id, Stream: stream, From: max(opts.From, 1), FirstKept: firstKept}) {
			return st, session.UnknownSession(id)
		}
		st.Truncated, st.FirstKept, st.ResumeCursor = true, firstKept, firstKept
	}
	spec, subscribed := (*rec.subs.Load())[stream]
	for i := range rows {
		r := &rows[i]
		if r.Kind == RecordGap {
			if !ps.sess.engine.Notify(s, gapNotice(id, stream, r)) {
				return st, session.UnknownSession(id)
			}
			st.Gaps++
			st.Missed += r.Missed
			st.ResumeCursor = r.Cursor + 1
			continue
		}
		env := ps.replayEnvelope(id, stream, rec.format, r)
		if subscribed {
			env.Context = spec.context
		}
		switch ps.sess.engine.Offer(s, func(d uint64) interface{} { env.DeliveryID = d; return env }) {
		case session.Delivered:
			st.Delivered++
			st.ResumeCursor = r.Cursor + 1
			continue
		case session.Refused:
			st.Stopped = true
		default:
			return st, session.UnknownSession(id)
		}
		for _, rest := range rows[i:] {
			if rest.Kind == RecordMessage {
				st.Dropped++
			}
		}
		break
	}
	return st, nil
}

func (ps *PubSub) replayEnvelope(id, stream string, format DeliveryFormat, r *Record) *Envelope {
	env := &Envelope{Instance: ps.rt.Cfg.Name, SessionID: id, Topic: stream, Class: ClassDurable,
		PayloadType: r.PayloadType, Cursor: r.Cursor, Replayed: true}
	if format != FormatEvent {
		env.Payload = r.Payload
	}
	if format != FormatEncoded {
		msg, err := messages.Decode(r.PayloadType, r.Payload)
		if err != nil {
			msg = &messages.Undecodable{Topic: stream, PayloadType: r.PayloadType, Payload: r.Payload, Error: err.Error()}
		}
		env.Event = msg
	}
	return env
}
