package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/cluster/consul"
	"github.com/echopubsub/echopubsub/internal/proc"
)

// ConsulVersion is the Consul the tests run against (built by .ci/deps).
const ConsulVersion = "1.14.11"

// ConsulBinary is the Consul agent the tests run: $ECHOPUBSUB_CONSUL, else
// the cache .ci/deps builds into. It fails the test, never skips it, when
// the binary is missing.
func ConsulBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("ECHOPUBSUB_CONSUL")
	from := "ECHOPUBSUB_CONSUL"
	if bin == "" {
		cache := os.Getenv("ECHOPUBSUB_CACHE")
		if cache == "" {
			base := os.Getenv("XDG_CACHE_HOME")
			if base == "" {
				home, _ := os.UserHomeDir()
				base = filepath.Join(home, ".cache")
			}
			cache = filepath.Join(base, "echopubsub")
		}
		bin, from = filepath.Join(cache, "consul-"+ConsulVersion), "the default cache path"
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		t.Fatalf("consul %s not found at %s (from %s): run `make test`, which builds it once into the cache "+
			"and exports ECHOPUBSUB_CONSUL", ConsulVersion, bin, from)
	}
	return bin
}

// ConsulAgent is a `consul agent -dev` on free loopback ports, owned by one
// test. It can be stopped and started again on the same ports; each start
// gets a fresh data directory, so a restarted agent knows nothing (as a dev
// agent without storage): clients must register again.
type ConsulAgent struct {
	// Addr is the HTTP API address (host:port), fixed for the agent's life.
	Addr string

	bin     string
	dir     string
	ports   map[string]int
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	logFile string
	starts  int
}

// NewConsulAgent picks the ports of an agent without starting it (Start
// does): until then its address refuses connections, as a Consul that is
// down would. The agent is stopped when the test ends.
func NewConsulAgent(t testing.TB) *ConsulAgent {
	t.Helper()
	a := &ConsulAgent{bin: ConsulBinary(t), dir: t.TempDir(), ports: map[string]int{}}
	names := []string{"http", "serf-lan", "serf-wan", "server"}
	ports := FreePorts(t, len(names))
	for i, name := range names {
		a.ports[name] = ports[i]
	}
	a.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(a.ports["http"]))
	t.Cleanup(func() { a.Stop(t) })
	return a
}

// StartConsulAgent starts a new agent and waits until it has a leader.
func StartConsulAgent(t testing.TB) *ConsulAgent {
	t.Helper()
	a := NewConsulAgent(t)
	a.Start(t)
	return a
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePorts(t, 1)[0]
}

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago (see proc.FreePorts).
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := proc.FreePorts(n)
	if err != nil {
		t.Fatalf("free ports: %v", err)
	}
	return ports
}

// Start starts the agent (again, after Stop) on its ports and waits until
// it has elected itself leader and serves its catalog.
func (a *ConsulAgent) Start(t testing.TB) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd != nil {
		t.Fatalf("consul agent on %s already running", a.Addr)
	}
	a.starts++
	a.logFile = filepath.Join(a.dir, fmt.Sprintf("consul-%d.log", a.starts))
	out, err := os.Create(a.logFile)
	if err != nil {
		t.Fatalf("consul log: %v", err)
	}
	defer out.Close() // the child has its own descriptor
	p := func(name string) string { return strconv.Itoa(a.ports[name]) }
	cmd := exec.Command(a.bin, "agent", "-dev", "-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-node", "echopubsub-test", "-data-dir", filepath.Join(a.dir, fmt.Sprintf("data-%d", a.starts)), "-log-level", "info",
		"-http-port", p("http"), "-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
		"-serf-lan-port", p("serf-lan"), "-serf-wan-port", p("serf-wan"), "-server-port", p("server"))
	cmd.Stdout, cmd.Stderr = out, out // *os.File: no copying goroutine
	if err := cmd.Start(); err != nil {
		t.Fatalf("start consul %s: %v", a.bin, err)
	}
	a.cmd = cmd
	a.exited = make(chan struct{})
	go func(exited chan struct{}) { _ = cmd.Wait(); close(exited) }(a.exited) // ends with the process
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	ready := proc.Until(20*time.Second, 20*time.Millisecond, func() bool {
		select {
		case <-a.exited:
			a.cmd = nil
			t.Fatalf("consul agent on %s exited while starting:\n%s", a.Addr, a.tail())
		default:
		}
		return a.ready(client)
	})
	if !ready {
		t.Fatalf("consul agent on %s not ready after 20s:\n%s", a.Addr, a.tail())
	}
}

// ready: a leader is elected and the agent's own node is in the catalog
// (registrations made before that would wait for anti-entropy).
func (a *ConsulAgent) ready(client *http.Client) bool {
	get := func(path string) string {
		resp, err := client.Get("http://" + a.Addr + path)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	leader := get("/v1/status/leader")
	if leader == "" || leader == `""` {
		return false
	}
	return strings.Contains(get("/v1/catalog/nodes"), `"echopubsub-test"`)
}

// Stop kills the agent (a crash, not a graceful leave) and waits for it to
// exit. Idempotent.
func (a *ConsulAgent) Stop(t testing.TB) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Kill()
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
		t.Errorf("consul agent on %s did not exit within 10s of SIGKILL", a.Addr)
	}
	a.cmd = nil
}

// Running reports whether the agent process is up.
func (a *ConsulAgent) Running() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cmd != nil
}

// Log returns the current (or last) run's agent output, for failure
// messages.
func (a *ConsulAgent) Log() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tail()
}

func (a *ConsulAgent) tail() string {
	b, err := os.ReadFile(a.logFile)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// HealthyInstances counts the passing instances of service in the agent's
// catalog (0 when the agent is down).
func (a *ConsulAgent) HealthyInstances(service string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.Addr+"/v1/health/service/"+service+"?passing=1", nil)
	if err != nil {
		return 0
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var entries []struct{ Service struct{ ID string } }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&entries) != nil {
		return 0
	}
	return len(entries)
}

// FastConsulConfig is a Consul membership configuration with test-sized
// timings: TTL 1s refreshed every 200ms, backoff 20ms..200ms, a 1s
// recovery grace.
func FastConsulConfig(addr string) consul.Config {
	return consul.Config{
		Address: addr, TTL: time.Second, RefreshInterval: 200 * time.Millisecond,
		RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		WaitTime: 5 * time.Second, RequestTimeout: time.Second, RecoveryGrace: time.Second,
	}
}

// CheckStatus returns the status ("passing", "critical", ...) of every
// health check of service's instances that has one, by service ID (nil when
// the agent is down). An instance listed as critical is still registered:
// its TTL lapsed, nobody deregistered it.
func (a *ConsulAgent) CheckStatus(service string) map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.Addr+"/v1/health/checks/"+service, nil)
	if err != nil {
		return nil
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var checks []struct{ ServiceID, Status string }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&checks) != nil {
		return nil
	}
	out := map[string]string{}
	for _, c := range checks {
		out[c.ServiceID] = c.Status
	}
	return out
}
