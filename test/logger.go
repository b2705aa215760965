package test

import (
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// Logger returns a zerolog logger that writes through t.Log, so output only
// shows when the test fails, and that goes quiet once the test is over
// (actors may still log while they stop).
func Logger(t testing.TB, level zerolog.Level) zerolog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return zerolog.New(zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: "15:04:05.000"}).
		Level(level).With().Timestamp().Logger()
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p[:len(p)-1]))
	}
	return len(p), nil
}
