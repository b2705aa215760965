package proc

import "time"

// Until calls cond every interval until it returns true, and reports
// whether it did before timeout (cond is called once more at the
// deadline). It is the one polling loop of the harnesses and the test kit:
// callers turn false into their error or test failure, with what they
// last saw.
func Until(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}
