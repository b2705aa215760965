package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/messages"
)

// subscribe's from: absent is live only (no catch-up), 0 and 1 the stream's
// start, any cursor up to 2^64-1; anything else is refused with a message
// that names the field and the value, never a crash.
func TestDecodeSubscribeFrom(t *testing.T) {
	for _, c := range []struct {
		frame string
		from  *uint64 // nil: live only
	}{
		{`{"op":"subscribe","topic":"room"}`, nil},
		{`{"op":"subscribe","topic":"room","from":0}`, ptr(0)},
		{`{"op":"subscribe","topic":"room","from":1}`, ptr(1)},
		{`{"op":"subscribe","topic":"room","from": 42 }`, ptr(42)},
		{`{"op":"subscribe","topic":"room","class":"durable","from":18446744073709551615}`, ptr(1<<64 - 1)},
		{`{"op":"replay","stream":"room","from":7}`, ptr(7)},
	} {
		f, fe := decodeClientFrame([]byte(c.frame))
		if fe != nil {
			t.Fatalf("%s refused: %v", c.frame, fe)
		}
		switch {
		case c.from == nil && f.from != nil:
			t.Fatalf("%s: from %d, want absent (live only)", c.frame, *f.from)
		case c.from != nil && (f.from == nil || *f.from != *c.from):
			t.Fatalf("%s: from %v, want %d", c.frame, f.from, *c.from)
		}
	}
	for _, c := range []struct{ frame, code, says string }{
		{`{"op":"subscribe","topic":"room","from":-1}`, CodeInvalidArgument, "from must be a cursor (an integer from 0 to 18446744073709551615), got -1"},
		{`{"op":"subscribe","topic":"room","from":1.5}`, CodeInvalidArgument, "got 1.5"},
		{`{"op":"subscribe","topic":"room","from":1e3}`, CodeInvalidArgument, "got 1e3"},
		{`{"op":"subscribe","topic":"room","from":"3"}`, CodeInvalidArgument, `got "3"`},
		{`{"op":"subscribe","topic":"room","from":null}`, CodeInvalidArgument, "got null"},
		{`{"op":"subscribe","topic":"room","from":{}}`, CodeInvalidArgument, "got {}"},
		{`{"op":"subscribe","topic":"room","from":18446744073709551616}`, CodeInvalidArgument, "got 18446744073709551616"},
		{`{"op":"subscribe","topic":"room","from":` + strings.Repeat("9", 500) + `}`, CodeInvalidArgument, "..."},
		{`{"op":"subscribe","topic":"room","class":"ephemeral","from":3}`, CodeInvalidArgument, "from needs a durable subscription"},
		{`{"op":"replay","stream":"room","from":-2}`, CodeInvalidArgument, "got -2"},
		{`{"op":"unsubscribe","topic":"room","from":3}`, CodeInvalidArgument, "op unsubscribe takes no from"},
		{`{"op":"subscribe","topic":"room","class":"ephemeral","consumer":"web"}`, CodeInvalidArgument, "consumer needs a durable subscription"},
		{`{"op":"replay","stream":"room","consumer":"web"}`, CodeInvalidArgument, "op replay takes no consumer"},
		{`{"op":"subscribe","topic":"room","from":}`, CodeMalformedFrame, "not a JSON object"},
	} {
		_, fe := decodeClientFrame([]byte(c.frame))
		if fe == nil || fe.Code != c.code || !strings.Contains(fe.Message, c.says) {
			t.Fatalf("%s: refusal %v, want %s saying %q", c.frame, fe, c.code, c.says)
		}
	}
}

func ptr(n uint64) *uint64 { return &n }

// A *StreamTruncated reaches the client as notice "stream_truncated" with
// the rows it asked for (from) and the first the store still keeps.
func TestStreamTruncatedNotice(t *testing.T) {
	b := (&socket{}).encodeNotice(&echopubsub.StreamTruncated{SessionID: "s.1", Stream: "room", From: 3, FirstKept: 40})
	var f struct {
		Type, Kind string
		Notice     map[string]interface{}
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if f.Type != "notice" || f.Kind != "stream_truncated" || f.Notice["stream"] != "room" || f.Notice["from"] != 3.0 ||
		f.Notice["first_kept"] != 40.0 || f.Notice["session_id"] != "s.1" {
		t.Fatalf("StreamTruncated as %s", b)
	}
}

// The session notices reach the client under their kinds, with every
// field of the library's struct (Quiet in milliseconds).
func TestSessionNoticesJSON(t *testing.T) {
	for _, c := range []struct {
		n    interface{}
		want string
	}{
		{&echopubsub.CaughtUp{SessionID: "s.1", Stream: "room", Cursor: 17},
			`{"type":"notice","kind":"caught_up","notice":{"session_id":"s.1","stream":"room","cursor":17}}`},
		{&echopubsub.SessionStalled{SessionID: "s.1", Pending: 3, Quiet: 1500 * time.Millisecond, Node: "n1"},
			`{"type":"notice","kind":"session_stalled","notice":{"session_id":"s.1","pending":3,"quiet_ms":1500,"node":"n1"}}`},
		{&echopubsub.SessionResumed{SessionID: "s.1", Pending: 0, Quiet: 2 * time.Second, Node: "n1"},
			`{"type":"notice","kind":"session_resumed","notice":{"session_id":"s.1","pending":0,"quiet_ms":2000,"node":"n1"}}`},
		// The gap range (docs/gateway.md): the producer incarnation as a
		// string (beyond a JavaScript number's exact range), the cursors
		// [from, to); all 0 when not known.
		{&echopubsub.StreamGap{SessionID: "s.1", Stream: "room", Cursor: 9, Node: "n0", Missed: 30, Reason: "fell behind the buffer",
			ProducerIncarnation: 1796566518488985545, From: 3, To: 33},
			`{"type":"notice","kind":"stream_gap","notice":{"session_id":"s.1","stream":"room","cursor":9,"node":"n0","missed":30,` +
				`"reason":"fell behind the buffer","producer_incarnation":"1796566518488985545","from":3,"to":33}}`},
		{&echopubsub.StreamGap{SessionID: "s.1", Stream: "room", Cursor: 9, Node: "n0", Missed: 2, Reason: "r"},
			`{"type":"notice","kind":"stream_gap","notice":{"session_id":"s.1","stream":"room","cursor":9,"node":"n0","missed":2,` +
				`"reason":"r","producer_incarnation":"0","from":0,"to":0}}`},
		{&messages.CursorExpired{Node: "n0", Group: 1, Missed: 30, Reason: "fell behind the buffer", ProducerIncarnation: 1796566518488985545, From: 3, To: 33},
			`{"type":"notice","kind":"cursor_expired","notice":{"node":"n0","group":1,"missed":"30","reason":"fell behind the buffer",` +
				`"producer_incarnation":"1796566518488985545","from":"3","to":"33","all_stored":false}}`},
	} {
		if b := string((&socket{}).encodeNotice(c.n)); b != c.want {
			t.Errorf("%T as %s, want %s", c.n, b, c.want)
		}
	}
}

// A refused frame is explained in the frame's terms (a field and the JSON it
// must be), never by the Go type behind it; a key given twice is refused
// (the decoder would keep the last, silently).
func TestFrameErrorsNameFieldsAndRefuseKeysTwice(t *testing.T) {
	for _, c := range []struct{ frame, code, says string }{
		{`{"op":1}`, CodeMalformedFrame, "op must be a string, got number"},
		{`{"op":"ack","delivery_id":"7"}`, CodeMalformedFrame, "delivery_id must be an integer >= 0, got string"},
		{`{"op":"ack","delivery_id":-1}`, CodeMalformedFrame, "delivery_id must be an integer >= 0, got number -1"},
		{`{"op":"ack_many","delivery_ids":{}}`, CodeMalformedFrame, "delivery_ids must be an array, got object"},
		{`[]`, CodeMalformedFrame, "want an object, got array"},
		{`{"op":"subscribe","op":"unsubscribe","topic":"room"}`, CodeMalformedFrame, `frame has key "op" twice`},
		{`{"op":"subscribe","topic":"a","topic":"b"}`, CodeMalformedFrame, `frame has key "topic" twice`},
	} {
		_, fe := decodeClientFrame([]byte(c.frame))
		if fe == nil || fe.Code != c.code || !strings.Contains(fe.Message, c.says) {
			t.Errorf("%s: refusal %v, want %s saying %q", c.frame, fe, c.code, c.says)
		}
		if fe != nil && (strings.Contains(fe.Message, "wireFrame") || strings.Contains(fe.Message, "Go ")) {
			t.Errorf("%s: refusal names a Go type: %s", c.frame, fe.Message)
		}
	}
}
