//go:build unix

// Package demo tests the ScoreBoard demo (./cmd/demo of the library's
// module) from the outside: built, run as real processes, and driven over
// HTTP and in headless Chromium. It lives in the test/e2e module so that
// chromedp stays out of the library's module graph.
package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/echopubsub/echopubsub/internal/proc"
)

// TestScoreBoardInBrowser builds the demo, runs it as real processes (the
// demo and one process per node), opens its page in headless Chromium and
// plays the story of the README, asserting on what the page says:
//
//  1. all nodes show the true score ("Converged");
//  2. node 2 goes offline: its board freezes while goals keep coming, and
//     the orange box counts what its peers hold for it;
//  3. back online: the held messages are replayed (not reloaded) and the
//     boards converge;
//  4. offline again and a burst past the buffer: the box turns red;
//  5. back online: node 2 is told CursorExpired, reloads from the source of
//     truth, and the boards converge.
//
// Then Ctrl-C (SIGINT) must stop the demo and every node process. A
// screenshot of each stage lands in test/artifacts/. Every wait polls the
// page with a deadline; none is a fixed sleep.
func TestScoreBoardInBrowser(t *testing.T) {
	chromium := findChromium(t)
	bin := buildDemo(t)
	url, demo := runDemo(t, bin)
	b := openBrowser(t, chromium, url)

	// 1. Kick-off: every node follows the match.
	s := b.until("every node shows the true score", 60*time.Second, func(s pageState) bool {
		return s.Truth >= 1 && s.converged() && s.allAt(s.Truth)
	})
	b.noGaps(s)
	b.shot("1-converged")

	// 2. Node 2 offline: frozen column, orange count rising. Once a peer
	// holds a message for it, nothing reaches its board: it must not move
	// while the count rises.
	b.click(`#node-2 button[data-action="offline"]`)
	s = b.until("node 2 offline and missing a goal", 30*time.Second, func(s pageState) bool {
		n := s.node(2)
		return n.Link == "OFFLINE" && n.Held >= 1 && n.Goal < s.Truth
	})
	frozen, reloads, replayed := s.node(2).Goal, s.node(2).Reloads, s.node(2).Replayed
	s = b.until("node 2 offline with at least 2 messages held (orange)", 30*time.Second, func(s pageState) bool {
		n := s.node(2)
		return n.Held >= 2 && strings.Contains(n.HeldClass, "orange") && strings.HasPrefix(s.Converged, "Diverged")
	})
	if got := s.node(2).Goal; got != frozen {
		t.Fatalf("node 2 is offline but its board moved from goal #%d to #%d", frozen, got)
	}
	b.shot("2-offline-buffering")

	// 3. Back online: replayed in order, not reloaded.
	b.click(`#node-2 button[data-action="online"]`)
	s = b.until("node 2 back online, backlog replayed, boards converged", 45*time.Second, func(s pageState) bool {
		n := s.node(2)
		return n.Link == "ONLINE" && n.Held == 0 && n.Replayed > replayed && s.converged() && s.allAt(s.Truth)
	})
	if n := s.node(2); n.Reloads != reloads || !strings.Contains(n.Recent, "replayed") {
		t.Fatalf("node 2 should have caught up by replay alone: reloads %d -> %d, recent %q", reloads, n.Reloads, n.Recent)
	}
	b.noGaps(s)
	b.shot("3-replayed-converged")

	// 4. Offline again, then a burst past the buffer: red.
	b.click(`#node-2 button[data-action="offline"]`)
	b.until("node 2 offline again", 30*time.Second, func(s pageState) bool { return s.node(2).Link == "OFFLINE" })
	b.click(`#burst`)
	b.until("node 2's box red: more held than the buffer", 45*time.Second, func(s pageState) bool {
		n := s.node(2)
		return strings.Contains(n.HeldClass, "red") && strings.Contains(n.HeldLabel, "lost its place")
	})
	b.shot("4-overflow-red")

	// 5. Back online: told it fell behind, reloads, converges.
	b.click(`#node-2 button[data-action="online"]`)
	s = b.until("node 2 told CursorExpired, reloaded from the source of truth, boards converged", 45*time.Second, func(s pageState) bool {
		n := s.node(2)
		return n.Reloads > reloads && strings.Contains(n.Expiry, "Reloaded from the source of truth") &&
			!strings.Contains(n.HeldClass, "red") && s.converged() && s.allAt(s.Truth)
	})
	b.noGaps(s)
	b.shot("5-reloaded-converged")

	// The page links every node's metrics: node 2's show the expiry it was
	// told and its peers' view of it, in Prometheus's text format.
	metrics := get(t, url+"api/nodes/2/metrics")
	for _, want := range []string{"echopubsub_cursor_expired_received_total", "echopubsub_peer_lag", "messaging_client_consumed_messages_total"} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("node 2's /metrics has no %s:\n%.2000s", want, metrics)
		}
	}
	if h := get(t, url+"api/nodes/1/health"); !strings.Contains(h, `"ready":true`) {
		t.Fatalf("node 1 not ready once converged: %s", h)
	}

	// Ctrl-C stops the demo and every node process.
	pids := s.pids(t)
	stopDemo(t, demo)
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("node process %d still exists after the demo stopped (kill -0: %v)", pid, err)
		}
	}
}

// pageState is what the page shows, read from its DOM text.
type pageState struct {
	Converged string      `json:"converged"`
	Truth     uint64      `json:"truth"`
	Nodes     []nodeState `json:"nodes"`
}

type nodeState struct {
	ID        string `json:"id"`
	Link      string `json:"link"`
	Addr      string `json:"addr"`
	Goal      uint64 `json:"goal"`
	Held      uint64 `json:"held"`
	HeldClass string `json:"heldClass"`
	HeldLabel string `json:"heldLabel"`
	Status    string `json:"status"`
	Expiry    string `json:"expiry"`
	Replayed  uint64 `json:"replayed"`
	Reloads   uint64 `json:"reloads"`
	Gaps      uint64 `json:"gaps"`
	Recent    string `json:"recent"`
}

const readPage = `JSON.stringify({
  converged: document.querySelector("#converged").textContent,
  truth: +document.querySelector("#truth-goal").textContent,
  nodes: [...document.querySelectorAll(".node")].map((c) => {
    const q = (s) => c.querySelector(s);
    return {
      id: c.id, link: q(".link").textContent, addr: q(".addr").textContent,
      goal: +q(".goal-num").textContent, held: +q(".held-count").textContent,
      heldClass: q(".held").className, heldLabel: q(".held-label").textContent,
      status: q(".status").textContent, expiry: q(".expiry").hidden ? "" : q(".expiry").textContent,
      replayed: +q(".replayed").textContent, reloads: +q(".reloads").textContent,
      gaps: +q(".gaps").textContent, recent: q(".recent").textContent,
    };
  }),
})`

func (s pageState) converged() bool { return strings.HasPrefix(s.Converged, "✓ Converged") }

func (s pageState) node(i int) nodeState {
	for _, n := range s.Nodes {
		if n.ID == fmt.Sprintf("node-%d", i) {
			return n
		}
	}
	return nodeState{}
}

func (s pageState) allAt(goal uint64) bool {
	if len(s.Nodes) != 3 {
		return false
	}
	for _, n := range s.Nodes {
		if n.Goal != goal {
			return false
		}
	}
	return true
}

var pidRE = regexp.MustCompile(`pid (\d+)`)

func (s pageState) pids(t *testing.T) []int {
	var out []int
	for _, n := range s.Nodes {
		m := pidRE.FindStringSubmatch(n.Addr)
		if m == nil {
			t.Fatalf("%s shows no pid: %q", n.ID, n.Addr)
		}
		pid, _ := strconv.Atoi(m[1])
		out = append(out, pid)
	}
	return out
}

// browser drives one page.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string // screenshots
}

func openBrowser(t *testing.T, chromium, url string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1440, 1000), chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s in chromium: %v", url, err)
	}
	dir := filepath.Join(repoRoot, "test", "artifacts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, ctx: ctx, dir: dir}
}

func (b *browser) read() (pageState, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](readPage))
	if err != nil {
		return pageState{}, err
	}
	var s pageState
	return s, json.Unmarshal([]byte(raw), &s)
}

// until polls the page until cond holds, and fails the test at the
// deadline with what the page showed last (and a screenshot of it).
func (b *browser) until(what string, timeout time.Duration, cond func(pageState) bool) pageState {
	b.t.Helper()
	var s pageState
	var err error
	if !proc.Until(timeout, 200*time.Millisecond, func() bool { s, err = b.read(); return err == nil && cond(s) }) {
		b.shot("failed")
		last, _ := json.MarshalIndent(s, "", "  ")
		b.t.Fatalf("page never showed %q within %v (read error: %v); last state:\n%s", what, timeout, err, last)
	}
	return s
}

func (b *browser) click(sel string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		b.t.Fatalf("click %s: %v", sel, err)
	}
}

func (b *browser) shot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(b.dir, "scoreboard-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Errorf("save %s: %v", path, err)
	}
}

// noGaps checks the guarantee's other half on every node.
func (b *browser) noGaps(s pageState) {
	b.t.Helper()
	for _, n := range s.Nodes {
		if n.Gaps != 0 {
			b.t.Fatalf("%s reports %d silent gaps", n.ID, n.Gaps)
		}
	}
}

// findChromium fails (never skips) when Debian's chromium is missing.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	t.Fatal("chromium is not installed: run `make test`, whose setup (.ci/deps) installs it")
	return ""
}

// repoRoot is the repository's root (the library's module), from this
// package's directory, where `go test` runs it.
var repoRoot = filepath.Join("..", "..", "..")

// buildDemo builds ./cmd/demo (a module of its own) from the repository's
// root, through its go.work, as `go run ./cmd/demo` does there: the test
// runs the real demo, with the demo module's dependency versions (not this
// module's).
func buildDemo(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found to build the demo: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "demo")
	cmd := exec.Command(gobin, "build", "-o", bin, "./cmd/demo")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/demo: %v\n%s", err, out)
	}
	return bin
}

// runDemo starts the demo on a free port and returns the URL it prints.
func runDemo(t *testing.T, bin string, args ...string) (string, *exec.Cmd) {
	t.Helper()
	return runDemoTo(t, bin, os.Stderr, args...)
}

// runDemoTo is runDemo with the demo's stderr (and its nodes') going to
// stderr.
func runDemoTo(t *testing.T, bin string, stderr io.Writer, args ...string) (string, *exec.Cmd) {
	t.Helper()
	// A goal every 3 s leaves 15 s before node 2's 5-message buffer
	// overflows: room for a loaded CI machine between "offline" and the
	// replay, which waits for protoactor's reconnect. (The chat demo scores
	// no goals, and refuses the ScoreBoard's flags.)
	flags := []string{"-port", "0", "-goal-every", "3s"}
	if slices.Contains(args, "-chat") {
		flags = flags[:2]
	}
	cmd := exec.Command(bin, append(flags, args...)...)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start demo: %v", err)
	}
	t.Cleanup(func() { stopDemo(t, cmd) })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if i := strings.Index(sc.Text(), "http://127.0.0.1:"); i >= 0 {
				select {
				case urls <- strings.Fields(sc.Text()[i:])[0]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case u := <-urls:
		return u, cmd
	case <-time.After(60 * time.Second):
		t.Fatal("the demo printed no URL within 60s")
		return "", nil
	}
}

// stopDemo sends Ctrl-C's signal and waits for the demo to exit. Idempotent.
func stopDemo(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("demo exit after Ctrl-C: %v", err)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("demo did not stop within 20s of Ctrl-C: killed")
	}
}

// get fetches url and returns its body; it fails the test on an error or a
// status other than 200.
func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v: %s", url, res.StatusCode, err, b)
	}
	return string(b)
}
