package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/echopubsub/echopubsub/internal/proc"
)

// TestReplayProgress: replay draws a progress bar on stderr when it is a
// terminal and the range is long (progressMin rows or more), and only
// then; stdout has the rows either way.
func TestReplayProgress(t *testing.T) {
	ports, err := proc.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	nd := startNodes(t, ports, []string{"127.0.0.1:" + strconv.Itoa(ports[0])}, bufferSize, "http",
		func(int) []string { return []string{"--admin-publish"} }, nil)[0]
	var lines strings.Builder
	for i := 1; i <= progressMin; i++ {
		lines.WriteString("row" + strconv.Itoa(i) + "\n")
	}
	if r := runEnv(t, nd, []string{"ECHOPUBSUB_ADMIN_TOKEN=" + adminToken}, lines.String(), "publish", "room:1"); r.err != nil {
		t.Fatalf("publish: %v %s", r.err, r.errOut)
	}
	replay := func(terminal bool, args ...string) (string, string) {
		t.Helper()
		c := &client{terminal: func() bool { return terminal }}
		cmd := c.replayCommand()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs(append([]string{"room:1", "--url", nd.adminURL, "--token", adminToken}, args...))
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("replay %v: %v", args, err)
		}
		return out.String(), errOut.String()
	}
	out, errOut := replay(true, "--from", "1")
	if n := strings.Count(out, "\n"); n != progressMin || !strings.HasPrefix(out, `room:1 #1 google.protobuf.StringValue "row1"`) {
		t.Errorf("replay printed %d lines, want %d:\n%.200s", n, progressMin, out)
	}
	want := "[" + strings.Repeat("#", 40) + "] " + strconv.Itoa(progressMin) + "/" + strconv.Itoa(progressMin) + "\n"
	if !strings.HasSuffix(errOut, want) || !strings.HasPrefix(errOut, "\r[") {
		t.Errorf("progress on a terminal: %q, want it to end with %q", errOut, want)
	}
	if _, errOut := replay(false, "--from", "1"); errOut != "" {
		t.Errorf("progress drawn on a stderr that is not a terminal: %q", errOut)
	}
	if out, errOut := replay(true, "--from", "1", "--to", "10"); errOut != "" || strings.Count(out, "\n") != 10 {
		t.Errorf("a short range: %d lines, progress %q", strings.Count(out, "\n"), errOut)
	}
}
