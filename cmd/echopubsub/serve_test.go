package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/internal/proc"
	"github.com/echopubsub/echopubsub/test"
)

// The tests here run the echopubsub binary as an operator would: three
// `echopubsub serve` processes on loopback with static membership, and the
// inspecting commands against them, in table and --json form.

const adminToken = "t0ken-for-tests"

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// binary builds the command once per test process.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "echopubsub-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "echopubsub")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// node is one serve process.
type node struct {
	p                  *proc.Proc
	addr, http, admin  string
	log                string
	publishing         bool
	adminURL           string
	stopped, continued bool
	clientArgs         []string // the commands' flags for this node (TLS)
}

// startCluster starts n nodes with static membership, durable topics room:*
// and a small producer buffer (bufferSize), and waits until each sees
// every peer registered. In a cluster of more than one, node 1 allows
// publishing (--admin-publish) and the others do not; a single node does not.
func startCluster(t *testing.T, n, bufferSize int) []*node {
	t.Helper()
	ports, err := proc.FreePorts(3 * n)
	if err != nil {
		t.Fatal(err)
	}
	var peers []string
	for i := 0; i < n; i++ {
		peers = append(peers, "127.0.0.1:"+strconv.Itoa(ports[3*i]))
	}
	return startNodes(t, ports, peers, bufferSize, "http", func(int) []string { return nil }, nil)
}

// startNodes starts a node on each peer address (with ports[3i+1] and
// ports[3i+2] for its HTTP and admin listeners), each with its extra
// arguments; the commands reach the admin endpoint with scheme and the
// client flags clientArgs.
func startNodes(t *testing.T, ports []int, peers []string, bufferSize int, scheme string, extra func(i int) []string, clientArgs []string) []*node {
	t.Helper()
	bin := binary(t)
	n := len(peers)
	dir := t.TempDir()
	nodes := make([]*node, n)
	for i := range nodes {
		nd := &node{addr: peers[i], http: "127.0.0.1:" + strconv.Itoa(ports[3*i+1]),
			admin: "127.0.0.1:" + strconv.Itoa(ports[3*i+2]), log: filepath.Join(dir, fmt.Sprintf("node%d.log", i+1)),
			publishing: i == 0 && n > 1}
		nd.adminURL = scheme + "://" + nd.admin
		nd.clientArgs = clientArgs
		args := []string{bin, "serve", "--node-listen", nd.addr, "--http-listen", nd.http, "--admin-listen", nd.admin,
			"--durable-topics", "room:*",
			"--store-path", filepath.Join(dir, fmt.Sprintf("store%d", i+1)), "--pubsub-buffer-size", strconv.Itoa(bufferSize),
			"--log-level", "info", "--shutdown-timeout", "10s"}
		if nd.publishing {
			args = append(args, "--admin-publish")
		}
		more := extra(i)
		if !slices.Contains(more, "--membership-kind") {
			args = append(args, "--membership-peers", strings.Join(peers, ","))
		}
		args = append(args, more...)
		p, err := proc.Start(context.Background(), proc.Spec{Name: fmt.Sprintf("node%d", i+1), Argv: args,
			Env: []string{"ECHOPUBSUB_ADMIN_TOKEN=" + adminToken}, Log: nd.log, Group: true})
		if err != nil {
			dumpLogs(t, nodes)
			t.Fatal(err)
		}
		nd.p = p
		nodes[i] = nd
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			if nd.stopped && !nd.continued {
				_ = nd.p.Signal(syscall.SIGCONT)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			if err := nd.p.Stop(ctx); err != nil {
				t.Errorf("%s: stop: %v", nd.p.Name(), err)
			}
			cancel()
		}
		if t.Failed() {
			dumpLogs(t, nodes)
		}
	})
	for _, nd := range nodes {
		test.Eventually(t, 30*time.Second, func() bool {
			var h echopubsub.Health
			if err := json.Unmarshal([]byte(run(t, nd, "peers", "--json").out), &h); err != nil || !h.Ready || len(h.Peers) != n-1 {
				return false
			}
			for _, p := range h.Peers {
				if !p.Registered {
					return false
				}
			}
			return true
		}, func() string { return nd.p.Name() + " does not see every peer registered: " + run(t, nd, "peers").out })
	}
	return nodes
}

func dumpLogs(t *testing.T, nodes []*node) {
	for _, nd := range nodes {
		if nd == nil {
			continue
		}
		b, _ := os.ReadFile(nd.log)
		t.Logf("--- %s log:\n%s", nd.log, b)
	}
}

type result struct {
	out, errOut string
	err         error
}

// run runs one inspecting command against nd's admin endpoint, with the
// token in the environment as in a node's container.
func run(t *testing.T, nd *node, args ...string) result {
	t.Helper()
	return runEnv(t, nd, []string{"ECHOPUBSUB_ADMIN_TOKEN=" + adminToken}, "", args...)
}

func runEnv(t *testing.T, nd *node, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), append(append(args, "--url", nd.adminURL), nd.clientArgs...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return result{out: out.String(), errOut: errOut.String(), err: err}
}

func mustRun(t *testing.T, nd *node, args ...string) string {
	t.Helper()
	r := run(t, nd, args...)
	if r.err != nil {
		t.Fatalf("echopubsub %s: %v\n%s%s", strings.Join(args, " "), r.err, r.out, r.errOut)
	}
	return r.out
}

// table parses an aligned table: the lines from the one starting with
// firstColumn, each cut at the header's column offsets. It fails the test
// when a cell does not start at its column (not aligned).
func table(t *testing.T, out, firstColumn string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, firstColumn+" ") {
			start = i
		}
	}
	if start < 0 {
		t.Fatalf("no table with column %s in:\n%s", firstColumn, out)
	}
	header := lines[start]
	var names []string
	var offs []int
	for i := 0; i < len(header); {
		j := i
		for j < len(header) && !(header[j] == ' ' && (j+1 >= len(header) || header[j+1] == ' ')) {
			j++
		}
		names, offs = append(names, header[i:j]), append(offs, i)
		for j < len(header) && header[j] == ' ' {
			j++
		}
		i = j
	}
	var rows []map[string]string
	for _, l := range lines[start+1:] {
		row := map[string]string{}
		for c, name := range names {
			if offs[c] > len(l) || (offs[c] > 0 && l[offs[c]-1] != ' ') {
				t.Fatalf("column %s not aligned in line %q of:\n%s", name, l, out)
			}
			end := len(l)
			if c+1 < len(offs) && offs[c+1] < end {
				end = offs[c+1]
			}
			row[name] = strings.TrimSpace(l[offs[c]:end])
		}
		rows = append(rows, row)
	}
	return rows
}

// tail runs `echopubsub tail` in the background; lines gets its stdout.
type tailProc struct {
	cmd   *exec.Cmd
	lines chan string
}

func startTail(t *testing.T, nd *node, args ...string) *tailProc {
	t.Helper()
	cmd := exec.Command(binary(t), append(append([]string{"tail"}, args...), "--url", nd.adminURL)...)
	cmd.Env = append(os.Environ(), "ECHOPUBSUB_ADMIN_TOKEN="+adminToken)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tp := &tailProc{cmd: cmd, lines: make(chan string, 1024)}
	go func() { // owned by the tail process: ends when its stdout closes
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			tp.lines <- sc.Text()
		}
		close(tp.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("tail stderr: %s", stderr.String())
		}
	})
	return tp
}

// next waits for the tail's next line that matches.
func (tp *tailProc) next(t *testing.T, timeout time.Duration, match func(string) bool, what string) string {
	t.Helper()
	deadline := time.After(timeout)
	var seen []string
	for {
		select {
		case l, ok := <-tp.lines:
			if !ok {
				t.Fatalf("tail ended waiting for %s; saw:\n%s", what, strings.Join(seen, "\n"))
			}
			if match(l) {
				return l
			}
			seen = append(seen, l)
		case <-deadline:
			t.Fatalf("no %s after %v; saw:\n%s", what, timeout, strings.Join(seen, "\n"))
		}
	}
}

func decodeLine(t *testing.T, l string) echopubsub.AdminLine {
	t.Helper()
	var line echopubsub.AdminLine
	if err := json.Unmarshal([]byte(l), &line); err != nil {
		t.Fatalf("tail line %q: %v", l, err)
	}
	return line
}

func lineKind(k string) func(string) bool {
	return func(l string) bool { return strings.Contains(l, `"kind":"`+k+`"`) }
}
