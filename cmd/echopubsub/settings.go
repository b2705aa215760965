package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// One table of settings drives serve's three sources: each setting has a
// key in the configuration file (dotted: a nested map in YAML or JSON), a
// flag (the key with dashes: --membership-peers) and an environment
// variable (ECHOPUBSUB_ and the key in capitals with underscores:
// ECHOPUBSUB_MEMBERSHIP_PEERS). A flag wins over the environment, the
// environment over the file, the file over the default. docs/server.md
// lists them; TestSettingsDocumented keeps it in step.

// kind is a setting's value type.
type kind int

const (
	kString kind = iota
	kBool
	kInt
	kDuration
	kList // comma-separated on a flag or in the environment; a list in a file
)

func (k kind) String() string {
	return [...]string{"string", "bool", "int", "duration", "list"}[k]
}

// setting is one configurable value of serve.
type setting struct {
	key   string
	kind  kind
	def   string // the default, as a flag would spell it
	usage string
}

// settings are serve's settings, in the order docs/server.md lists them.
// Flag names are stable once released: add, never rename.
var settings = []setting{
	{"config", kString, "", "configuration file (YAML or JSON, by extension .yaml/.yml/.json); flags and environment override it (no file key)"},
	{"name", kString, "echopubsub", "the pubsub's name: every node of a cluster uses the same"},
	{"node.listen", kString, "0.0.0.0:7400", "host:port the node listens on for other nodes (protoactor remote)"},
	{"node.advertise", kString, "", "host:port other nodes reach this node at; required when node.listen has no specific host"},
	{"http.listen", kString, ":8080", "host:port of the public HTTP server: the WebSocket gateway (/ws), its JavaScript client (/echopubsub.js), /metrics, /healthz, /readyz"},
	{"http.tls_cert", kString, "", "PEM certificate: serve http.listen over TLS (with http.tls_key)"},
	{"http.tls_key", kString, "", "PEM key of http.tls_cert"},
	{"gateway.origins", kList, "", "WebSocket Origin host patterns allowed besides the request's own host (path.Match patterns)"},
	{"gateway.publish", kBool, "false", "let WebSocket clients publish"},
	{"gateway.token", kString, "", "bearer token a WebSocket client must send (Authorization header or ?token=); empty: every client is accepted"},
	{"admin.listen", kString, "127.0.0.1:7401", "host:port of the admin endpoint the echopubsub commands talk to; empty: no admin endpoint"},
	{"admin.token", kString, "", "bearer token the admin endpoint requires (prefer admin.token_file or the environment)"},
	{"admin.token_file", kString, "", "file holding the admin bearer token"},
	{"admin.tls_cert", kString, "", "PEM certificate: serve the admin endpoint over TLS (with admin.tls_key)"},
	{"admin.tls_key", kString, "", "PEM key of admin.tls_cert"},
	{"admin.client_ca", kString, "", "PEM CA: admin clients presenting a certificate it signed are authenticated (mTLS; needs admin.tls_cert)"},
	{"admin.publish", kBool, "false", "let the admin endpoint publish (echopubsub publish); read-only otherwise"},
	{"membership.kind", kString, "static", "how nodes find one another: static, consul or dns"},
	{"membership.peers", kList, "", "static: every node's node.advertise address, this one included"},
	{"membership.consul.address", kString, "", "consul: the agent's HTTP address; empty: $CONSUL_HTTP_ADDR, else 127.0.0.1:8500"},
	{"membership.consul.ttl", kDuration, "10s", "consul: the service check's TTL"},
	{"membership.dns.name", kString, "", "dns: the name to resolve (a Kubernetes headless Service)"},
	{"membership.dns.srv", kBool, "false", "dns: resolve SRV records (port from each record) rather than A/AAAA"},
	{"membership.dns.port", kInt, "0", "dns: the node port of A/AAAA members; 0: node.advertise's port"},
	{"membership.dns.interval", kDuration, "5s", "dns: how often the name is resolved"},
	{"store.kind", kString, "seglog", "durable-stream store: seglog (a directory), bolt (a file) or postgres (shared)"},
	{"store.path", kString, "data", "seglog: the directory; bolt: the file"},
	{"store.postgres_url", kString, "", "postgres: the connection string (postgres://...)"},
	{"durable_topics", kList, "", "topic patterns kept in the store (\"room:*\"); none: no durable stream"},
	{"retention.max_age", kDuration, "0s", "drop stored rows older than this; 0: no limit"},
	{"retention.max_rows", kInt, "0", "keep at most this many rows per stream; 0: no limit"},
	{"retention.max_bytes", kInt, "0", "keep at most this many payload bytes per stream; 0: no limit"},
	{"tls.ca", kString, "", "PEM CA of the cluster: mutual TLS between nodes (with tls.cert and tls.key)"},
	{"tls.cert", kString, "", "PEM certificate of this node"},
	{"tls.key", kString, "", "PEM key of tls.cert"},
	{"pubsub.buffer_size", kInt, "", "messages each producer keeps for its peers (echopubsub.Config.BufferSize); empty: the library's default"},
	{"pubsub.batch_interval", kDuration, "", "echopubsub.Config.BatchInterval; empty: the library's default"},
	{"shutdown.timeout", kDuration, "30s", "how long a stop (SIGTERM) may take to drain; keep it below the pod's termination grace period"},
	{"log.level", kString, "info", "log level: trace, debug, info, warn, error"},
	{"log.format", kString, "json", "log format: json (one object a line) or console"},
}

// flagName is a key's flag: dots and underscores become dashes.
func flagName(key string) string { return strings.NewReplacer(".", "-", "_", "-").Replace(key) }

// envName is a key's environment variable.
func envName(key string) string {
	return "ECHOPUBSUB_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// values are resolved settings, by key, as strings (lists comma-joined).
type values map[string]string

// addFlags declares every setting on fs.
func addFlags(fs *pflag.FlagSet) {
	for _, s := range settings {
		usage := s.usage + " (" + envName(s.key) + ")"
		switch s.kind {
		case kList:
			fs.StringSlice(flagName(s.key), nil, usage)
		case kBool:
			fs.Bool(flagName(s.key), s.def == "true", usage)
		default:
			fs.String(flagName(s.key), s.def, usage)
		}
	}
}

// resolve takes each setting from the flags set on fs, else the
// environment (getenv), else the configuration file, else its default.
// Every value is checked against its kind: an error names the key and
// the value.
func resolve(fs *pflag.FlagSet, getenv func(string) string) (values, error) {
	v := values{}
	for _, s := range settings {
		v[s.key] = s.def
	}
	path := getenv(envName("config"))
	if f := fs.Lookup("config"); f != nil && f.Changed {
		path = f.Value.String()
	}
	if path != "" {
		fromFile, err := readFile(path)
		if err != nil {
			return nil, err
		}
		for k, val := range fromFile {
			v[k] = val
		}
	}
	for _, s := range settings {
		if e := getenv(envName(s.key)); e != "" {
			v[s.key] = e
		}
		if f := fs.Lookup(flagName(s.key)); f != nil && f.Changed {
			val := f.Value.String()
			if s.kind == kList { // pflag prints a slice as [a,b]
				val = strings.Join(must(fs.GetStringSlice(flagName(s.key))), ",")
			}
			v[s.key] = val
		}
	}
	for _, s := range settings {
		if err := checkKind(s, v[s.key]); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func must[T any](x T, _ error) T { return x }

// checkKind checks a value against its setting's kind.
func checkKind(s setting, val string) error {
	if val == "" {
		return nil
	}
	var err error
	switch s.kind {
	case kBool:
		_, err = strconv.ParseBool(val)
	case kInt:
		var n int64
		n, err = strconv.ParseInt(val, 10, 64)
		if err == nil && n < 0 {
			err = fmt.Errorf("must be >= 0")
		}
	case kDuration:
		var d time.Duration
		d, err = time.ParseDuration(val)
		if err == nil && d < 0 {
			err = fmt.Errorf("must be >= 0")
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %q is not a valid %s: %v", s.key, val, s.kind, unwrapNum(err))
	}
	return nil
}

// unwrapNum drops strconv's repetition of the input.
func unwrapNum(err error) error {
	if ne, ok := err.(*strconv.NumError); ok {
		return ne.Err
	}
	return err
}

// readFile reads a configuration file into key -> value. A key that is not
// a setting, or a value of the wrong shape, is an error naming the key and
// the value.
func readFile(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var doc map[string]any
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		err = dec.Decode(&doc)
	case ".yaml", ".yml":
		err = yaml.Unmarshal(raw, &doc)
	default:
		return nil, fmt.Errorf("config file %q: extension must be .yaml, .yml or .json", path)
	}
	if err != nil {
		return nil, fmt.Errorf("config file %q: %w", path, err)
	}
	out := map[string]string{}
	if err := flatten("", doc, out); err != nil {
		return nil, fmt.Errorf("config file %q: %w", path, err)
	}
	return out, nil
}

// byKey finds a setting.
func byKey(key string) (setting, bool) {
	for _, s := range settings {
		if s.key == key && key != "config" {
			return s, true
		}
	}
	return setting{}, false
}

// flatten turns a decoded document into dotted keys, refusing unknown ones.
func flatten(prefix string, m map[string]any, out map[string]string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		val := m[k]
		if sub, ok := val.(map[string]any); ok {
			if _, leaf := byKey(key); !leaf {
				if !isSection(key) {
					return fmt.Errorf("unknown key %q", key)
				}
				if err := flatten(key, sub, out); err != nil {
					return err
				}
				continue
			}
		}
		s, ok := byKey(key)
		if !ok {
			return fmt.Errorf("unknown key %q (value %v)", key, show(val))
		}
		str, err := scalar(s, val)
		if err != nil {
			return err
		}
		out[key] = str
	}
	return nil
}

// isSection reports whether some setting's key starts with key + ".".
func isSection(key string) bool {
	for _, s := range settings {
		if strings.HasPrefix(s.key, key+".") {
			return true
		}
	}
	return false
}

// scalar turns a file value into the setting's string form.
func scalar(s setting, val any) (string, error) {
	bad := func() error { return fmt.Errorf("%s: %s is not a %s", s.key, show(val), s.kind) }
	switch x := val.(type) {
	case []any:
		if s.kind != kList {
			return "", bad()
		}
		parts := make([]string, 0, len(x))
		for _, e := range x {
			str, ok := e.(string)
			if !ok || strings.Contains(str, ",") {
				return "", fmt.Errorf("%s: element %s is not a string without commas", s.key, show(e))
			}
			parts = append(parts, str)
		}
		return strings.Join(parts, ","), nil
	case map[string]any, nil:
		return "", bad()
	case bool:
		if s.kind != kBool {
			return "", bad()
		}
		return strconv.FormatBool(x), nil
	case string:
		if s.kind == kList || s.kind == kBool || s.kind == kInt {
			return "", bad()
		}
		return x, nil
	default: // numbers: yaml int/float, json.Number
		if s.kind != kInt {
			return "", bad()
		}
		return fmt.Sprint(x), nil
	}
}

// show prints a file value as the file spelled it, near enough.
func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
