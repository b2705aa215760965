package main

import (
	"bytes"
	"flag"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// parse parses args as main does (without exiting on an error).
func parse(t *testing.T, args ...string) (Config, bool, *flag.FlagSet) {
	t.Helper()
	cfg := DefaultConfig()
	var chat bool
	fs := newFlagSet(&cfg, &chat, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return cfg, chat, fs
}

// An unknown log level is refused with the levels there are.
func TestLogLevelErrorListsTheLevels(t *testing.T) {
	cfg, _, _ := parse(t, "-log", "verbose")
	err := cfg.Validate()
	if err == nil {
		t.Fatal("-log verbose: no error")
	}
	for _, want := range []string{`"verbose"`, "trace, debug, info, warn, error, fatal, panic, disabled"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("-log verbose: %q does not name %q", err, want)
		}
	}
	for _, l := range logLevels {
		if _, err := zerolog.ParseLevel(l); err != nil {
			t.Errorf("listed level %q is not a zerolog level: %v", l, err)
		}
		if cfg, _, _ := parse(t, "-log", l); cfg.Validate() != nil {
			t.Errorf("-log %s refused: %v", l, cfg.Validate())
		}
	}
}

// -chat runs two nodes of its own: a ScoreBoard flag with it is refused,
// naming the flag and its value; its own flags pass.
func TestChatRefusesFlagsItCannotUse(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-chat", "-nodes", "5"}, "-nodes 5 does not apply"},
		{[]string{"-tls", "-chat"}, "-tls true does not apply"},
		{[]string{"-chat", "-consul", "127.0.0.1:8500"}, "-consul 127.0.0.1:8500 does not apply"},
	} {
		_, chat, fs := parse(t, c.args...)
		if err := chatFlagsOnly(fs); !chat || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: chat %v, error %v; want it refused: %q", c.args, chat, err, c.want)
		}
	}
	if _, _, fs := parse(t, "-chat", "-port", "0", "-log", "info"); chatFlagsOnly(fs) != nil {
		t.Errorf("-chat -port 0 -log info refused: %v", chatFlagsOnly(fs))
	}
}

var consoleTime = regexp.MustCompile(`^(\d\d):(\d\d):(\d\d)\.(\d\d\d) `)

// The demo's log lines carry the time to the millisecond: the line's time
// lies between the clock read before and after it, to the millisecond.
func TestDemoLogTimesHaveMilliseconds(t *testing.T) {
	var buf bytes.Buffer
	log := newLogTo(&buf, true, zerolog.InfoLevel).Logger()
	if time.Now().Nanosecond() < int(2*time.Millisecond) {
		time.Sleep(3 * time.Millisecond) // not at .000-.002, where a clock without ms would pass
	}
	before := time.Now().Truncate(time.Millisecond)
	log.Info().Msg("hello")
	after := time.Now()
	m := consoleTime.FindStringSubmatch(buf.String())
	if m == nil {
		t.Fatalf("log line has no hh:mm:ss.mmm time: %q", buf.String())
	}
	at, err := time.ParseInLocation("2006-01-02 15:04:05.000", before.Format("2006-01-02")+" "+m[1]+":"+m[2]+":"+m[3]+"."+m[4], time.Local)
	if err != nil {
		t.Fatal(err)
	}
	if at.Before(before) || at.After(after) {
		t.Fatalf("log line's time %s is not between %s and %s: %q", at.Format("15:04:05.000"),
			before.Format("15:04:05.000"), after.Format("15:04:05.000"), buf.String())
	}
}
