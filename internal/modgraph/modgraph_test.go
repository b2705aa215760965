package modgraph

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// forbidden are modules a program that imports only the root package must
// not have in its module graph: tools' and tests' dependencies (NATS,
// chromedp), and the integrations that are modules of their own
// (gateway: coder/websocket; store/bolt: bbolt; store/postgres: pgx), with
// those modules themselves.
var forbidden = []string{"github.com/nats-io/", "github.com/chromedp/", "github.com/jackc/pgx",
	"go.etcd.io/bbolt", "github.com/coder/websocket", "github.com/echopubsub/echopubsub/"}

var goLine = regexp.MustCompile(`(?m)^go (\S+)\s*$`)

// TestAdopterModuleGraph builds, in a temporary directory, the module of a
// user who imports the root package (with a replace to this checkout),
// runs `go mod tidy` offline (from the module cache: GOPROXY=off), and
// checks `go list -m all`: none of the forbidden modules (so the program
// neither links nor downloads them); and that tidy kept the user's go line
// at the library's (no dependency asks for a newer Go).
func TestAdopterModuleGraph(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found: %v", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := goLine.FindSubmatch(gomod)
	if m == nil {
		t.Fatalf("no go line in %s/go.mod", root)
	}
	libGo := string(m[1])
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/adopter\n\ngo " + libGo + "\n\n" +
			"require github.com/echopubsub/echopubsub v0.0.0\n\n" +
			"replace github.com/echopubsub/echopubsub => " + root + "\n",
		"go.sum":  string(sum), // the library's checksums: nothing is fetched or looked up
		"main.go": "package main\n\nimport _ \"github.com/echopubsub/echopubsub\"\n\nfunc main() {}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Offline first (GOPROXY=off: the module cache the library's own build
	// filled); on a machine whose cache lacks a go.mod the graph needs, once
	// more with the environment's proxy.
	proxy := "GOPROXY=off"
	run := func(args ...string) string {
		t.Helper()
		for {
			cmd := exec.Command(gobin, args...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
			if proxy != "" {
				cmd.Env = append(cmd.Env, proxy)
			}
			out, err := cmd.CombinedOutput()
			if err == nil {
				return string(out)
			}
			if proxy != "" && strings.Contains(string(out), "GOPROXY=off") {
				t.Logf("go %s offline: %s; trying the environment's GOPROXY", strings.Join(args, " "), strings.TrimSpace(string(out)))
				proxy = ""
				continue
			}
			t.Fatalf("go %s (in %s, %s): %v\n%s", strings.Join(args, " "), dir, proxy, err, out)
		}
	}
	run("mod", "tidy")
	// -e: offline, a module whose .info (its date) is not in the cache is
	// listed with an error instead of failing the listing.
	mods := strings.Fields(run("list", "-m", "-e", "-f", "{{.Path}}", "all"))
	for _, mod := range mods {
		for _, f := range forbidden {
			if strings.HasPrefix(mod, f) {
				t.Errorf("an adopter's module graph lists %s: a program that imports only the root package must not need it", mod)
			}
		}
	}
	t.Logf("an adopter's module graph: %d modules (go %s)", len(mods), libGo)

	tidied, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if m := goLine.FindSubmatch(tidied); m == nil {
		t.Errorf("go mod tidy left the adopter's go.mod without a go line:\n%s", tidied)
	} else if string(m[1]) != libGo {
		t.Errorf("go mod tidy changed the adopter's go line from %s to %s: a dependency needs a newer Go than the library's go.mod says", libGo, m[1])
	}
}
