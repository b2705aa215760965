package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/echopubsub/echopubsub/internal/proc"
)

// TestServeClusterInBrowser: a browser app uses a cluster of two
// `echopubsub serve` nodes through the gateway's JavaScript client, with
// no Go of its own: the page (served from another origin, allowed by
// gateway.origins) subscribes to a durable topic on node 1 from its
// start; messages published through node 2 (echopubsub publish) reach it
// in order, the stored one first, then caught_up, then the live ones.
func TestServeClusterInBrowser(t *testing.T) {
	chromium := findChromium(t)
	bin := buildServe(t)
	ports, err := proc.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	peers := addr(0) + "," + addr(3)
	dir := t.TempDir()
	const token = "browser-test-token"
	for i := 0; i < 2; i++ {
		args := []string{bin, "serve", "--node-listen", addr(3 * i), "--http-listen", addr(3*i + 1),
			"--admin-listen", addr(3*i + 2), "--membership-peers", peers, "--durable-topics", "room:*",
			"--store-path", filepath.Join(dir, fmt.Sprintf("store%d", i)), "--gateway-origins", "127.0.0.1:*", "--admin-publish"}
		p, err := proc.Start(context.Background(), proc.Spec{Name: fmt.Sprintf("node%d", i+1), Argv: args,
			Env: []string{"ECHOPUBSUB_ADMIN_TOKEN=" + token}, Log: filepath.Join(dir, fmt.Sprintf("node%d.log", i+1)), Group: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := p.Stop(ctx); err != nil {
				t.Errorf("%s: stop: %v", p.Name(), err)
			}
		})
	}
	publish := func(text string) {
		t.Helper()
		cmd := exec.Command(bin, "publish", "room:1", text, "--url", "http://"+addr(5))
		cmd.Env = append(os.Environ(), "ECHOPUBSUB_ADMIN_TOKEN="+token)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("echopubsub publish: %v\n%s", err, out)
		}
	}
	// Both nodes ready, each with the other registered: node 1's readiness
	// and node 2's view of node 1 (so that what node 2 publishes goes there).
	if !proc.Until(30*time.Second, 100*time.Millisecond, func() bool {
		return ready(addr(1)) && ready(addr(4)) && peerRegistered(bin, addr(5), token, addr(0))
	}) {
		t.Fatal("the two nodes are not ready with each other registered after 30s")
	}
	publish("stored") // before the page: it comes from node 1's store

	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/echopubsub.js" { // the client, as node 1 serves it
			resp, err := http.Get("http://" + addr(1) + "/echopubsub.js")
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			w.Header().Set("Content-Type", "text/javascript")
			_, _ = io.Copy(w, resp.Body)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, servePage, "ws://"+addr(1)+"/ws")
	}))
	defer page.Close()
	browser := startChromium(t, chromium)
	tab := openTab(t, browser, "app", page.URL)
	state := func() (s struct {
		Subscribed bool     `json:"subscribed"`
		Got        []string `json:"got"`
		Notices    []string `json:"notices"`
		Errors     []string `json:"errors"`
	}) {
		ctx, cancel := context.WithTimeout(tab.ctx, 5*time.Second)
		defer cancel()
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.appState ? window.appState() : "{}"`))
		if err == nil {
			_ = json.Unmarshal([]byte(raw), &s)
		}
		return s
	}
	waitPage := func(what string, cond func() bool) {
		t.Helper()
		if !proc.Until(30*time.Second, 100*time.Millisecond, cond) {
			t.Fatalf("page: no %s after 30s: %+v", what, state())
		}
	}
	waitPage("caught_up after the stored row", func() bool {
		s := state()
		return s.Subscribed && strings.Join(s.Got, ",") == "stored" && strings.Join(s.Notices, ",") == "caught_up"
	})
	for _, m := range []string{"live1", "live2", "live3"} {
		publish(m)
	}
	waitPage("the live messages in order", func() bool {
		return strings.Join(state().Got, ",") == "stored,live1,live2,live3"
	})
	if s := state(); len(s.Errors) != 0 || strings.Join(s.Notices, ",") != "caught_up" {
		t.Errorf("page: errors %v, notices %v", s.Errors, s.Notices)
	}
}

// servePage is the browser app: the gateway's client, one subscription.
const servePage = `<!doctype html><meta charset="utf-8"><title>serve app</title>
<script type="module">
import { GatewayClient } from "/echopubsub.js";
const got = [], notices = [], errors = [];
let subscribed = false;
const client = new GatewayClient(%q, {
  onNotice: (n) => notices.push(n.kind),
  onError: (e) => errors.push(String(e)),
});
const sub = client.subscribe("room:1", async (msg) => { got.push(msg.payload); }, { from: 0 });
client.connect();
sub.then(() => { subscribed = true; }, (e) => errors.push(String(e)));
window.appState = () => JSON.stringify({ subscribed, got, notices, errors });
</script>`

// buildServe builds ./cmd/echopubsub from the repository's root, through
// its go.work, as buildDemo does the demo.
func buildServe(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "echopubsub")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/echopubsub")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/echopubsub: %v\n%s", err, out)
	}
	return bin
}

func ready(httpAddr string) bool {
	resp, err := http.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// peerRegistered reports whether `echopubsub peers --json` on the admin
// endpoint at admin lists peer registered.
func peerRegistered(bin, admin, token, peer string) bool {
	cmd := exec.Command(bin, "peers", "--json", "--url", "http://"+admin)
	cmd.Env = append(os.Environ(), "ECHOPUBSUB_ADMIN_TOKEN="+token)
	out, err := cmd.Output()
	if err != nil {
		return false
	}
	var h struct {
		Peers []struct {
			Node       string `json:"node"`
			Registered bool   `json:"registered"`
		} `json:"peers"`
	}
	if json.Unmarshal(out, &h) != nil {
		return false
	}
	for _, p := range h.Peers {
		if p.Node == peer && p.Registered {
			return true
		}
	}
	return false
}
