package test

import (
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// Logger returns a zerolog logger that writes through t.Log, so output only
// shows when the test fails, and that goes quiet once the test is over
// (actors may still log while they stop).
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
	return zerolog.New(zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: "15:04:05.000"}).
		Level(level).With().Timestamp().Logger(), w
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
