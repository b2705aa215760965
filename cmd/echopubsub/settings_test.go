package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/echopubsub/echopubsub/internal/proc"
)

// TestSettingsDocumented: docs/server.md lists every setting with its key,
// flag and environment variable (the deploy manifests are written from it).
func TestSettingsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "server.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		// The key is plain text: docref reads `store.x_y` as Go.
		row := "| " + s.key + " | `--" + flagName(s.key) + "` | `" + envName(s.key) + "` |"
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/server.md has no row starting %s", row)
		}
	}
}

// resolveWith resolves flags args, environment env and file (name, body).
func resolveWith(t *testing.T, args []string, env map[string]string, name, body string) (values, error) {
	t.Helper()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	addFlags(fs)
	if name != "" {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", path)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return resolve(fs, func(k string) string { return env[k] })
}

// TestSettingsPrecedence: flag over environment over file over default.
func TestSettingsPrecedence(t *testing.T) {
	file := "name: fromfile\nlog:\n  level: debug\nmembership:\n  peers: [a:1, b:2]\nretention:\n  max_rows: 7\n"
	v, err := resolveWith(t, []string{"--log-level", "warn"}, map[string]string{"ECHOPUBSUB_NAME": "fromenv", "ECHOPUBSUB_LOG_LEVEL": "error"}, "c.yaml", file)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"name": "fromenv", "log.level": "warn", "membership.peers": "a:1,b:2",
		"retention.max_rows": "7", "store.kind": "seglog"} {
		if v[key] != want {
			t.Errorf("%s = %q, want %q", key, v[key], want)
		}
	}
	v, err = resolveWith(t, []string{"--membership-peers", "x:1,y:2"}, nil, "c.json", `{"admin": {"publish": true}, "pubsub": {"buffer_size": 64}}`)
	if err != nil {
		t.Fatal(err)
	}
	if v["membership.peers"] != "x:1,y:2" || v["admin.publish"] != "true" || v["pubsub.buffer_size"] != "64" {
		t.Errorf("got peers %q publish %q buffer %q", v["membership.peers"], v["admin.publish"], v["pubsub.buffer_size"])
	}
}

// TestSettingsErrorsNameKeyAndValue: each bad input, from each source, is
// refused with an error naming the key and the value.
func TestSettingsErrorsNameKeyAndValue(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		env        map[string]string
		file, body string
		want       []string
	}{
		{name: "unknown yaml key", file: "c.yaml", body: "membership:\n  peer: [a:1]\n", want: []string{`"membership.peer"`, `["a:1"]`}},
		{name: "unknown json section", file: "c.json", body: `{"nodes": {"listen": ":1"}}`, want: []string{`"nodes"`}},
		{name: "unknown top key", file: "c.yaml", body: "colour: blue\n", want: []string{`"colour"`, `"blue"`}},
		{name: "wrong type in file", file: "c.yaml", body: "retention:\n  max_rows: lots\n", want: []string{"retention.max_rows", `"lots"`}},
		{name: "list in file given a string", file: "c.json", body: `{"durable_topics": "room:*"}`, want: []string{"durable_topics", `"room:*"`}},
		{name: "bad duration in env", env: map[string]string{"ECHOPUBSUB_SHUTDOWN_TIMEOUT": "soon"}, want: []string{"shutdown.timeout", `"soon"`}},
		{name: "negative int flag", args: []string{"--retention-max-bytes", "-5"}, want: []string{"retention.max_bytes", `"-5"`}},
		{name: "bad bool env", env: map[string]string{"ECHOPUBSUB_ADMIN_PUBLISH": "maybe"}, want: []string{"admin.publish", `"maybe"`}},
		{name: "extension", file: "c.toml", body: "x = 1", want: []string{`c.toml`, "extension"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := resolveWith(t, tc.args, tc.env, tc.file, tc.body)
			if err == nil {
				t.Fatalf("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// TestServeRefusesBadConfig: `echopubsub serve` with a bad setting exits
// non-zero before serving, and its error names the key and the value.
func TestServeRefusesBadConfig(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "node.yaml")
	if err := os.WriteFile(file, []byte("membership:\n  kind: static\n  peer: [127.0.0.1:1]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ports, err := proc.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	listen := "127.0.0.1:" + strconv.Itoa(ports[0])
	base := []string{"serve", "--node-listen", listen, "--http-listen", "127.0.0.1:" + strconv.Itoa(ports[1]),
		"--admin-listen", "127.0.0.1:" + strconv.Itoa(ports[2]), "--store-path", filepath.Join(dir, "store")}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{"unknown file key", []string{"--config", file}, nil, []string{`unknown key "membership.peer"`, `["127.0.0.1:1"]`}},
		{"membership kind", []string{"--membership-kind", "etcd"}, nil, []string{`membership.kind: "etcd"`}},
		{"peers without this node", []string{"--membership-peers", "127.0.0.1:1,127.0.0.1:2"}, nil,
			[]string{"membership.peers", `"127.0.0.1:1,127.0.0.1:2"`, listen}},
		{"store kind", []string{"--store-kind", "sqlite", "--durable-topics", "room:*"}, nil, []string{`store.kind: "sqlite"`}},
		{"advertise needed", []string{"--node-listen", "0.0.0.0:" + strconv.Itoa(ports[0])}, nil, []string{"node.advertise", `"0.0.0.0:`}},
		{"env duration", nil, []string{"ECHOPUBSUB_MEMBERSHIP_DNS_INTERVAL=often"}, []string{"membership.dns.interval", `"often"`}},
		{"log level", []string{"--log-level", "loud"}, nil, []string{"log.level", `"loud"`}},
		{"peers with consul", []string{"--membership-kind", "consul", "--membership-peers", "127.0.0.1:9"}, nil,
			[]string{"membership.peers", `"127.0.0.1:9"`, `"consul"`}},
		{"dns without a name", []string{"--membership-kind", "dns"}, nil, []string{"membership.dns.name", `""`}},
		{"admin without credentials", nil, []string{"ECHOPUBSUB_ADMIN_TOKEN="}, []string{"admin.listen", quotedAddr(ports[2]), "admin.token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append(append([]string{}, base...), tc.args...)...)
			cmd.Env = append(append(os.Environ(), "ECHOPUBSUB_ADMIN_TOKEN=x"), tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("serve started:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("serve's error does not name %s:\n%s", w, out)
				}
			}
		})
	}
}

// quotedAddr is a loopback address as an error quotes it.
func quotedAddr(p int) string { return `"127.0.0.1:` + strconv.Itoa(p) + `"` }
