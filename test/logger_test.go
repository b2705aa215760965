package test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

func TestCheckLogLine(t *testing.T) {
	for _, c := range []struct {
		line, err string // err "": valid
	}{
		{`{"level":"info","node":"a:1","peer":"b:2","message":"registered"}` + "\n", ""},
		{`{"a":{"b":1,"c":[{"d":1},{"d":2}]},"e":[1,"x",null,true]}`, ""},
		{`{"level":"info","node":"a:1","node":"b:2"}`, `key "node" twice`},
		{`{"a":{"b":1,"b":2}}`, `key "b" twice`},
		{`{"a":[{"c":1,"c":1}]}`, `key "c" twice`},
		{`{"a":{"b":1},"b":2}`, ""}, // one key per object: nesting is not a duplicate
		{`12:00:00 INF registered node=a:1`, "not a JSON object"},
		{`INF registered`, "not JSON"},
		{`[1,2]`, "not a JSON object"},
		{`{"a":1}{"b":2}`, "more than one JSON value"},
		{`{"a":1`, "EOF"},
	} {
		err := CheckLogLine([]byte(c.line))
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.line, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: got %v, want an error with %q", c.line, err, c.err)
		}
	}
}

// recorder is a testing.TB that keeps what the logger reports.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Log(...any) {}

// The shared test logger fails the test that logged a line with a key
// twice, as a node would if it added "node" for a peer to its own logger's
// "node".
func TestLoggerFailsOnDuplicateKey(t *testing.T) {
	r := &recorder{TB: t}
	log := Logger(r, zerolog.InfoLevel).With().Str("node", "a:1").Logger()
	log.Info().Str("peer", "b:2").Msg("registered with node")
	if len(r.errors) != 0 {
		t.Fatalf("a valid line was reported: %v", r.errors)
	}
	log.Info().Str("node", "b:2").Msg("registered with node")
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], `key "node" twice`) {
		t.Fatalf("a line with node twice: reported %v, want one error naming the key", r.errors)
	}
}
