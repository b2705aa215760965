package modgraph

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// forbidden are modules only tools and tests outside the library need: an
// adopter's module graph must not list them.
var forbidden = []string{"github.com/nats-io/", "github.com/chromedp/", "github.com/jackc/pgx"}

// optional are the integrations the root package does not import (package
// gateway, package store/bolt): a program that imports only the root
// package must neither link them nor require them in its go.mod. They are
// still listed by go list -m all: the root module's go.mod requires them
// (its gateway and store/bolt packages), and module graph pruning keeps a
// dependency's own requirements in the graph.
var optional = []string{"go.etcd.io/bbolt", "github.com/coder/websocket"}

var goLine = regexp.MustCompile(`(?m)^go (\S+)\s*$`)

// TestAdopterModuleGraph builds, in a temporary directory, the module of a
// user who imports the root package (with a replace to this checkout),
// runs `go mod tidy` offline (from the module cache: GOPROXY=off), and
// checks `go list -m all`: no NATS, chromedp or pgx module; that the
// program links no bbolt or coder/websocket package and its go.mod requires
// neither; and that tidy kept the user's go line at the library's (no
// dependency asks for a newer Go).
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
				t.Errorf("an adopter's module graph lists %s (a tool's dependency, not the library's)", mod)
			}
		}
	}
	t.Logf("an adopter's module graph: %d modules (go %s)", len(mods), libGo)

	// What the adopter's program links, and what its tidied go.mod requires.
	pkgs := strings.Fields(run("list", "-deps", "-f", "{{if .Module}}{{.Module.Path}}{{end}}", "."))
	linked := map[string]bool{}
	for _, mod := range pkgs {
		linked[mod] = true
	}
	for _, o := range optional {
		if linked[o] {
			t.Errorf("a program importing only the root package links a package of %s", o)
		}
	}

	tidied, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range optional {
		if strings.Contains(string(tidied), o+" ") {
			t.Errorf("go mod tidy made the adopter's go.mod require %s:\n%s", o, tidied)
		}
	}
	if m := goLine.FindSubmatch(tidied); m == nil {
		t.Errorf("go mod tidy left the adopter's go.mod without a go line:\n%s", tidied)
	} else if string(m[1]) != libGo {
		t.Errorf("go mod tidy changed the adopter's go line from %s to %s: a dependency needs a newer Go than the library's go.mod says", libGo, m[1])
	}
}
