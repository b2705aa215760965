//go:build unix

package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestChatInBrowser builds the demo and runs `demo -chat` (two nodes in
// one process, each with its own store and gateway) and two headless
// Chromium tabs: ada on node 1, bob on node
// 2. It plays the README's chat story, asserting on what each page shows:
//
//  1. both online; ada's message reaches bob (across nodes) and every
//     message shown is acked (pending back to 0);
//  2. bob goes offline; ada sends three more;
//  3. bob comes back: the three are replayed from node 2's store, shown
//     once each, in order, marked as replayed, with the pending count
//     rising while the page is shown and back to 0 once it is acked.
//
// Screenshots land in test/artifacts/chat-*.png. Every wait polls the page
// with a deadline; none is a fixed sleep.
func TestChatInBrowser(t *testing.T) {
	chromium := findChromium(t)
	url, demo := runDemo(t, buildDemo(t), "-chat")
	base := url[:strings.Index(url, "/chat")]
	browser := startChromium(t, chromium)
	ada := openTab(t, browser, "ada", base+"/chat?node=1&user=ada")
	bob := openTab(t, browser, "bob", base+"/chat?node=2&user=bob")

	// 1. Both online, history loaded (empty); the empty page says what to
	// do and links the other user's page; a message crosses nodes.
	for _, p := range []*chatTab{ada, bob} {
		p.until("online, subscribed from the room's start", func(s chatState) bool { return s.Online && s.Subscribed })
	}
	if s := ada.read(); !strings.Contains(s.Hint, "Send") || !strings.Contains(s.Hint, "Go offline") || s.Peer != "/chat?node=2&user=bob" {
		t.Fatalf("ada's empty page does not say what to do: hint %q, link %q", s.Hint, s.Peer)
	}
	if s := bob.read(); s.Peer != "/chat?node=1&user=ada" {
		t.Fatalf("bob's empty page links %q, want ada's page", s.Peer)
	}
	ada.shot("0-empty-ada")
	ada.say("hello bob, from node 1")
	bob.until("ada's message", func(s chatState) bool { return s.has("hello bob, from node 1") && s.Pending == 0 })
	ada.until("own message echoed and acked, hint gone", func(s chatState) bool {
		return s.has("hello bob, from node 1") && s.Pending == 0 && s.Hint == ""
	})
	bob.say("hi ada, node 2 here")
	ada.until("bob's answer", func(s chatState) bool { return s.has("hi ada, node 2 here") && s.Pending == 0 })
	ada.shot("1-online-ada")
	bob.shot("1-online-bob")

	// 2. Bob offline; ada goes on.
	bob.click("#offline")
	bob.until("offline", func(s chatState) bool { return !s.Online })
	missed := []string{"bob, you are missing this", "and this", "and this one too"}
	for _, m := range missed {
		ada.say(m)
	}
	ada.until("three more shown", func(s chatState) bool { return s.has(missed[2]) && s.Pending == 0 })
	if s := bob.read(); s.has(missed[0]) {
		t.Fatalf("offline bob shows %q", missed[0])
	}
	ada.shot("2-bob-offline-ada")
	bob.shot("2-bob-offline-bob")

	// 3. Bob back: the missed messages come from node 2's store.
	bob.click("#online")
	s := bob.until("missed messages replayed and acked", func(s chatState) bool {
		return s.Online && s.Sessions == 2 && s.Replayed == len(missed) && s.Pending == 0
	})
	if s.Peak < len(missed) {
		t.Fatalf("peak pending %d: the replayed page (%d rows) was not pending while shown", s.Peak, len(missed))
	}
	var want, got []string
	for _, m := range ada.read().Messages {
		want = append(want, m.Text)
	}
	for _, m := range s.Messages {
		got = append(got, m.Text)
		replayedWanted := false
		for _, x := range missed {
			replayedWanted = replayedWanted || m.Text == x
		}
		if m.Replayed != replayedWanted {
			t.Fatalf("bob shows %q replayed=%v", m.Text, m.Replayed)
		}
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("bob shows %q, ada shows %q", got, want)
	}
	if len(s.Errors) > 0 {
		t.Fatalf("bob's page got error frames: %v", s.Errors)
	}
	ada.shot("3-bob-back-ada")
	bob.shot("3-bob-back-bob")

	// Ctrl-C stops the demo (sockets closed, nodes stopped, stores removed).
	stopDemo(t, demo)
	if !demo.ProcessState.Success() {
		t.Fatalf("demo -chat exited with %v", demo.ProcessState)
	}
}

// chatState is what the chat page (static/chat.js) shows and did.
type chatState struct {
	Online     bool   `json:"online"`
	Subscribed bool   `json:"subscribed"` // the room's subscription was confirmed
	Status     string `json:"status"`     // the client's state: connecting, open, reconnecting, disconnected
	Attempt    int    `json:"attempt"`    // reconnect attempts since the last session opened
	SessionID  string `json:"sessionId"`
	Sessions   int    `json:"sessions"` // sessions the client opened
	Pending    int    `json:"pending"`
	Peak       int    `json:"peak"`
	Replayed   int    `json:"replayed"`
	Cursor     uint64 `json:"cursor"`  // the room's last acked cursor
	Backlog    int    `json:"backlog"` // arrived, waiting for the handler
	Messages   []struct {
		ID       string `json:"id"`
		From     string `json:"from"`
		Text     string `json:"text"`
		Replayed bool   `json:"replayed"`
	} `json:"messages"`
	// Handled is every message the room's handler ran for, in order.
	Handled []struct {
		Cursor   uint64 `json:"cursor"`
		Text     string `json:"text"`
		Session  int    `json:"session"`
		Replayed bool   `json:"replayed"`
	} `json:"handled"`
	Published []struct {
		Text string `json:"text"`
	} `json:"published"` // chatSeries's messages, once the gateway took each
	Errors  []string `json:"errors"`
	Notices []string `json:"notices"`
	Hint    string   `json:"hint"` // the what-to-do box's text while it is shown
	Peer    string   `json:"peer"` // its link to the other user's page
	// OnlineUsers is the room's online list (the presence tracker's keys).
	OnlineUsers []string `json:"onlineUsers"`
}

func (s chatState) has(text string) bool {
	for _, m := range s.Messages {
		if m.Text == text {
			return true
		}
	}
	return false
}

type chatTab struct {
	t    *testing.T
	name string
	ctx  context.Context
}

func startChromium(t *testing.T, chromium string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		// Two tabs side by side must both run their timers and
		// animation frames (the page acks after it painted).
		chromedp.Flag("disable-background-timer-throttling", true), chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1100, 800))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() { cancel(); cancelAlloc() })
	return ctx
}

func openTab(t *testing.T, browser context.Context, name, url string) *chatTab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1100, 800), chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	return &chatTab{t: t, name: name, ctx: ctx}
}

func (p *chatTab) tryRead() (chatState, error) {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.chatState ? window.chatState() : "{}"`))
	if err != nil {
		return chatState{}, err
	}
	var s chatState
	return s, json.Unmarshal([]byte(raw), &s)
}

func (p *chatTab) read() chatState {
	p.t.Helper()
	s, err := p.tryRead()
	if err != nil {
		p.t.Fatalf("%s: read page: %v", p.name, err)
	}
	return s
}

// until polls the page (every 100 ms) until cond holds; after 30 s it
// fails with the page's last state and a screenshot.
func (p *chatTab) until(what string, cond func(chatState) bool) chatState {
	p.t.Helper()
	return p.untilBy(time.Now().Add(30*time.Second), what, cond)
}

// untilBy is until with the test's own deadline.
func (p *chatTab) untilBy(deadline time.Time, what string, cond func(chatState) bool) chatState {
	p.t.Helper()
	for {
		s, err := p.tryRead()
		if err == nil && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			p.shot("failed-" + p.name)
			b, _ := json.MarshalIndent(s, "", "  ")
			p.t.Fatalf("%s: page never showed %q (read error %v); last state:\n%s", p.name, what, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *chatTab) click(sel string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		p.t.Fatalf("%s: click %s: %v", p.name, sel, err)
	}
}

// say types text and sends it, then waits until the page shows it (it
// comes back through the room, acked).
func (p *chatTab) say(text string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#text"), text), chromedp.Click(chromedp.CSS("#send button"))); err != nil {
		p.t.Fatalf("%s: say %q: %v", p.name, text, err)
	}
	p.until(fmt.Sprintf("own message %q", text), func(s chatState) bool { return s.has(text) })
}

func (p *chatTab) shot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	dir := filepath.Join(repoRoot, "test", "artifacts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "chat-"+name+".png"), png, 0o644); err != nil {
		p.t.Errorf("save screenshot: %v", err)
	}
}
