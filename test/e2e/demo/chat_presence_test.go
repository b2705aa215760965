//go:build unix

package demo

import (
	"strings"
	"testing"
	"time"
)

// TestChatPresenceInBrowser runs `demo -chat` with ada's page on node 1 and
// bob's on node 2: each sees both in the room's online list (the presence
// tracker, across nodes). Bob going offline (his socket closes) takes him
// off ada's list; coming back (a new session tracks him again) puts him
// back. Every wait polls the page with a deadline.
func TestChatPresenceInBrowser(t *testing.T) {
	chromium := findChromium(t)
	url, _ := runDemo(t, buildDemo(t), "-chat")
	base := url[:strings.Index(url, "/chat")]
	browser := startChromium(t, chromium)
	ada := openTab(t, browser, "ada", base+"/chat?node=1&user=ada")
	bob := openTab(t, browser, "bob", base+"/chat?node=2&user=bob")
	both := func(s chatState) bool { return strings.Join(s.OnlineUsers, ",") == "ada,bob" }
	ada.until("ada and bob online", both)
	bob.until("ada and bob online", both)
	ada.shot("presence-1-both")

	bob.click("#offline")
	bob.until("offline", func(s chatState) bool { return !s.Online })
	ada.until("bob gone from the online list", func(s chatState) bool { return strings.Join(s.OnlineUsers, ",") == "ada" })
	ada.shot("presence-2-bob-offline")

	bob.click("#online")
	bob.until("back online, both listed", func(s chatState) bool { return s.Online && both(s) })
	ada.until("bob back in the online list", both)
	if s := ada.read(); len(s.Errors) > 0 {
		t.Fatalf("ada's page errors: %v", s.Errors)
	}
	if s := bob.read(); len(s.Errors) > 0 {
		t.Fatalf("bob's page errors: %v", s.Errors)
	}
}

// TestChatPresenceNodeStopInBrowser runs `demo -chat` with ada's page on
// node 1 and bob's on node 2, then stops node 2 with bob's page's "Stop this
// node" button (POST /chat/nodes/2/stop: a graceful stop, its tracker's
// Goodbye takes its presences off node 1 at once): ada's list drops bob
// within 5 s of the click (presence.Config.DownAfter would be 10 s). "Start
// this node" brings node 2 back on its address and store: bob's client
// reconnects with back-off and tracks him again, and ada's list shows him.
func TestChatPresenceNodeStopInBrowser(t *testing.T) {
	chromium := findChromium(t)
	url, _ := runDemo(t, buildDemo(t), "-chat")
	base := url[:strings.Index(url, "/chat")]
	browser := startChromium(t, chromium)
	ada := openTab(t, browser, "ada", base+"/chat?node=1&user=ada")
	bob := openTab(t, browser, "bob", base+"/chat?node=2&user=bob")
	both := func(s chatState) bool { return strings.Join(s.OnlineUsers, ",") == "ada,bob" }
	ada.until("ada and bob online", both)
	bob.until("ada and bob online", both)

	stopped := time.Now()
	bob.click("#stop-node")
	ada.untilBy(stopped.Add(5*time.Second), "bob gone from the online list within 5 s of node 2's stop",
		func(s chatState) bool { return strings.Join(s.OnlineUsers, ",") == "ada" })
	t.Logf("node 2 stopped: bob left ada's list after %v", time.Since(stopped).Round(time.Millisecond))
	bob.until("node 2's page not connected", func(s chatState) bool { return !s.Online })
	ada.shot("node-stop-1-bob-gone")

	sessions := bob.read().Sessions
	bob.click("#start-node")
	bob.until("reconnected to node 2 in a new session, both listed", func(s chatState) bool {
		return s.Online && s.Sessions > sessions && both(s)
	})
	ada.until("bob back in the online list", both)
	ada.shot("node-stop-2-bob-back")
	if s := ada.read(); len(s.Errors) > 0 {
		t.Fatalf("ada's page errors: %v", s.Errors)
	}
	if s := bob.read(); len(s.Errors) > 0 {
		t.Fatalf("bob's page errors: %v", s.Errors)
	}
}
