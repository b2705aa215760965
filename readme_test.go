package echopubsub_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadmeMainRuns: the README's Use section is a complete main.go that
// compiles as it stands. The test takes the section's Go block, as
// written, into a module of its own (requiring this checkout), builds it
// with the go command and runs it: it must print the three goals in order,
// and log no warning or error.
func TestReadmeMainRuns(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(readme)
	use := strings.Index(s, "\n## Use\n")
	if use < 0 {
		t.Fatal("README.md has no Use section")
	}
	s = s[use:]
	if next := strings.Index(s[1:], "\n## "); next >= 0 {
		s = s[:next+1]
	}
	start := strings.Index(s, "```go\npackage main\n")
	if start < 0 {
		t.Fatal("README.md's Use section has no ```go block starting with package main")
	}
	src := s[start+len("```go\n"):]
	src = src[:strings.Index(src, "```")]

	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/readme\n\ngo 1.25.0\n\nrequire github.com/echopubsub/echopubsub v0.0.0\n\n" +
			"replace github.com/echopubsub/echopubsub => " + root + "\n",
		"go.sum":  string(sum), // the library's checksums: nothing is fetched
		"main.go": src,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found: %v", err)
	}
	for _, args := range [][]string{{"mod", "tidy"}, {"vet", "."}, {"build", "-o", "readme", "."}} {
		cmd := exec.Command(gobin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local", "GOPROXY=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("README main.go: go %s: %v\n%s\n--- main.go:\n%s", strings.Join(args, " "), err, out, src)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "readme"))
	var logs strings.Builder
	cmd.Stderr = &logs
	out, err := cmd.Output()
	t.Logf("README main.go's log:\n%s", logs.String())
	if err != nil {
		t.Fatalf("README main.go: run: %v\n%s", err, out)
	}
	if got, want := string(out), "1-0\n2-0\n2-1\n"; got != want {
		t.Fatalf("README main.go printed %q, want %q", got, want)
	}
	// It logs at Warn: a healthy start and a normal stop log nothing.
	if l := strings.TrimSpace(logs.String()); l != "" {
		t.Errorf("README main.go's healthy start and normal stop logged warnings or errors:\n%s", l)
	}
}
