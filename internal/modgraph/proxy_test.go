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

const (
	rootPath     = "github.com/echopubsub/echopubsub"
	postgresPath = rootPath + "/store/postgres"
)

// repoRoot is the checkout this test runs in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var requireRoot = regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(rootPath) + `\s+(v\S+)`)

// rootVersion is the version of the root module that store/postgres
// requires: a released one (no replace in its go.mod).
func rootVersion(t *testing.T, root string) string {
	t.Helper()
	gomod, err := os.ReadFile(filepath.Join(root, "store", "postgres", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(gomod, []byte("replace")) {
		t.Fatalf("store/postgres/go.mod has a replace directive: go get of the module would not build")
	}
	m := requireRoot.FindSubmatch(gomod)
	if m == nil {
		t.Fatalf("store/postgres/go.mod does not require %s", rootPath)
	}
	return string(m[1])
}

// moduleProxy writes a GOPROXY directory (file://) that serves the root
// module and store/postgres from this checkout, both at version: what a
// module proxy would serve once that version is tagged. zip.CreateFromDir
// leaves out nested modules (store/postgres, test/e2e, test/consul) and
// version control files, as the go command's own zips do.
func moduleProxy(t *testing.T, root, version string) string {
	t.Helper()
	dir := t.TempDir()
	for _, m := range []struct{ path, dir string }{{rootPath, root}, {postgresPath, filepath.Join(root, "store", "postgres")}} {
		at := filepath.Join(dir, filepath.FromSlash(m.path), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			t.Fatal(err)
		}
		gomod, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
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
		if err := zip.CreateFromDir(f, module.Version{Path: m.path, Version: version}, m.dir); err != nil {
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
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found: %v", err)
	}
	upstream, err := exec.Command(gobin, "env", "GOPROXY").Output()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gobin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOPROXY=file://"+filepath.ToSlash(proxyDir)+","+strings.TrimSpace(string(upstream)),
		"GONOSUMDB=github.com/echopubsub/*", "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// checksums are the go.sum lines of the root module and store/postgres:
// the module cache the repository's own build filled holds what they
// list, so that nothing but our two modules comes from the proxy.
func checksums(t *testing.T, root string) string {
	t.Helper()
	var all []byte
	for _, p := range []string{"go.sum", filepath.Join("store", "postgres", "go.sum")} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return string(all)
}

// TestPostgresModuleGoGettable: a module outside the repository can go get
// store/postgres at the version it is released with and build a program
// against it. No registry holds this repository's modules, so a file://
// proxy built from the checkout serves them (the root module at the
// version store/postgres requires, and store/postgres itself).
func TestPostgresModuleGoGettable(t *testing.T) {
	root := repoRoot(t)
	version := rootVersion(t, root)
	proxyDir := moduleProxy(t, root, version)
	dir := t.TempDir() // outside the checkout: no go.work above it
	files := map[string]string{
		"go.mod": "module example.com/pgadopter\n\ngo 1.25.0\n",
		"go.sum": checksums(t, root),
		"main.go": `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/postgres"
)

func main() {
	store, err := postgres.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer store.Close()
	_ = []echopubsub.Option{echopubsub.WithStore(store), echopubsub.WithDurableTopics("room:*")}
}
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(t, dir, proxyDir, "get", postgresPath+"@"+version)
	goCmd(t, dir, proxyDir, "build", "-o", filepath.Join(dir, "pgadopter"), ".")
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(gomod), postgresPath+" "+version) {
		t.Errorf("go get left go.mod without %s %s:\n%s", postgresPath, version, gomod)
	}
	t.Logf("go get %s@%s and go build: ok", postgresPath, version)
}

// TestPostgresModuleTidy is store/postgres's `go mod tidy -diff`: tidy
// ignores go.work, so it runs on a copy of the module against the file://
// proxy. go.mod must come out unchanged, and go.sum too but for the root
// module's own lines: their hash is of this checkout's zip, which changes
// with every commit (a released version's would not), so go.sum does not
// keep them (the repository's builds take the root from go.work). With
// ECHOPUBSUB_TIDY_WRITE=1 it writes the tidied files instead (make tidy).
func TestPostgresModuleTidy(t *testing.T) {
	root := repoRoot(t)
	version := rootVersion(t, root)
	proxyDir := moduleProxy(t, root, version)
	src := filepath.Join(root, "store", "postgres")
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "go.work")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	goCmd(t, dir, proxyDir, "mod", "tidy")
	for _, name := range []string{"go.mod", "go.sum"} {
		want, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "go.sum" {
			got = withoutModule(got, rootPath)
		}
		if bytes.Equal(got, want) {
			continue
		}
		if os.Getenv("ECHOPUBSUB_TIDY_WRITE") != "" {
			if err := os.WriteFile(filepath.Join(src, name), got, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote the tidied store/postgres/%s", name)
			continue
		}
		t.Errorf("store/postgres/%s is not tidy (ECHOPUBSUB_TIDY_WRITE=1 writes what go mod tidy makes):\n%s", name, got)
	}
}

// withoutModule drops the go.sum lines of module path.
func withoutModule(sum []byte, path string) []byte {
	var out bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(sum))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 && f[0] == path {
			continue
		}
		out.WriteString(sc.Text() + "\n")
	}
	return out.Bytes()
}
