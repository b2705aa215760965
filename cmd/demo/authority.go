package main

import (
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/cmd/demo/scorepb"
)

// Authority is the source of truth: the match's real score, held by the
// demo's parent process. It is the parent's because the parent is never cut
// off (it is not behind a proxy), like the database of a real deployment:
// a node only reads it to recover after it was told it fell behind, and
// never learns goals from it otherwise. Safe for concurrent use.
type Authority struct {
	mu    sync.Mutex
	score *scorepb.Score
	rng   *rand.Rand
}

// NewAuthority returns a match at 0-0.
func NewAuthority() *Authority {
	return &Authority{score: &scorepb.Score{}, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 6))}
}

// Goal records one goal for a random team and returns the new score.
func (a *Authority) Goal(now time.Time) *scorepb.Score {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := proto.Clone(a.score).(*scorepb.Score)
	s.Goal++
	if a.rng.IntN(2) == 0 {
		s.Home++
		s.Scorer = "home"
	} else {
		s.Away++
		s.Scorer = "away"
	}
	s.ScoredAtUnixMs = now.UnixMilli()
	a.score = s
	return proto.Clone(s).(*scorepb.Score)
}

// Truth returns the current score.
func (a *Authority) Truth() *scorepb.Score {
	a.mu.Lock()
	defer a.mu.Unlock()
	return proto.Clone(a.score).(*scorepb.Score)
}

func marshalScore(s *scorepb.Score) ([]byte, error) { return protojson.Marshal(s) }

func unmarshalScore(b []byte, s *scorepb.Score) error { return protojson.Unmarshal(b, s) }
