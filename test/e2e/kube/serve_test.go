// Package kube tests deploy/Dockerfile and deploy/kubernetes against the
// program they run: the manifests decode strictly into the Kubernetes API
// types, and their probes, ports, settings and grace period agree with
// what `echopubsub serve` exposes, read off the binary the Dockerfile's
// build command makes (`serve --help`) and off a node started with the
// manifests' configuration.
package kube

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// repoRoot is the repository's root, from this package's directory.
var repoRoot = filepath.Join("..", "..", "..")

var (
	buildOnce sync.Once
	buildDir  string
	builtBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// serveBinary is echopubsub built once per run with the Dockerfile's own
// build command (its environment and flags; the output in a temporary
// directory).
func serveBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		var stages []stage
		if stages, buildErr = parseDockerfile(filepath.Join(repoRoot, "deploy", "Dockerfile")); buildErr != nil {
			return
		}
		var b goBuild
		if b, buildErr = findGoBuild(stages); buildErr != nil {
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "kube-serve-"); buildErr != nil {
			return
		}
		builtBin, buildErr = b.build(buildDir)
	})
	if buildErr != nil {
		t.Fatalf("build echopubsub as deploy/Dockerfile does: %v", buildErr)
	}
	return builtBin
}

// flag is one of serve's flags as `serve --help` prints it.
type flag struct {
	env, def, usage string
	hasDef          bool
}

// flags are serve's flags by name (without the dashes), and the names of
// their environment variables.
type flags struct {
	byName map[string]flag
	byEnv  map[string]string // ECHOPUBSUB_X -> flag name
}

var (
	flagLine = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)(?: [a-z]+)?\s{2,}(.*)$`)
	envRef   = regexp.MustCompile(`\((ECHOPUBSUB_[A-Z0-9_]+)\)`)
	defRef   = regexp.MustCompile(`\(default "?([^")]*)"?\)$`)
)

// serveFlags runs `bin serve --help` and reads its flags section.
func serveFlags(t *testing.T, bin string) flags {
	t.Helper()
	out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s serve --help: %v\n%s", bin, err, out)
	}
	fs := flags{byName: map[string]flag{}, byEnv: map[string]string{}}
	in := false
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case line == "Flags:":
			in = true
			continue
		case in && strings.TrimSpace(line) == "":
			in = false
		}
		m := flagLine.FindStringSubmatch(line)
		if !in || m == nil || m[1] == "help" {
			continue
		}
		f := flag{usage: m[2]}
		if e := envRef.FindStringSubmatch(m[2]); e != nil {
			f.env = e[1]
			fs.byEnv[f.env] = m[1]
		}
		if d := defRef.FindStringSubmatch(m[2]); d != nil {
			f.def, f.hasDef = d[1], true
		}
		fs.byName[m[1]] = f
	}
	if len(fs.byName) < 10 || len(fs.byEnv) != len(fs.byName) {
		t.Fatalf("serve --help: read %d flags, %d with a variable, from:\n%s", len(fs.byName), len(fs.byEnv), out)
	}
	return fs
}

// flagOf is a configuration key's flag (docs/server.md: "the key with
// dashes").
func flagOf(key string) string { return strings.NewReplacer(".", "-", "_", "-").Replace(key) }

// def is key's default as serve --help prints it ("" when it shows none).
func (fs flags) def(t *testing.T, key string) string {
	t.Helper()
	f, ok := fs.byName[flagOf(key)]
	if !ok {
		t.Fatalf("serve has no flag for %s (--%s)", key, flagOf(key))
	}
	return f.def
}

// portOf is the port of a host:port setting.
func portOf(t *testing.T, key, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s: %q: %v", key, addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("%s: %q: %v", key, addr, err)
	}
	return n
}

// TestServeFlags: the help reader finds every setting docs/server.md
// lists, with its variable and default.
func TestServeFlags(t *testing.T) {
	fs := serveFlags(t, serveBinary(t))
	for key, want := range map[string]flag{
		"http.listen":      {env: "ECHOPUBSUB_HTTP_LISTEN", def: ":8080", hasDef: true},
		"shutdown.timeout": {env: "ECHOPUBSUB_SHUTDOWN_TIMEOUT", def: "30s", hasDef: true},
		"node.advertise":   {env: "ECHOPUBSUB_NODE_ADVERTISE"},
	} {
		got := fs.byName[flagOf(key)]
		if got.env != want.env || got.def != want.def || got.hasDef != want.hasDef {
			t.Errorf("%s: read %+v, want %+v", key, got, want)
		}
	}
}
