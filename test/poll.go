package test

import (
	"fmt"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/internal/proc"
)

// Eventually polls cond every few milliseconds until it holds, and fails the
// test with what() at the deadline. It never passes silently.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, what func() string) {
	t.Helper()
	if !proc.Until(timeout, 5*time.Millisecond, cond) {
		t.Fatalf("not true after %v: %s", timeout, what())
	}
}

// Never fails the test if cond becomes true within d. Use it only for "must
// not happen" checks, with a d that bounds how long the system had to do it.
func Never(t testing.TB, d time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			t.Fatalf("happened: %s", what())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Sprintf is fmt.Sprintf as a what() for Eventually.
func Sprintf(format string, args ...interface{}) func() string {
	return func() string { return fmt.Sprintf(format, args...) }
}
