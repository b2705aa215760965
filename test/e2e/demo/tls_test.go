//go:build unix

package demo

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/internal/proc"
)

// apiState is the part of /api/state this test reads.
type apiState struct {
	Converged bool `json:"converged"`
	Truth     struct {
		Goal uint64 `json:"goal"`
	} `json:"truth"`
	Nodes []struct {
		Index int    `json:"index"`
		Link  string `json:"link"`
		Held  int    `json:"held"`
		Board struct {
			Board struct {
				Goal uint64 `json:"goal"`
			} `json:"board"`
			Replayed int `json:"replayed"`
			Reloads  int `json:"reloads"`
			Gaps     int `json:"gaps"`
		} `json:"board"`
	} `json:"nodes"`
}

func readState(url string) (apiState, error) {
	var s apiState
	res, err := http.Get(url + "api/state")
	if err != nil {
		return s, err
	}
	defer res.Body.Close()
	return s, json.NewDecoder(res.Body).Decode(&s)
}

func (s apiState) allAt() bool {
	for _, n := range s.Nodes {
		if n.Board.Board.Goal != s.Truth.Goal || n.Board.Gaps != 0 {
			return false
		}
	}
	return s.Converged && s.Truth.Goal >= 1
}

// TestDemoOverTLS: `demo -tls` runs the cluster over mutual TLS (node
// processes, certificates from a throw-away CA, through the demo's
// proxies): every node follows the match, and a node cut off and back is
// replayed what it missed.
func TestDemoOverTLS(t *testing.T) {
	url, _ := runDemo(t, buildDemo(t), "-tls")
	until := func(what string, timeout time.Duration, cond func(apiState) bool) apiState {
		t.Helper()
		var s apiState
		var err error
		if !proc.Until(timeout, 100*time.Millisecond, func() bool { s, err = readState(url); return err == nil && cond(s) }) {
			t.Fatalf("not within %v: %s (last state %+v, error %v)", timeout, what, s, err)
		}
		return s
	}
	until("every node at the true score", 60*time.Second, func(s apiState) bool { return s.allAt() && s.Truth.Goal >= 2 })
	post := func(path string) {
		t.Helper()
		res, err := http.Post(url+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode/100 != 2 {
			t.Fatalf("POST %s: %s", path, res.Status)
		}
	}
	post("api/nodes/2/offline")
	until("messages held for node 2", 30*time.Second, func(s apiState) bool {
		for _, n := range s.Nodes {
			if n.Index == 2 && n.Held >= 1 {
				return true
			}
		}
		return false
	})
	post("api/nodes/2/online")
	// What the peers held for node 2 was delivered (replayed: counted as
	// "replayed" by the board only when it arrived a second or more late,
	// which a quick reconnect does not reach), or, when more goals than the
	// buffer holds fell while it was away, told and reloaded: either way
	// nothing is held for it any more and its board is at the true score,
	// never with a gap (allAt requires 0 gaps on every board).
	until("node 2 caught up (nothing held for it) and every node at the true score", 60*time.Second, func(s apiState) bool {
		for _, n := range s.Nodes {
			if n.Index == 2 && n.Held != 0 {
				return false
			}
		}
		return s.allAt()
	})
}
