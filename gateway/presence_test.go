package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/gateway"
	"github.com/echopubsub/echopubsub/presence"
	"github.com/echopubsub/echopubsub/test"
)

// userIdentity authenticates a socket as its ?user= query parameter.
func userIdentity(r *http.Request) (string, error) {
	if u := r.URL.Query().Get("user"); u != "" {
		return u, nil
	}
	return "", fmt.Errorf("no user")
}

// startTracker starts a presence tracker on nd, stopped when the test
// ends (after the gateway closes, before the node stops).
func startTracker(t *testing.T, nd *test.Node) *presence.Tracker {
	t.Helper()
	tr, err := presence.New(nd.PS, presence.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tr.Stop(ctx); err != nil {
			t.Errorf("tracker stop: %v", err)
		}
	})
	return tr
}

// presenceList is a topic's list as a client keeps it: presence_state
// replaces it, presence_diff applies joins and leaves by ref.
type presenceList struct {
	state bool
	refs  map[string]string // ref -> key
}

func (l *presenceList) apply(t *testing.T, f frame) {
	switch f.str("type") {
	case "presence_state":
		l.state, l.refs = true, map[string]string{}
		add(l.refs, f.obj("presences"))
	case "presence_diff":
		if !l.state {
			t.Fatalf("presence_diff %v before presence_state", f)
		}
		for key, metas := range f.obj("leaves") {
			for _, m := range metas.([]interface{}) {
				ref := frame(m.(map[string]interface{})).str("ref")
				if l.refs[ref] == key {
					delete(l.refs, ref)
				}
			}
		}
		add(l.refs, f.obj("joins"))
	}
}

func add(refs map[string]string, m frame) {
	for key, metas := range m {
		for _, pm := range metas.([]interface{}) {
			refs[frame(pm.(map[string]interface{})).str("ref")] = key
		}
	}
}

// keys is the list's keys, sorted, one per presence.
func (l *presenceList) keys() string {
	var ks []string
	for _, k := range l.refs {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

// awaitList reads c's frames into l until its keys are want.
func awaitList(t *testing.T, c *wsClient, l *presenceList, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.keys() != want || !l.state {
		if time.Now().After(deadline) {
			t.Fatalf("presence list %q, want %q", l.keys(), want)
		}
		f, err := c.read()
		if err != nil {
			t.Fatalf("read: %v (list %q, want %q)", err, l.keys(), want)
		}
		l.apply(t, f)
	}
}

// Two sockets on two nodes see each other join (the state, then a diff)
// and leave when one closes.
func TestGatewayPresenceAcrossNodes(t *testing.T) {
	nodes := test.StartCluster(t, 2, gatewayConfig(t))
	var urls []string
	for _, nd := range nodes {
		cfg := smallGatewayConfig()
		cfg.Presence = startTracker(t, nd)
		_, url := serveGateway(t, nd, userIdentity, cfg)
		urls = append(urls, url)
	}
	alice := dialGateway(t, urls[0]+"?user=alice")
	bob := dialGateway(t, urls[1]+"?user=bob")
	var la, lb presenceList
	f, others := alice.answer(map[string]interface{}{"op": "presence", "topic": "room"})
	if f.str("type") != "result" || len(others) != 0 {
		t.Fatalf("presence answered %v after %v", f, others)
	}
	if st := alice.next(); st.str("type") != "presence_state" || st.str("topic") != "room" {
		t.Fatalf("after the presence result: %v, want presence_state of room", st)
	} else {
		la.apply(t, st)
	}
	alice.ok(map[string]interface{}{"op": "track", "topic": "room", "meta": map[string]string{"tab": "1"}})
	awaitList(t, alice, &la, "alice")

	bob.ok(map[string]interface{}{"op": "presence", "topic": "room"})
	awaitList(t, bob, &lb, "alice") // from node 0, through the state or a diff
	bob.ok(map[string]interface{}{"op": "track", "topic": "room"})
	awaitList(t, bob, &lb, "alice,bob")
	awaitList(t, alice, &la, "alice,bob")

	if err := alice.conn.CloseNow(); err != nil {
		t.Fatal(err)
	}
	awaitList(t, bob, &lb, "bob")
}

// A socket tracks under its own identity only: it cannot track or
// untrack another key; the frames that try are refused, and the other's
// presence stays.
func TestGatewayPresenceBoundToIdentity(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	tr := startTracker(t, nodes[0])
	cfg := smallGatewayConfig()
	cfg.Presence = tr
	_, url := serveGateway(t, nodes[0], userIdentity, cfg)
	alice := dialGateway(t, url+"?user=alice")
	mallory := dialGateway(t, url+"?user=mallory")
	alice.ok(map[string]interface{}{"op": "track", "topic": "room", "key": "alice"}) // its own key: allowed
	mallory.refused(map[string]interface{}{"op": "track", "topic": "room", "key": "alice"}, gateway.CodeForbiddenKey)
	mallory.refused(map[string]interface{}{"op": "untrack", "topic": "room", "key": "alice"}, gateway.CodeForbiddenKey)
	mallory.refused(map[string]interface{}{"op": "untrack", "topic": "room"}, gateway.CodeNotTracked)
	alice.refused(map[string]interface{}{"op": "track", "topic": "room"}, gateway.CodeAlreadyTracked)
	mallory.refused(map[string]interface{}{"op": "track", "topic": "room", "meta": map[string]string{"x": strings.Repeat("y", gateway.MaxMetaBytes)}}, gateway.CodeMetaTooLarge)
	mallory.refused(map[string]interface{}{"op": "track", "topic": "room", "meta": map[string]int{"x": 1}}, gateway.CodeInvalidArgument)
	mallory.refused(map[string]interface{}{"op": "track"}, gateway.CodeInvalidArgument)
	mallory.refused(map[string]interface{}{"op": "presence", "topic": "room", "meta": map[string]string{}}, gateway.CodeInvalidArgument)
	if got := tr.List("room"); len(got) != 1 || len(got["alice"]) != 1 {
		t.Fatalf("List(room) = %v, want alice's presence alone", got)
	}
	alice.ok(map[string]interface{}{"op": "untrack", "topic": "room"})
	if got := tr.List("room"); len(got) != 0 {
		t.Fatalf("List(room) after alice's untrack = %v, want none", got)
	}
}

// Without Config.Presence the presence commands say so.
func TestGatewayPresenceNotEnabled(t *testing.T) {
	nodes := test.StartCluster(t, 1, gatewayConfig(t))
	_, url := serveGateway(t, nodes[0], nil, smallGatewayConfig())
	c := dialGateway(t, url)
	for _, op := range []string{"track", "untrack", "presence"} {
		f := c.refused(map[string]interface{}{"op": op, "topic": "room"}, gateway.CodePresenceDisabled)
		if !strings.Contains(f.str("message"), "Config.Presence") {
			t.Fatalf("%s refused with %v, want a message naming Config.Presence", op, f)
		}
	}
}
