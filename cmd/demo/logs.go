package main

import (
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
)

// newLog is the demo's logger: readable lines on stderr, coloured only on a
// terminal (a file, a pipe or NO_COLOR gets plain text, no ANSI escapes).
// Keys keep one meaning: "node_index" is the demo's number of a node (the
// node itself in a node process, whose library logs add "node", its
// address, and "peer" for another node).
func newLog(level zerolog.Level) zerolog.Context {
	return newLogTo(os.Stderr, !colour(os.Stderr), level)
}

// newLogTo is newLog writing to out. Each line's time has milliseconds:
// zerolog's own timestamp has whole seconds (zerolog.TimeFieldFormat is RFC 3339), so
// the console's ".000" would always print 000; the demo sets the time itself
// rather than change zerolog's global format for the library too.
func newLogTo(out io.Writer, noColor bool, level zerolog.Level) zerolog.Context {
	w := zerolog.ConsoleWriter{Out: out, TimeFormat: "15:04:05.000", NoColor: noColor}
	return zerolog.New(w).Level(level).Hook(msTimestamp{}).With()
}

// msTimestamp adds the time, to the millisecond, to every line. The
// console writer parses it with zerolog's RFC 3339 layout, which takes a
// fraction of a second too.
type msTimestamp struct{}

func (msTimestamp) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().Format("2006-01-02T15:04:05.000Z07:00"))
}

// colour reports whether f is a terminal and NO_COLOR (no-color.org) is
// not set.
func colour(f *os.File) bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
