package test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// Logger returns a zerolog logger that writes through t.Log, so output only
// shows when the test fails, and that goes quiet once the test is over
// (actors may still log while they stop). Every line is checked as a
// machine would read it: a line that is not one JSON object, or that has a
// key twice in one object (a parser keeps one of them), fails the test.
func Logger(t testing.TB, level zerolog.Level) zerolog.Logger {
	log, _ := newLogger(t, level, false)
	return log
}

// CapturingLogger is Logger that also keeps what was logged, for tests that
// assert on what a node said.
func CapturingLogger(t testing.TB, level zerolog.Level) (zerolog.Logger, *Captured) {
	return newLogger(t, level, true)
}

func newLogger(t testing.TB, level zerolog.Level, keep bool) (zerolog.Logger, *Captured) {
	w := &Captured{t: t, keep: keep}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	console := zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: "15:04:05.000"}
	return zerolog.New(keyChecked{w: w, next: console}).Level(level).With().Timestamp().Logger(), w
}

// keyChecked checks each JSON line zerolog writes (one per Write) before the
// console writer turns it into text, where a duplicate key would be gone.
type keyChecked struct {
	w    *Captured
	next zerolog.ConsoleWriter
}

func (k keyChecked) Write(p []byte) (int, error) {
	if err := CheckLogLine(p); err != nil {
		k.w.fail(err)
	}
	return k.next.Write(p)
}

// CheckLogLine returns an error when line is not a single JSON object or
// has a key twice in one object (at any depth).
func CheckLogLine(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("log line is not JSON: %w: %s", err, line)
	}
	if tok != json.Delim('{') {
		return fmt.Errorf("log line is not a JSON object: %s", line)
	}
	if err := checkObject(dec); err != nil {
		return fmt.Errorf("%w: %s", err, line)
	}
	if dec.More() {
		return fmt.Errorf("log line holds more than one JSON value: %s", line)
	}
	return nil
}

// checkObject reads the rest of an object whose '{' was read.
func checkObject(dec *json.Decoder) error {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string) // the decoder only gives strings here
		if seen[key] {
			return fmt.Errorf("log line has key %q twice", key)
		}
		seen[key] = true
		if err := checkValue(dec); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
}

func checkValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		return checkObject(dec)
	case json.Delim('['):
		for dec.More() {
			if err := checkValue(dec); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	case json.Delim('}'), json.Delim(']'):
		return errors.New("unbalanced JSON")
	}
	return nil
}

// Captured is the writer behind Logger and CapturingLogger.
type Captured struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
	keep bool
	kept strings.Builder
}

func (w *Captured) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keep {
		w.kept.Write(p)
	}
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// fail reports a malformed log line as a test failure while the test runs.
func (w *Captured) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Errorf("%v", err)
	}
}

// Contains reports whether anything logged so far contains s (only a
// CapturingLogger keeps what was logged).
func (w *Captured) Contains(s string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Contains(w.kept.String(), s)
}

// Count is how many times s occurs in what was logged so far (only a
// CapturingLogger keeps what was logged).
func (w *Captured) Count(s string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Count(w.kept.String(), s)
}

// String is what was logged so far (only a CapturingLogger keeps it).
func (w *Captured) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.kept.String()
}
