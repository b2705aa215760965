package main

import (
	"os"

	"github.com/rs/zerolog"
)

// newLog is the demo's logger: readable lines on stderr, coloured only on a
// terminal (a file, a pipe or NO_COLOR gets plain text, no ANSI escapes).
// Keys keep one meaning: "node_index" is the demo's number of a node (the
// node itself in a node process, whose library logs add "node", its
// address, and "peer" for another node).
func newLog(level zerolog.Level) zerolog.Context {
	w := zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000", NoColor: !colour(os.Stderr)}
	return zerolog.New(w).Level(level).With().Timestamp()
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
