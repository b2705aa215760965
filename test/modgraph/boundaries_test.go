package modgraph

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// listed is one package of `go list -deps`: its import path, its module
// (empty: the standard library) and what it imports.
type listed struct {
	path, module string
	imports      []string
}

// listDeps is `go list -deps pkgs` in dir: every package pkgs build with
// (tests not included: what a program that imports them links). gowork is
// the GOWORK to use: "off" for the root module alone, or this checkout's
// go.work for a nested module (it takes the root from this checkout, the
// code under test, not a released version).
func listDeps(t *testing.T, dir, gowork string, pkgs ...string) []listed {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found: %v", err)
	}
	args := append([]string{"list", "-deps", "-f", "{{.ImportPath}}|{{with .Module}}{{.Path}}{{end}}|{{join .Imports \",\"}}"}, pkgs...)
	cmd := exec.Command(gobin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK="+gowork, "GOFLAGS=-mod=readonly", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	var deps []listed
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "|", 3)
		if len(f) != 3 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		var imports []string
		if f[2] != "" {
			imports = strings.Split(f[2], ",")
		}
		deps = append(deps, listed{path: f[0], module: f[1], imports: imports})
	}
	return deps
}

// importers are the packages of deps that import path.
func importers(deps []listed, path string) []string {
	var by []string
	for _, d := range deps {
		for _, imp := range d.imports {
			if imp == path {
				by = append(by, d.path)
			}
		}
	}
	return by
}

func isInternal(path string) bool {
	return strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal")
}

// TestNoInternalPackageImportsTheRoot: the root package uses the internal
// packages (the runtime, the durable engine, the session engine); none of
// them uses it back, directly or through another package, so that the
// arrows between the root and internal/ all point one way.
func TestNoInternalPackageImportsTheRoot(t *testing.T) {
	root := repoRoot(t)
	deps := listDeps(t, root, "off", "./internal/...")
	for _, d := range deps {
		if d.path == rootPath {
			t.Errorf("a package under internal/ builds with the root package %s: imported by %v", rootPath, importers(deps, rootPath))
		}
	}
	if len(deps) < 10 {
		t.Fatalf("go list -deps ./internal/... listed %d packages: the check saw nothing", len(deps))
	}
}

// storePackages are the durable-stream stores and what they build on, by
// module: each may use its own module's internal packages, never another
// module's (allowed: the module whose internal packages it may use; ""
// for the root module's store packages, which use public packages only,
// as a store written outside this repository must).
var storePackages = []struct {
	dir, gowork string // gowork "": this checkout's go.work; a .work file: that one
	pkgs        []string
	allowed     string
}{
	{".", "off", []string{"./store", "./store/storekit", "./store/seglog"}, ""},
	{"store/bolt", "", []string{"./..."}, rootPath + "/store/bolt"},
	{"store/postgres", "", []string{"./..."}, rootPath + "/store/postgres"},
	// A store written outside the repository: its own module and go.work.
	{"test/outsidestore", "test/outsidestore/go.work", []string{"./..."}, "example.com/outsidestore"},
}

// TestStoresUsePublicPackagesOnly: no store's `go list -deps` holds an
// internal package of another of this repository's modules (nor the
// root package, which is built on them): a store needs the public
// contract (package store, store/storekit) and nothing else.
func TestStoresUsePublicPackagesOnly(t *testing.T) {
	root := repoRoot(t)
	for _, s := range storePackages {
		t.Run(s.dir, func(t *testing.T) {
			gowork := s.gowork
			switch {
			case gowork == "":
				gowork = filepath.Join(root, "go.work")
			case strings.HasSuffix(gowork, ".work"):
				gowork = filepath.Join(root, gowork)
			}
			deps := listDeps(t, filepath.Join(root, s.dir), gowork, s.pkgs...)
			contract := false
			for _, d := range deps {
				contract = contract || d.path == rootPath+"/store"
				ours := d.module == rootPath || strings.HasPrefix(d.module, rootPath+"/")
				switch {
				case d.path == rootPath:
					t.Errorf("%s builds with the root package: imported by %v", s.dir, importers(deps, d.path))
				case ours && isInternal(d.path) && d.module != s.allowed:
					t.Errorf("%s builds with %s, an internal package of module %s: imported by %v", s.dir, d.path, d.module, importers(deps, d.path))
				}
			}
			if !contract {
				t.Errorf("%s does not build with package store: the check saw nothing (%d packages)", s.dir, len(deps))
			}
		})
	}
}
