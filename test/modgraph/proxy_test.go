package modgraph

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

const rootPath = "github.com/echopubsub/echopubsub"

// released are the modules of this repository that users go get, by
// directory: the library (the root) and the modules that ship beside it.
// Each requires released versions of the others (one version for all:
// they are tagged together, gateway/v0.1.0 with v0.1.0) and has no
// replace; the repository's own builds take them from go.work.
var released = []struct{ dir, path string }{
	{".", rootPath},
	{"gateway", rootPath + "/gateway"},
	{"store/bolt", rootPath + "/store/bolt"},
	{"store/postgres", rootPath + "/store/postgres"},
	{"cmd/demo", rootPath + "/cmd/demo"},
	{"cmd/echopubsub", rootPath + "/cmd/echopubsub"},
}

// repoRoot is the checkout this test runs in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var requireOurs = regexp.MustCompile(`(?m)^\s*(?:require\s+)?(` + regexp.QuoteMeta(rootPath) + `\S*)\s+(v\S+)`)

// releaseVersion is the version the released modules require of one
// another; it fails the test on a replace directive, a requirement of a
// module that is not released, or two different versions.
func releaseVersion(t *testing.T, root string) string {
	t.Helper()
	known := map[string]bool{}
	for _, m := range released {
		known[m.path] = true
	}
	version := ""
	for _, m := range released {
		gomod, err := os.ReadFile(filepath.Join(root, m.dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(gomod, []byte("replace")) {
			t.Fatalf("%s/go.mod has a replace directive: go get of the module would not build", m.dir)
		}
		for _, req := range requireOurs.FindAllSubmatch(gomod, -1) {
			path, v := string(req[1]), string(req[2])
			if !known[path] {
				t.Fatalf("%s/go.mod requires %s, which is not a released module of this repository", m.dir, path)
			}
			if version != "" && v != version {
				t.Fatalf("%s/go.mod requires %s %s, another module %s: the modules are released together", m.dir, path, v, version)
			}
			version = v
		}
	}
	if version == "" {
		t.Fatalf("no released module requires %s", rootPath)
	}
	return version
}

// moduleProxy writes a GOPROXY directory (file://) that serves every
// released module from this checkout at version: what a module proxy
// would serve once that version is tagged. zip.CreateFromDir leaves out
// nested modules (the root's zip holds no gateway, store/bolt, ...,
// test/e2e or test/consul) and version control files, as the go
// command's own zips do.
func moduleProxy(t *testing.T, root, version string) string {
	t.Helper()
	dir := t.TempDir()
	for _, m := range released {
		src := filepath.Join(root, m.dir)
		at := filepath.Join(dir, filepath.FromSlash(m.path), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			t.Fatal(err)
		}
		gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		info, _ := json.Marshal(struct {
			Version string
			Time    time.Time
		}{version, time.Now().UTC().Truncate(time.Second)})
		f, err := os.Create(filepath.Join(at, version+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		if err := zip.CreateFromDir(f, module.Version{Path: m.path, Version: version}, src); err != nil {
			t.Fatalf("zip %s: %v", m.path, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string][]byte{"list": []byte(version + "\n"), version + ".info": info, version + ".mod": gomod} {
			if err := os.WriteFile(filepath.Join(at, name), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// goCmd runs go in dir with the module proxy first and this checkout's
// workspace files out of the way (GOWORK=off: what a user outside the
// repository has), and fails the test on an error.
func goCmd(t *testing.T, dir, proxyDir string, args ...string) string {
	t.Helper()
	return goCmdEnv(t, dir, proxyDir, nil, args...)
}

// goCmdEnv is goCmd with env added to the command's environment.
func goCmdEnv(t *testing.T, dir, proxyDir string, env []string, args ...string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found: %v", err)
	}
	goenv, err := exec.Command(gobin, "env", "GOPROXY", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	upstream, modcache, _ := strings.Cut(strings.TrimSpace(string(goenv)), "\n")
	// A module cache of its own (the user's would keep the first zip of
	// version it was served, and every later run would build that stale
	// copy), filled from the proxy of this checkout's modules, then from
	// the user's module cache (its download directory is a module proxy),
	// then upstream.
	cache := filepath.Join(proxyDir, "..", filepath.Base(proxyDir)+".modcache")
	cmd := exec.Command(gobin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOPROXY=file://"+filepath.ToSlash(proxyDir)+",file://"+filepath.ToSlash(filepath.Join(modcache, "cache", "download"))+","+upstream,
		"GOMODCACHE="+cache, "GONOSUMDB=github.com/echopubsub/*", "GOFLAGS=-mod=mod -modcacherw -trimpath", "GOWORK=off", "GOTOOLCHAIN=local")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// checksums are the go.sum lines of every released module: the module
// cache the repository's own build filled holds what they list, so that
// nothing but this repository's modules comes from the proxy.
func checksums(t *testing.T, root string) string {
	t.Helper()
	var all []byte
	for _, m := range released {
		b, err := os.ReadFile(filepath.Join(root, m.dir, "go.sum"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return string(all)
}

// adopters are programs of users outside the repository, one per module
// they go get: each must get and build against released versions alone.
var adopters = []struct {
	get, main string
}{
	{rootPath + "/gateway", `package main

import (
	"net/http"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/gateway"
)

func main() {
	var ps *echopubsub.PubSub // from echopubsub.Start
	gw, err := gateway.New(ps, func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }, gateway.DefaultConfig())
	if err == nil {
		http.Handle("/ws", gw)
	}
}
`},
	{rootPath + "/store/bolt", `package main

import (
	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/bolt"
)

func main() {
	store, err := bolt.Open("node.db")
	if err != nil {
		panic(err)
	}
	defer store.Close()
	_ = []echopubsub.Option{echopubsub.WithStore(store), echopubsub.WithDurableTopics("room:*")}
}
`},
	{rootPath + "/store/postgres", `package main

import (
	"context"
	"os"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/postgres"
)

func main() {
	store, err := postgres.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer store.Close()
	_ = []echopubsub.Option{echopubsub.WithStore(store), echopubsub.WithDurableTopics("room:*")}
}
`},
}

// TestModulesGoGettable: a module outside the repository can go get each
// released module at the version they are released with and build a
// program against it, and go install the demo at that version. No
// registry holds this repository's modules, so a file:// proxy built from
// the checkout serves them.
func TestModulesGoGettable(t *testing.T) {
	root := repoRoot(t)
	version := releaseVersion(t, root)
	proxyDir := moduleProxy(t, root, version)
	sums := checksums(t, root)
	for _, a := range adopters {
		t.Run(strings.TrimPrefix(a.get, rootPath+"/"), func(t *testing.T) {
			dir := t.TempDir() // outside the checkout: no go.work above it
			for name, body := range map[string]string{"go.mod": "module example.com/adopter\n\ngo 1.25.0\n", "go.sum": sums, "main.go": a.main} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			goCmd(t, dir, proxyDir, "get", a.get+"@"+version)
			goCmd(t, dir, proxyDir, "build", "-o", filepath.Join(dir, "adopter"), ".")
			gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(gomod), a.get+" "+version) {
				t.Errorf("go get left go.mod without %s %s:\n%s", a.get, version, gomod)
			}
		})
	}
	t.Run("cmd/demo", func(t *testing.T) {
		dir := t.TempDir()
		bin := filepath.Join(dir, "bin")
		goCmdEnv(t, dir, proxyDir, []string{"GOBIN=" + bin, "GOFLAGS=-modcacherw -trimpath"}, "install", rootPath+"/cmd/demo@"+version)
		if _, err := os.Stat(filepath.Join(bin, "demo")); err != nil {
			t.Errorf("go install %s/cmd/demo@%s installed no demo: %v", rootPath, version, err)
		}
	})
}

// TestModulesTidy is `go mod tidy -diff` of every released module but the
// root (whose tidy needs no proxy: make vet runs it): tidy ignores go.work,
// so it runs on a copy of each module against the file:// proxy. go.mod
// must come out unchanged, and go.sum too but for the lines of this
// repository's own modules: their hash is of this checkout's zip, which
// changes with every commit (a released version's would not), so go.sum
// does not keep them (the repository's builds take them from go.work).
// With ECHOPUBSUB_TIDY_WRITE=1 it writes the tidied files instead (make
// tidy).
func TestModulesTidy(t *testing.T) {
	root := repoRoot(t)
	version := releaseVersion(t, root)
	proxyDir := moduleProxy(t, root, version)
	for _, m := range released[1:] {
		t.Run(m.dir, func(t *testing.T) {
			src := filepath.Join(root, m.dir)
			dir := t.TempDir()
			if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
				t.Fatal(err)
			}
			goCmd(t, dir, proxyDir, "mod", "tidy")
			for _, name := range []string{"go.mod", "go.sum"} {
				want, err := os.ReadFile(filepath.Join(src, name))
				if err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				got, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
				if name == "go.sum" {
					got = withoutOurs(got)
				}
				if bytes.Equal(got, want) {
					continue
				}
				if os.Getenv("ECHOPUBSUB_TIDY_WRITE") != "" {
					if err := os.WriteFile(filepath.Join(src, name), got, 0o644); err != nil {
						t.Fatal(err)
					}
					t.Logf("wrote the tidied %s/%s", m.dir, name)
					continue
				}
				t.Errorf("%s/%s is not tidy (ECHOPUBSUB_TIDY_WRITE=1 writes what go mod tidy makes):\n%s", m.dir, name, got)
			}
		})
	}
}

// withoutOurs drops the go.sum lines of this repository's modules.
func withoutOurs(sum []byte) []byte {
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(sum))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 && (f[0] == rootPath || strings.HasPrefix(f[0], rootPath+"/")) {
			continue
		}
		out.WriteString(sc.Text() + "\n")
	}
	return out.Bytes()
}
