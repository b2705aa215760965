package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzDecodeClientFrame: whatever a client sends, the decoder answers a
// frame or a refusal with a known code, never a panic; an accepted frame
// names a known op with its required fields and nothing else; a refusal
// never names a Go type. Seed corpus:
// the f.Add calls and testdata/fuzz/FuzzDecodeClientFrame.
func FuzzDecodeClientFrame(f *testing.F) {
	for _, s := range []string{
		`{"op":"subscribe","id":"1","topic":"room"}`,
		`{"op":"subscribe","topic":"room","class":"ephemeral","context":{"a":"b"}}`,
		`{"op":"unsubscribe","topic":"room"}`,
		`{"op":"ack","delivery_id":1}`,
		`{"op":"ack","delivery_id":1,"session_id":"x.y"}`,
		`{"op":"ack_many","delivery_ids":[1,2,3]}`,
		`{"op":"replay","stream":"room","limit":50,"from":7}`,
		`{"op":"subscribe","topic":"room","from":0}`, `{"op":"subscribe","topic":"room","from":18446744073709551615}`,
		`{"op":"subscribe","topic":"room","from":-1}`, `{"op":"subscribe","topic":"room","from":null}`,
		`{"op":"subscribe","topic":"room","consumer":"web","from":3}`, `{"op":"replay","stream":"room","consumer":"web"}`,
		`{"op":"request","to":"bm9kZQ.AAAAAAAAAAAAAAAAAAAAAA","type":"echopubsub.test.v1.Stamp","payload":{"seq":"1"}}`,
		`{"op":"reply","delivery_id":3,"type":"echopubsub.test.v1.Stamp","payload":{}}`,
		`{"op":"publish","topic":"t","type":"x","payload":{}}`,
		`{"op":"ack","delivery_id":-1}`, `{"op":"ack","delivery_id":1e400}`, `{"op":"ack"} trailing`,
		`{"op":"\u0000"}`, `[]`, `null`, `""`, `{"op":1}`, `{"id":{"x":1}}`, "\xff\xfe", `{"op":"replay","stream":"s","limit":-5}`,
		`{"op":"subscribe","topic":"t","context":{"a":1}}`, `{"op":"subscribe","topic":"t","context":null}`,
		`{"op":"subscribe","op":"unsubscribe","topic":"t"}`, `{"op":"ack","delivery_id":"1"}`,
	} {
		f.Add([]byte(s))
	}
	codes := map[string]bool{CodeMalformedFrame: true, CodeUnknownOp: true, CodeInvalidArgument: true}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, fe := decodeClientFrame(b)
		if fe != nil {
			if !codes[fe.Code] || fe.Message == "" || strings.Contains(fe.Message, "Go struct") || strings.Contains(fe.Message, "wireFrame") {
				t.Fatalf("refusal %+v for %q", fe, b)
			}
			if fr != nil && len(fr.ID) > maxFrameIDLen {
				t.Fatalf("echoed id of %d bytes", len(fr.ID))
			}
			if _, err := json.Marshal(errorFrame{Type: "error", Code: fe.Code, Message: fe.Message}); err != nil {
				t.Fatal(err)
			}
			return
		}
		allowed, ok := opFields[fr.Op]
		if !ok {
			t.Fatalf("accepted unknown op %q", fr.Op)
		}
		for name, required := range allowed {
			if !required {
				continue
			}
			missing := map[string]bool{"topic": fr.Topic == "", "delivery_id": fr.DeliveryID == nil,
				"delivery_ids": fr.DeliveryIDs == nil, "stream": fr.Stream == "", "to": fr.To == "", "type": fr.Type == "",
				"payload": fr.Payload == nil}[name]
			if missing {
				t.Fatalf("accepted %s without %s: %q", fr.Op, name, b)
			}
		}
		if (fr.From != nil) != (fr.from != nil) || fr.from != nil && fr.Class == "ephemeral" {
			t.Fatalf("accepted from %s as %v: %q", fr.From, fr.from, b)
		}
		if fr.DeliveryID != nil && *fr.DeliveryID == 0 || fr.Limit != nil && *fr.Limit <= 0 {
			t.Fatalf("accepted a zero id or limit: %q", b)
		}
	})
}
