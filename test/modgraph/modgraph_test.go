package modgraph

import (
	"encoding/json"
	"io/fs"
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
// neither links nor downloads them); that tidy kept the user's go line at
// the library's (no dependency asks for a newer Go); and that the root
// go.mod requires no module that only the library's tests use (every
// require is in every adopter's graph): see testOnlyRequires.
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

	for _, r := range testOnlyRequires(t, gobin, root) {
		t.Errorf("the root go.mod requires %s, which only tests use (go mod tidy of the module without its _test.go files drops it): "+
			"every adopter's module graph would carry it; move the tests that need it to a test module (test/e2e, test/modgraph)", r)
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
	run := func(args ...string) string {
		t.Helper()
		return goOffline(t, gobin, dir, args...)
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

// goOffline runs the go command in dir against its own go.mod: offline
// first (GOPROXY=off: the module cache the library's own build filled); on
// a machine whose cache lacks a go.mod the graph needs, once more with the
// environment's proxy.
func goOffline(t *testing.T, gobin, dir string, args ...string) string {
	t.Helper()
	proxy := "GOPROXY=off"
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

// requires lists the module paths the go.mod in dir requires.
func requires(t *testing.T, gobin, dir string) []string {
	t.Helper()
	var mod struct{ Require []struct{ Path string } }
	if err := json.Unmarshal([]byte(goOffline(t, gobin, dir, "mod", "edit", "-json")), &mod); err != nil {
		t.Fatalf("go mod edit -json in %s: %v", dir, err)
	}
	var paths []string
	for _, r := range mod.Require {
		paths = append(paths, r.Path)
	}
	return paths
}

// testOnlyRequires returns the requires of the root go.mod that only its
// tests use, derived, not listed: it copies the root module without its
// _test.go files (and without the nested modules, which are not in it)
// into a temporary directory, runs go mod tidy there, and returns each
// module the root go.mod requires that the tidied copy does not. Tidy
// keeps every module that builds a package of the module on any platform
// (and those the pruned module graph needs): what is left out is there
// for tests alone.
func testOnlyRequires(t *testing.T, gobin, root string) []string {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module
			}
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		if !d.Type().IsRegular() || strings.HasSuffix(d.Name(), "_test.go") || rel == "go.work" || rel == "go.work.sum" {
			return nil
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), body, 0o644)
	})
	if err != nil {
		t.Fatalf("copying the root module without its tests: %v", err)
	}
	goOffline(t, gobin, dir, "mod", "tidy")
	kept := map[string]bool{}
	for _, p := range requires(t, gobin, dir) {
		kept[p] = true
	}
	var extra []string
	all := requires(t, gobin, root)
	for _, p := range all {
		if !kept[p] {
			extra = append(extra, p)
		}
	}
	t.Logf("the root go.mod: %d requires, %d of them for tests only", len(all), len(extra))
	return extra
}
