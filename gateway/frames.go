package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/echopubsub/echopubsub"
)

// The gateway's wire protocol (docs/gateway.md): one JSON object per
// WebSocket message, in both directions.

// Client commands (the "op" of a client frame).
const (
	opSubscribe   = "subscribe"
	opUnsubscribe = "unsubscribe"
	opAck         = "ack"
	opAckMany     = "ack_many"
	opReplay      = "replay"
	opRequest     = "request"
	opReply       = "reply"
	opPublish     = "publish"
	opTrack       = "track"
	opUntrack     = "untrack"
	opPresence    = "presence"
)

// Error codes of an error frame.
const (
	CodeMalformedFrame    = "malformed_frame"
	CodeUnknownOp         = "unknown_op"
	CodeInvalidArgument   = "invalid_argument"
	CodeForbiddenSession  = "forbidden_session"
	CodeUnauthorized      = "unauthorized"
	CodeUnknownDelivery   = "unknown_delivery"
	CodeUnknownSession    = "unknown_session"
	CodeTooManyItems      = "too_many_items"
	CodeTooManySubs       = "too_many_subscriptions"
	CodeUnknownType       = "unknown_type"
	CodeReplayUnavailable = "replay_unavailable"
	CodeCursorBeyondEnd   = "cursor_beyond_end"
	CodeConsumerBusy      = "consumer_busy"
	CodeConsumerFrom      = "consumer_from"
	CodePublishDisabled   = "publish_disabled"
	CodeUnavailable       = "unavailable"
	CodeInternal          = "internal"
	// Presence (Config.Presence).
	CodePresenceDisabled = "presence_disabled"
	CodeForbiddenKey     = "forbidden_key"
	CodeMetaTooLarge     = "meta_too_large"
	CodeAlreadyTracked   = "already_tracked"
	CodeNotTracked       = "not_tracked"
)

// Limits on a client frame's fields, checked by the decoder.
const (
	maxFrameIDLen = 128
	maxTopicLen   = 1024
	maxTypeLen    = 512
	maxTraceLen   = 512 // traceparent, tracestate (W3C: 55 and 512 bytes are what peers must keep)
	// MaxMetaBytes bounds a track frame's meta, as JSON text.
	MaxMetaBytes = 1024
)

// clientFrame is one decoded client command. Fields that an op does not
// use must be absent (the decoder refuses them), so a frame means one thing.
type clientFrame struct {
	wireFrame
	context map[string]string // Context, decoded
	meta    map[string]string // Meta, decoded
	from    *uint64           // From, decoded: nil when absent
	// traced carries Traceparent and Tracestate as a remote span context
	// (echopubsub.ContextWithTrace); nil when absent.
	traced context.Context
}

// frameError is a refused client frame: the error frame's code and message.
type frameError struct {
	Code    string
	Message string
}

func (e *frameError) Error() string { return e.Code + ": " + e.Message }

func ferr(code, format string, args ...interface{}) *frameError {
	return &frameError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// wireFrame is the JSON shape of a client frame. SessionID may be given;
// it must then be the socket's own session. ID is the client's correlation
// id, echoed.
type wireFrame struct {
	Op          string          `json:"op"`
	ID          string          `json:"id"`
	SessionID   *string         `json:"session_id"`
	Topic       string          `json:"topic"`
	Class       string          `json:"class"`
	Context     json.RawMessage `json:"context"`
	DeliveryID  *uint64         `json:"delivery_id"`
	DeliveryIDs []uint64        `json:"delivery_ids"`
	Stream      string          `json:"stream"`
	Limit       *int            `json:"limit"`
	From        json.RawMessage `json:"from"` // a cursor: decoded by decodeFrom
	Consumer    string          `json:"consumer"`
	To          string          `json:"to"`
	Type        string          `json:"type"`
	Payload     json.RawMessage `json:"payload"`
	Receipt     *bool           `json:"receipt"`
	// Presence: the key (optional; when given it must be the socket's
	// identity) and the meta of a track.
	Key  string          `json:"key"`
	Meta json.RawMessage `json:"meta"`
	// The client's W3C trace context, which a publish continues.
	Traceparent string `json:"traceparent"`
	Tracestate  string `json:"tracestate"`
}

// opFields lists the fields each op accepts besides op, id and session_id;
// required ones are marked true.
var opFields = map[string]map[string]bool{
	opSubscribe:   {"topic": true, "class": false, "context": false, "from": false, "consumer": false},
	opUnsubscribe: {"topic": true},
	opAck:         {"delivery_id": true},
	opAckMany:     {"delivery_ids": true},
	opReplay:      {"stream": true, "limit": false, "from": false},
	opRequest:     {"to": true, "type": true, "payload": true},
	opReply:       {"delivery_id": true, "type": true, "payload": true},
	opPublish:     {"topic": true, "type": true, "payload": true, "traceparent": false, "tracestate": false, "receipt": false},
	opTrack:       {"topic": true, "key": false, "meta": false},
	opUntrack:     {"topic": true, "key": false},
	opPresence:    {"topic": true},
}

// decodeClientFrame parses and checks one client frame. It never panics;
// every refusal is a *frameError whose code says why. The id is returned
// even when the frame is refused (when it could be read), so the error
// frame can name the command it answers.
func decodeClientFrame(b []byte) (*clientFrame, *frameError) {
	if !utf8.Valid(b) {
		return nil, ferr(CodeMalformedFrame, "frame is not valid UTF-8")
	}
	var w wireFrame
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return idOnly(b), ferr(CodeMalformedFrame, "frame is not a JSON object of known fields: %s", clip(decodeErr(err)))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return idOnly(b), ferr(CodeMalformedFrame, "frame has data after its JSON object")
	}
	if key, twice := duplicateKey(b); twice { // the decoder keeps the last: which one runs is not the client's to guess
		return idOnly(b), ferr(CodeMalformedFrame, "frame has key %q twice", clip(key))
	}
	f := &clientFrame{wireFrame: w}
	if len(f.ID) > maxFrameIDLen {
		f.ID = ""
		return f, ferr(CodeInvalidArgument, "id is longer than %d bytes", maxFrameIDLen)
	}
	if f.Op == "" {
		return f, ferr(CodeMalformedFrame, "frame has no op")
	}
	allowed, known := opFields[f.Op]
	if !known {
		return f, ferr(CodeUnknownOp, "unknown op %q", clip(f.Op))
	}
	present := map[string]bool{
		"topic": w.Topic != "", "class": w.Class != "", "context": w.Context != nil,
		"delivery_id": w.DeliveryID != nil, "delivery_ids": w.DeliveryIDs != nil, "stream": w.Stream != "",
		"limit": w.Limit != nil, "from": w.From != nil, "to": w.To != "", "type": w.Type != "", "payload": w.Payload != nil,
		"traceparent": w.Traceparent != "", "tracestate": w.Tracestate != "", "receipt": w.Receipt != nil,
		"consumer": w.Consumer != "", "key": w.Key != "", "meta": w.Meta != nil,
	}
	for _, name := range []string{"topic", "class", "context", "delivery_id", "delivery_ids", "stream", "limit", "from",
		"to", "type", "payload", "traceparent", "tracestate", "receipt", "consumer", "key", "meta"} {
		required, ok := allowed[name]
		switch {
		case present[name] && !ok:
			return f, ferr(CodeInvalidArgument, "op %s takes no %s", f.Op, name)
		case !present[name] && required:
			return f, ferr(CodeInvalidArgument, "op %s needs %s", f.Op, name)
		}
	}
	for _, s := range []struct {
		name, v string
		max     int
	}{{"topic", f.Topic, maxTopicLen}, {"stream", f.Stream, maxTopicLen}, {"to", f.To, maxTopicLen}, {"type", f.Type, maxTypeLen},
		{"traceparent", f.Traceparent, maxTraceLen}, {"tracestate", f.Tracestate, maxTraceLen}, {"key", f.Key, maxTopicLen}} {
		if len(s.v) > s.max {
			return f, ferr(CodeInvalidArgument, "%s is longer than %d bytes", s.name, s.max)
		}
	}
	switch f.Class {
	case "", "durable", "ephemeral":
	default:
		return f, ferr(CodeInvalidArgument, "class must be \"durable\" or \"ephemeral\", got %q", clip(f.Class))
	}
	if f.Context != nil && string(f.Context) != "null" {
		if err := json.Unmarshal(f.Context, &f.context); err != nil {
			return f, ferr(CodeInvalidArgument, "context must be an object of strings: %s", clip(err.Error()))
		}
	}
	if f.Meta != nil && string(f.Meta) != "null" {
		if len(f.Meta) > MaxMetaBytes {
			return f, ferr(CodeMetaTooLarge, "meta is %d bytes of JSON, at most %d", len(f.Meta), MaxMetaBytes)
		}
		if err := json.Unmarshal(f.Meta, &f.meta); err != nil {
			return f, ferr(CodeInvalidArgument, "meta must be an object of strings: %s", clip(err.Error()))
		}
	}
	if f.From != nil {
		from, fe := decodeFrom(f.From)
		if fe != nil {
			return f, fe
		}
		f.from = &from
	}
	if f.from != nil && f.Class == "ephemeral" {
		return f, ferr(CodeInvalidArgument, "from needs a durable subscription: class ephemeral is not stored")
	}
	if f.Consumer != "" && f.Class == "ephemeral" {
		return f, ferr(CodeInvalidArgument, "consumer needs a durable subscription: class ephemeral is not acknowledged")
	}
	if f.Limit != nil && *f.Limit <= 0 {
		return f, ferr(CodeInvalidArgument, "limit must be > 0, got %d", *f.Limit)
	}
	if f.DeliveryID != nil && *f.DeliveryID == 0 {
		return f, ferr(CodeInvalidArgument, "delivery_id must be > 0")
	}
	if fe := decodeTrace(f); fe != nil {
		return f, fe
	}
	return f, nil
}

// decodeTrace checks the frame's trace context: a W3C traceparent, and a
// tracestate only beside one.
func decodeTrace(f *clientFrame) *frameError {
	if f.Traceparent == "" {
		if f.Tracestate != "" {
			return ferr(CodeInvalidArgument, "tracestate needs a traceparent")
		}
		return nil
	}
	base := context.Background()
	if f.traced = echopubsub.ContextWithTrace(base, f.Traceparent, f.Tracestate); f.traced == base {
		f.traced = nil
		return ferr(CodeInvalidArgument, "traceparent must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, ids not all zero), got %q", clip(f.Traceparent))
	}
	return nil
}

// decodeErr says what json could not decode in the frame's terms: a field
// and the JSON it must be, never the Go type behind it.
func decodeErr(err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err.Error() // syntax errors and unknown fields name no Go type
	}
	if te.Field == "" {
		return fmt.Sprintf("want an object, got %s", te.Value)
	}
	return fmt.Sprintf("%s must be %s, got %s", te.Field, jsonKind(te.Type), te.Value)
}

// jsonKind is the JSON a field of Go type t takes.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer >= 0"
	case reflect.Slice:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Bool:
		return "true or false"
	}
	return "another JSON value"
}

// duplicateKey returns a key that b's top-level object has twice. A frame
// that is not a well-formed object has none here: decoding says what is
// wrong with it.
func duplicateKey(b []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	seen := make([]string, 0, 16) // a frame has a handful of keys
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		key, _ := tok.(string)
		if slices.Contains(seen, key) {
			return key, true
		}
		seen = append(seen, key)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}

// decodeFrom reads a from field: a cursor, a JSON integer in 0..2^64-1
// (0 and 1 both mean the stream's start). Anything else (negative, a
// fraction, an exponent, a string, null) is refused with the value.
func decodeFrom(raw json.RawMessage) (uint64, *frameError) {
	s := string(bytes.TrimSpace(raw))
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, ferr(CodeInvalidArgument, "from must be a cursor (an integer from 0 to %d), got %s", uint64(math.MaxUint64), clip(s))
	}
	return n, nil
}

// idOnly reads a refused frame leniently for its id and op alone, so that
// the error frame can name the command it answers; nil when it has none.
func idOnly(b []byte) *clientFrame {
	var w struct {
		Op string `json:"op"`
		ID string `json:"id"`
	}
	if json.Unmarshal(b, &w) != nil || w.ID == "" || len(w.ID) > maxFrameIDLen {
		return nil
	}
	return &clientFrame{wireFrame: wireFrame{Op: w.Op, ID: w.ID}}
}

// clip shortens a string echoed into an error frame.
func clip(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}

// Server frames.

// helloFrame is the first frame of a socket.
type helloFrame struct {
	Type      string `json:"type"` // "hello"
	SessionID string `json:"session_id"`
	Identity  string `json:"identity"`
	Node      string `json:"node"`
	Instance  string `json:"instance"`
}

// envelopeFrame is one delivery.
type envelopeFrame struct {
	Type       string            `json:"type"` // "envelope"
	SessionID  string            `json:"session_id"`
	DeliveryID uint64            `json:"delivery_id"`
	Topic      string            `json:"topic"`
	Class      string            `json:"class"`
	Context    map[string]string `json:"context,omitempty"`
	Request    *requestInfo      `json:"request,omitempty"`
	// Replayed marks a delivery of the replay command. Cursor is the
	// row's cursor in the node's store, live or replayed, when the node's
	// store holds it (Envelope.Cursor); absent otherwise.
	Replayed    bool            `json:"replayed,omitempty"`
	Cursor      uint64          `json:"cursor,omitempty"`
	PayloadType string          `json:"payload_type"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	// PayloadError says why Payload is absent (undecodable on this node,
	// or over MaxFrameSize); PayloadBase64 then carries the bytes when
	// they fit.
	PayloadError  string `json:"payload_error,omitempty"`
	PayloadBase64 []byte `json:"payload_base64,omitempty"`
	// Traceparent and Tracestate are the W3C trace context the message
	// was published in (Envelope.Traceparent), when its publisher traces;
	// absent otherwise.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

type requestInfo struct {
	RequestID uint64 `json:"request_id"`
	From      string `json:"from"`
	To        string `json:"to"`
	Reply     bool   `json:"reply"`
}

// streamGapJSON is a *StreamGap on the wire (notice kind "stream_gap").
type streamGapJSON struct {
	SessionID string `json:"session_id"`
	Stream    string `json:"stream"`
	Cursor    uint64 `json:"cursor"`
	Node      string `json:"node"`
	Missed    uint64 `json:"missed"`
	Reason    string `json:"reason"`
	// The range the gap row stands for, as in cursor_expired (proto3 JSON
	// there: the incarnation a string, since it exceeds what a JavaScript
	// number holds exactly); 0 (to, producer_incarnation "0"): unknown.
	ProducerIncarnation uint64 `json:"producer_incarnation,string"`
	From                uint64 `json:"from"`
	To                  uint64 `json:"to"`
}

// streamTruncatedJSON is a *StreamTruncated on the wire (notice kind
// "stream_truncated").
type streamTruncatedJSON struct {
	SessionID string `json:"session_id"`
	Stream    string `json:"stream"`
	From      uint64 `json:"from"`
	FirstKept uint64 `json:"first_kept"`
}

// caughtUpJSON is a *CaughtUp on the wire (notice kind "caught_up"): the
// WithFrom subscription's stored rows up to Cursor were delivered, live
// rows follow.
type caughtUpJSON struct {
	SessionID string `json:"session_id"`
	Stream    string `json:"stream"`
	Cursor    uint64 `json:"cursor"`
}

// sessionStallJSON is a *SessionStalled or *SessionResumed on the wire
// (notice kinds "session_stalled", "session_resumed"); QuietMS is Quiet in
// milliseconds.
type sessionStallJSON struct {
	SessionID string `json:"session_id"`
	Pending   int    `json:"pending"`
	QuietMS   int64  `json:"quiet_ms"`
	Node      string `json:"node"`
}

// noticeFrame carries a notice message in protojson.
type noticeFrame struct {
	Type   string          `json:"type"` // "notice"
	Kind   string          `json:"kind"` // session_pressure, session_closed, cursor_expired, back_pressure, stream_gap, stream_truncated
	Notice json.RawMessage `json:"notice"`
}

// resultFrame answers a command that succeeded.
type resultFrame struct {
	Type   string      `json:"type"` // "result"
	ID     string      `json:"id,omitempty"`
	Op     string      `json:"op"`
	Result interface{} `json:"result"`
}

// errorFrame answers a command that failed, or a frame that was refused.
type errorFrame struct {
	Type    string `json:"type"` // "error"
	ID      string `json:"id,omitempty"`
	Op      string `json:"op,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message"`
}
