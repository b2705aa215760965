package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
)

// bufferSize is the nodes' producer buffer: small, so that a node stopped
// (SIGSTOP) for more messages than that falls behind and is told.
const bufferSize = 16

// TestServeCluster: three `echopubsub serve` nodes, and every inspecting
// command against them as an operator would run it, in table and --json
// form: peers, streams, sessions, tail (live, --from, and a CursorExpired
// it shows when its node fell behind), replay and publish.
func TestServeCluster(t *testing.T) {
	nodes := startCluster(t, 3, bufferSize)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]

	// peers: each node lists the two others, registered, in both forms.
	rows := table(t, mustRun(t, n1, "peers"), "PEER")
	if len(rows) != 2 {
		t.Fatalf("peers of node 1: %v", rows)
	}
	for _, r := range rows {
		if r["PEER"] != n2.addr && r["PEER"] != n3.addr || r["REGISTERED"] != "yes" || r["STALLED"] != "no" {
			t.Errorf("peers of node 1: row %v", r)
		}
	}

	// A live tail on node 3 (JSON lines), subscribed before anything is
	// published: its first line says so.
	live := startTail(t, n3, "room:1", "--json")
	live.next(t, 20*time.Second, lineKind("subscribed"), "the subscribed line")

	// publish through node 1: a message argument, then stdin lines.
	if out := mustRun(t, n1, "publish", "room:1", "m1"); !strings.Contains(out, "published 1 message(s) on room:1") {
		t.Errorf("publish said %q", out)
	}
	r := runEnv(t, n1, []string{"ECHOPUBSUB_ADMIN_TOKEN=" + adminToken}, "m2\nm3\n", "publish", "room:1", "--json")
	if r.err != nil || strings.TrimSpace(r.out) != `{"published":2,"topic":"room:1"}` {
		t.Fatalf("publish --json from stdin: %v %q %s", r.err, r.out, r.errOut)
	}
	for i := 1; i <= 3; i++ {
		l := decodeLine(t, live.next(t, 20*time.Second, lineKind("message"), "message m"+strconv.Itoa(i)))
		if string(l.Payload) != `"m`+strconv.Itoa(i)+`"` || l.Topic != "room:1" || l.Cursor != uint64(i) || l.Type != "google.protobuf.StringValue" {
			t.Fatalf("tail line %d: %+v", i, l)
		}
	}

	// peers --json: every peer caught up (lag 0), answered recently.
	test.Eventually(t, 20*time.Second, func() bool {
		var h echopubsub.Health
		if json.Unmarshal([]byte(mustRun(t, n1, "peers", "--json")), &h) != nil || len(h.Peers) != 2 {
			return false
		}
		for _, p := range h.Peers {
			if p.Lag != 0 || p.LagUnknown || p.LastAckAge < 0 {
				return false
			}
		}
		return true
	}, func() string { return mustRun(t, n1, "peers", "--json") })

	// streams: node 1 stored what it published; node 3 (a node-local
	// store) what it received. StringValue "mN" is 4 bytes on the wire.
	for _, nd := range []*node{n1, n3} {
		test.Eventually(t, 20*time.Second, func() bool {
			rows := table(t, mustRun(t, nd, "streams"), "STREAM")
			return len(rows) == 1 && rows[0]["STREAM"] == "room:1" && rows[0]["FIRST"] == "1" && rows[0]["LAST"] == "3" &&
				rows[0]["ROWS"] == "3" && rows[0]["BYTES"] == "12" && rows[0]["RETENTION"] == "none"
		}, func() string { return nd.p.Name() + ": " + mustRun(t, nd, "streams") })
	}
	var st echopubsub.AdminStreams
	if err := json.Unmarshal([]byte(mustRun(t, n1, "streams", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Store != "*seglog.Store" || st.Shared || len(st.Streams) != 1 ||
		st.Streams[0] != (echopubsub.StreamInfo{Stream: "room:1", First: 1, Last: 3, Rows: 3, Bytes: 12}) {
		t.Errorf("streams --json: %+v", st)
	}

	// sessions: the live tail is a session on node 3, nothing pending.
	rows = table(t, mustRun(t, n3, "sessions"), "SESSION")
	if len(rows) != 1 || rows[0]["IDENTITY"] != "echopubsub-admin-tail" || rows[0]["PENDING"] != "0" || rows[0]["STALLED"] != "no" || rows[0]["WAITING"] != "no" {
		t.Errorf("sessions of node 3: %v", rows)
	}
	var ss struct {
		Node     string                    `json:"node"`
		Sessions []echopubsub.AdminSession `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, n3, "sessions", "--json")), &ss); err != nil {
		t.Fatal(err)
	}
	if ss.Node != n3.addr || len(ss.Sessions) != 1 || ss.Sessions[0].ID != rows[0]["SESSION"] || ss.Sessions[0].Pending != 0 {
		t.Errorf("sessions --json of node 3: %+v", ss)
	}

	// replay: rows 2..3 of node 1's stream, in both forms.
	out := mustRun(t, n1, "replay", "room:1", "--from", "2", "--to", "3")
	if want := "room:1 #2 google.protobuf.StringValue \"m2\"\nroom:1 #3 google.protobuf.StringValue \"m3\"\n"; out != want {
		t.Errorf("replay:\n%s\nwant:\n%s", out, want)
	}
	var got []echopubsub.AdminLine
	for _, l := range strings.Split(strings.TrimSpace(mustRun(t, n1, "replay", "room:1", "--from", "1", "--json")), "\n") {
		got = append(got, decodeLine(t, l))
	}
	if len(got) != 4 || got[0].Kind != "replay" || got[0].Last != 3 {
		t.Fatalf("replay --json: %+v", got)
	}
	for i, l := range got[1:] {
		if l.Kind != "row" || l.Cursor != uint64(i+1) || string(l.Payload) != `"m`+strconv.Itoa(i+1)+`"` || l.Origin != n1.addr || l.Time == nil {
			t.Errorf("replay --json row %d: %+v", i+1, l)
		}
	}

	// tail --from 1 on node 3: the stored rows first, then it is caught up.
	caught := startTail(t, n3, "room:1", "--from", "1")
	caught.next(t, 20*time.Second, func(l string) bool { return l == "tailing room:1 from cursor 1" }, "the tailing line")
	for i := 1; i <= 3; i++ {
		want := "room:1 #" + strconv.Itoa(i) + " google.protobuf.StringValue \"m" + strconv.Itoa(i) + "\""
		caught.next(t, 20*time.Second, func(l string) bool { return l == want }, want)
	}
	caught.next(t, 20*time.Second, func(l string) bool { return strings.HasPrefix(l, "NOTICE echopubsub.CaughtUp ") }, "a CaughtUp notice")

	// A notice: node 3 stopped (SIGSTOP) while node 1 publishes more than
	// it can hand node 3 unacknowledged; once it runs again its producer
	// tells node 3's subscribers, the tail among them, that messages were
	// lost. Node 1 keeps bufferSize messages and has at most
	// MaxBatchesInFlight (4) batches of at most bufferSize messages in
	// flight to node 3 (they reach it after SIGCONT: a flake once showed
	// that 2*bufferSize can all be in flight, and then rightly no notice
	// comes): 8*bufferSize cannot fit in both.
	if err := n3.p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	n3.stopped = true
	var many strings.Builder
	for i := 0; i < 8*bufferSize; i++ {
		many.WriteString("lost" + strconv.Itoa(i) + "\n")
	}
	if r := runEnv(t, n1, []string{"ECHOPUBSUB_ADMIN_TOKEN=" + adminToken}, many.String(), "publish", "room:1"); r.err != nil {
		t.Fatalf("publish: %v %s", r.err, r.errOut)
	}
	if err := n3.p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	n3.continued = true
	l := decodeLine(t, live.next(t, 30*time.Second, func(l string) bool {
		return strings.Contains(l, `"kind":"notice"`) && strings.Contains(l, `.CursorExpired"`)
	}, "a CursorExpired notice"))
	var ce struct {
		Node   string `json:"node"`
		Missed string `json:"missed"` // protojson: uint64 as a string
	}
	if err := json.Unmarshal(l.Notice, &ce); err != nil || ce.Node != n1.addr || ce.Missed == "" || ce.Missed == "0" {
		t.Errorf("CursorExpired notice %s: %v", l.Notice, err)
	}
}

// TestAdminAuth: the admin endpoint refuses a request without the token or
// with a wrong one, and refuses publish where it is not enabled; the
// commands say so. The node keeps its streams in bolt (store.kind), and
// its gateway requires a token (gateway.token): a WebSocket upgrade without
// it, or with a wrong one, is refused before the upgrade.
func TestAdminAuth(t *testing.T) {
	ports, err := proc.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, ports, []string{"127.0.0.1:" + strconv.Itoa(ports[0])}, bufferSize, "http",
		func(int) []string { return []string{"--store-kind", "bolt", "--gateway-token", "gw-token"} }, nil)
	nd := nodes[0]
	var st echopubsub.AdminStreams
	if err := json.Unmarshal([]byte(mustRun(t, nd, "streams", "--json")), &st); err != nil || st.Store != "*bolt.Store" || len(st.Streams) != 0 {
		t.Errorf("streams --json of a bolt node: %+v %v", st, err)
	}
	for name, header := range map[string]string{"missing": "", "wrong": "Bearer not-" + adminToken} {
		req, _ := http.NewRequest(http.MethodGet, nd.adminURL+"/peers", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s token: %s, want 401", name, resp.Status)
		}
	}
	for query, code := range map[string]int{"": http.StatusUnauthorized, "?token=nope": http.StatusUnauthorized,
		"?token=gw-token": http.StatusUpgradeRequired} { // a right token: on to the upgrade, which a GET lacks
		resp, err := http.Get("http://" + nd.http + "/ws" + query)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("GET /ws%s: %s, want %d", query, resp.Status, code)
		}
	}
	r := runEnv(t, nd, []string{"ECHOPUBSUB_ADMIN_TOKEN=wrong"}, "", "streams")
	if r.err == nil || !strings.Contains(r.errOut, "401") || !strings.Contains(r.errOut, "wrong bearer token") {
		t.Errorf("streams with a wrong token: %v %q", r.err, r.errOut)
	}
	r = runEnv(t, nd, []string{"ECHOPUBSUB_ADMIN_TOKEN="}, "", "sessions")
	if r.err == nil || !strings.Contains(r.errOut, "missing bearer token") {
		t.Errorf("sessions without a token: %v %q", r.err, r.errOut)
	}
	r = run(t, nd, "publish", "room:1", "nope")
	if nd.publishing || r.err == nil || !strings.Contains(r.errOut, "403") || !strings.Contains(r.errOut, "publishing is not enabled") {
		t.Errorf("publish on a read-only endpoint: %v %q", r.err, r.errOut)
	}
}
