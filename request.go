package echopubsub

import (
	"context"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/internal/session"
	"github.com/echopubsub/echopubsub/messages"
)

// Context keys of a request or a reply envelope (see RequestContextOf).
const (
	ContextKind        = "echopubsub.kind" // "request" or "reply"
	ContextRequestID   = "echopubsub.request_id"
	ContextFromSession = "echopubsub.from_session"
	ContextToSession   = "echopubsub.to_session"
)

// RequestContext is what a request or reply envelope says about itself.
type RequestContext struct {
	// RequestID is RequestFromSession's result; a reply carries its request's.
	RequestID uint64
	// From is the session that sent it (the one to reply to, for a
	// request); To is the session it was sent to.
	From, To string
	// Reply is true on a reply, false on a request.
	Reply bool
}

// RequestContextOf returns env's request context; false when env is not a
// request or a reply.
func RequestContextOf(env *Envelope) (RequestContext, bool) {
	if env == nil || env.Context == nil {
		return RequestContext{}, false
	}
	kind := env.Context[ContextKind]
	if kind != "request" && kind != "reply" {
		return RequestContext{}, false
	}
	id, err := strconv.ParseUint(env.Context[ContextRequestID], 10, 64)
	if err != nil {
		return RequestContext{}, false
	}
	return RequestContext{RequestID: id, From: env.Context[ContextFromSession], To: env.Context[ContextToSession],
		Reply: kind == "reply"}, true
}

// RequestFromSession sends event to session to (on any node: its id names its
// node) as a durable delivery whose context (RequestContextOf) names the
// request and fromSessionID, a session open on this node. It travels in the
// pubsub's stream like a broadcast (DirectBroadcast to the node of to), so
// it has the same guarantee and the same reservation model on arrival: no
// side channel. It returns the request id, which the reply carries. A
// session on another node that is not open when the request arrives does
// not get it.
func (ps *PubSub) RequestFromSession(fromSessionID, toSessionID string, event proto.Message) (uint64, error) {
	if _, _, err := ps.session(fromSessionID); err != nil {
		return 0, fmt.Errorf("%w: from session", err)
	}
	id := ps.sess.requests.Add(1)
	err := ps.sendToSession(context.Background(), toSessionID, &messages.SessionMessage{FromSession: fromSessionID, RequestId: id,
		Kind: messages.SessionMessageKind_SESSION_MESSAGE_KIND_REQUEST}, event)
	if err != nil {
		return 0, err
	}
	return id, nil
}

// Reply sends response to session to (usually RequestContextOf(request).From)
// as a durable delivery whose context names request's id, from the session
// that received request. When the pubsub traces (WithTracerProvider), the
// reply continues the request's trace: its broadcast span is a child of
// the request's (Envelope.Traceparent).
func (ps *PubSub) Reply(toSessionID string, request *Envelope, response proto.Message) error {
	rc, ok := RequestContextOf(request)
	if !ok || rc.Reply {
		return ErrNotRequest
	}
	// The reply comes from the session that received request, open here: an
	// envelope made up by the caller cannot make a reply from anyone else.
	if _, _, err := ps.session(request.SessionID); err != nil {
		return fmt.Errorf("%w: replying session", err)
	}
	parent := context.Background() // a traced reply continues the request's trace
	if ps.tracer != nil && request.Traceparent != "" {
		parent = ContextWithTrace(context.Background(), request.Traceparent, request.Tracestate)
	}
	return ps.sendToSession(parent, toSessionID, &messages.SessionMessage{FromSession: request.SessionID, RequestId: rc.RequestID,
		Kind: messages.SessionMessageKind_SESSION_MESSAGE_KIND_REPLY}, response)
}

// sendToSession writes sm to session to's inbox; parent is the context
// whose span a traced write continues (Background: a new trace).
func (ps *PubSub) sendToSession(parent context.Context, to string, sm *messages.SessionMessage, msg proto.Message) error {
	if ps.stopped() {
		return ErrStopped
	}
	node, ok := sessionNode(to)
	if !ok {
		return fmt.Errorf("%w: malformed session id %.64q", ErrUnknownSession, to)
	}
	if node == ps.rt.Node && ps.sess.engine.Get(to) == nil {
		return session.UnknownSession(to)
	}
	typeName, payload, err := messages.Encode(msg)
	if err != nil {
		return fmt.Errorf("%w (to session %q)", err, to)
	}
	sm.ProtocolVersion = messages.ProtocolVersion
	sm.ToSession = to
	sm.Message = &anypb.Any{TypeUrl: "type.googleapis.com/" + typeName, Value: payload}
	if !ps.rt.IsMember(node) {
		return fmt.Errorf("%w: session %q is on %q", ErrNotMember, to, node)
	}
	return ps.write(core.Wait{}, nil, SessionInboxPrefix+to, sm, audience{onlyNode: node, parent: parent})
}
