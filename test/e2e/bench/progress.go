package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress draws a bar on stderr: the scenario, its repetition and the
// share of N the slowest node has counted. Without a terminal (CI) it
// prints one line per repetition instead.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	total int
	index int
	start time.Time
	last  time.Time
	quiet bool
}

func newProgress(total int, quiet bool) *progress {
	fi, err := os.Stderr.Stat()
	tty := err == nil && fi.Mode()&os.ModeCharDevice != 0
	return &progress{w: os.Stderr, tty: tty, total: total, start: time.Now(), quiet: quiet}
}

func (p *progress) next() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.index++
}

func (p *progress) update(s scenario, rep int, frac float64) {
	if p == nil || p.quiet || !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 100*time.Millisecond && frac < 1 {
		return
	}
	p.last = time.Now()
	if frac > 1 {
		frac = 1
	}
	const width = 30
	fill := int(frac * width)
	bar := strings.Repeat("#", fill) + strings.Repeat(".", width-fill)
	fmt.Fprintf(p.w, "\r\033[K[%d/%d] [%s] %3.0f%% %s rep %d  (%s)", p.index, p.total, bar, frac*100,
		s.label(), rep, time.Since(p.start).Round(time.Second))
}

func (p *progress) repDone(s scenario, rep int, rr repResult) {
	if p == nil || p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	state := fmt.Sprintf("%.0f msg/s", float64(s.N)/rr.Seconds)
	if !rr.Valid {
		state = fmt.Sprintf("INVALID unique=%v dups=%v notices=%v %s", rr.Unique, rr.Dups, rr.Notices, rr.Why)
	}
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	name := fmt.Sprintf("rep %d", rep)
	if rep == 0 {
		name = fmt.Sprintf("warm-up (%d msgs, not counted)", s.N)
	}
	fmt.Fprintf(p.w, "[%d/%d] %s %s: %s\n", p.index, p.total, s.label(), name, state)
}

func (p *progress) note(format string, args ...interface{}) {
	if p == nil || p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}
