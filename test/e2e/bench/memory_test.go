package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The memory section goes before "CPU per delivered message" the first
// time, replaces itself afterwards, and survives a full run's rewrite.
func TestSpliceMemory(t *testing.T) {
	doc := "# Benchmarks\n\n## Peak RSS per node\n\nrows\n\n" + memBefore + "\n\ncpu rows\n"
	sec := func(body string) string { return memBegin + "\n" + body + "\n" + memEnd + "\n" }
	once := spliceMemory(doc, sec("first"))
	if !strings.Contains(once, "rows\n\n"+memBegin+"\nfirst\n"+memEnd+"\n\n"+memBefore) {
		t.Fatalf("section not placed before %q:\n%s", memBefore, once)
	}
	twice := spliceMemory(once, sec("second"))
	if strings.Count(twice, memBegin) != 1 || strings.Contains(twice, "first") || !strings.Contains(twice, "second") {
		t.Fatalf("section not replaced:\n%s", twice)
	}
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(path, []byte(twice), 0o644); err != nil {
		t.Fatal(err)
	}
	if kept := spliceMemory(doc, keepMemory(path)); kept != twice {
		t.Fatalf("a full run's rewrite lost or moved the section:\n%s", kept)
	}
}

func TestMemLimitOf(t *testing.T) {
	auto, err := memLimitOf("auto", 10, 2_000_000, 3)
	if err != nil || auto <= 0 {
		t.Fatalf("auto: %d, %v", auto, err)
	}
	for v, want := range map[string]int64{"off": 0, "300MiB": 300 << 20, "1.5GiB": 3 << 29, "auto+64MiB": auto + 64<<20} {
		if got, err := memLimitOf(v, 10, 2_000_000, 3); err != nil || got != want {
			t.Errorf("%s: %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"auto64MiB", "300", "-1MiB", "lots"} {
		if _, err := memLimitOf(v, 10, 2_000_000, 3); err == nil {
			t.Errorf("%s: no error", v)
		}
	}
}

// TestMemoryModeSmoke runs -memory on a tiny N, with and without a limit,
// and checks the section it writes: node 0's breakdown is filled in.
func TestMemoryModeSmoke(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(doc, []byte("# Benchmarks\n\n"+memBefore+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"-memory", "-n", "20000", "-reps", "1", "-warmup", "5000", "-payloads", "10",
		"-memlimit", "off,auto", "-quiet", "-stall", "15s", "-logdir", t.TempDir(), "-doc", doc})
	if err != nil {
		t.Fatal(err)
	}
	if err := memoryMain(o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	if strings.Count(out, "| 10 B |") != 2 || !strings.Contains(out, "| 10 B (") || strings.Contains(out, "| 0 | 0 |") {
		t.Fatalf("memory section incomplete:\n%s", out)
	}
}
