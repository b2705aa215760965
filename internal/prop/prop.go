// Package prop runs property tests: a check function is called on many
// random cases, each drawing its inputs from generators (IntRange,
// SampledFrom, ...), and a failing case is reported with the seed that
// replays it and the values it drew.
//
// It stands in for pgregory.net/rapid, whose API it follows (Check,
// Gen.Draw, the generator names), so that the root module requires no
// module that only its tests use: every require of the released go.mod
// is in every adopter's module graph (test/modgraph's
// TestAdopterModuleGraph checks it). Unlike rapid it does not shrink a
// failing case: it prints the case's seed and its draws instead.
//
// Draws lean to the edges and to small values: a range gives its bounds
// (and values next to them) about one time in four, an offset from its
// low bound of a uniformly chosen bit length three times in eight (small
// offsets as often as large ones), and the rest uniformly.
//
// Environment: ECHOPUBSUB_PROP_SEED sets the first case's seed (the seed
// a failure printed replays that case first); ECHOPUBSUB_PROP_CHECKS the
// number of cases (default 100).
package prop

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// DefaultChecks is the number of cases Check runs when
// ECHOPUBSUB_PROP_CHECKS does not say.
const DefaultChecks = 100

// T is one case of a property: the test's testing.TB (fail it as usual)
// and the case's random source. Not safe for concurrent use.
type T struct {
	testing.TB
	rnd   *rand.Rand
	draws []string
}

// maxShown bounds the draws a failure report lists.
const maxShown = 60

func (t *T) record(label string, v any) {
	if len(t.draws) < maxShown {
		s := fmt.Sprint(v)
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		t.draws = append(t.draws, label+"="+s)
	} else if len(t.draws) == maxShown {
		t.draws = append(t.draws, "...")
	}
}

// Check runs prop on DefaultChecks random cases (or
// ECHOPUBSUB_PROP_CHECKS) and stops at the first that fails the test,
// logging its seed and draws.
func Check(t *testing.T, prop func(*T)) {
	t.Helper()
	CheckN(t, DefaultChecks, prop)
}

// CheckN is Check with checks cases instead of DefaultChecks, for a
// property cheap enough to run many more (ECHOPUBSUB_PROP_CHECKS still
// overrides it).
func CheckN(t *testing.T, checks int, prop func(*T)) {
	t.Helper()
	if s := os.Getenv("ECHOPUBSUB_PROP_CHECKS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("ECHOPUBSUB_PROP_CHECKS must be a positive integer, got %q", s)
		}
		checks = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ECHOPUBSUB_PROP_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ECHOPUBSUB_PROP_SEED must be an unsigned integer, got %q", s)
		}
		seed = v
	}
	for i := 0; i < checks; i++ {
		if !runCase(t, seed+uint64(i), prop) {
			return
		}
	}
}

// runCase runs one case; it reports whether the test still passes. The
// report is deferred so that it is written on t.Fatal (runtime.Goexit)
// and on a panic too.
func runCase(t *testing.T, seed uint64, prop func(*T)) (ok bool) {
	t.Helper()
	pt := &T{TB: t, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	defer func() {
		if t.Failed() {
			t.Logf("prop: failing case: seed %d (ECHOPUBSUB_PROP_SEED=%d replays it first); draws: %s",
				seed, seed, strings.Join(pt.draws, " "))
		}
	}()
	if discarded := runDiscardable(pt, prop); discarded {
		return true
	}
	return !t.Failed()
}

// discard is what T.Skip panics with: the case is discarded, as rapid
// does, and the next one runs (testing.TB's Skip would end the whole test).
type discard struct{}

// runDiscardable runs prop on pt and reports whether it discarded its case.
func runDiscardable(pt *T, prop func(*T)) (discarded bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(discard); !ok {
				panic(r)
			}
			discarded = true
		}
	}()
	prop(pt)
	return false
}

// Skip discards this case (the draws did not make one worth checking);
// the property goes on with the next.
func (t *T) Skip(args ...any) { panic(discard{}) }

// Skipf discards this case, like Skip.
func (t *T) Skipf(format string, args ...any) { panic(discard{}) }

// SkipNow discards this case, like Skip.
func (t *T) SkipNow() { panic(discard{}) }

// Gen draws values of type V.
type Gen[V any] struct{ draw func(r *rand.Rand) V }

// Draw draws a value for the case t; label names it in a failure report.
func (g Gen[V]) Draw(t *T, label string) V {
	v := g.draw(t.rnd)
	t.record(label, v)
	return v
}

// uint64Range draws from [lo, hi] (see the package doc for how).
func uint64Range(r *rand.Rand, lo, hi uint64) uint64 {
	if lo > hi {
		panic(fmt.Sprintf("prop: empty range [%d, %d]", lo, hi))
	}
	if r.IntN(4) == 0 {
		switch r.IntN(4) {
		case 0:
			return lo
		case 1:
			return hi
		case 2:
			if lo < hi {
				return lo + 1
			}
			return lo
		default:
			if lo < hi {
				return hi - 1
			}
			return hi
		}
	}
	span := hi - lo
	if r.IntN(2) == 0 {
		n := r.IntN(bits.Len64(span) + 1)
		v := r.Uint64() >> (64 - n) // n = 0: 0
		if v > span {
			v = span
		}
		return lo + v
	}
	if span == ^uint64(0) {
		return r.Uint64()
	}
	return lo + r.Uint64N(span+1)
}

// int64Range draws from [lo, hi] like uint64Range.
func int64Range(r *rand.Rand, lo, hi int64) int64 {
	if lo > hi {
		panic(fmt.Sprintf("prop: empty range [%d, %d]", lo, hi))
	}
	return lo + int64(uint64Range(r, 0, uint64(hi-lo)))
}

// IntRange draws an int in [min, max].
func IntRange(min, max int) Gen[int] {
	return Gen[int]{func(r *rand.Rand) int { return int(int64Range(r, int64(min), int64(max))) }}
}

// Int64Range draws an int64 in [min, max].
func Int64Range(min, max int64) Gen[int64] {
	return Gen[int64]{func(r *rand.Rand) int64 { return int64Range(r, min, max) }}
}

// Uint64Range draws a uint64 in [min, max].
func Uint64Range(min, max uint64) Gen[uint64] {
	return Gen[uint64]{func(r *rand.Rand) uint64 { return uint64Range(r, min, max) }}
}

// Uint32Range draws a uint32 in [min, max].
func Uint32Range(min, max uint32) Gen[uint32] {
	return Gen[uint32]{func(r *rand.Rand) uint32 { return uint32(uint64Range(r, uint64(min), uint64(max))) }}
}

// Uint64 draws any uint64, small values and the maximum among them.
func Uint64() Gen[uint64] {
	return Gen[uint64]{func(r *rand.Rand) uint64 {
		if r.IntN(4) == 0 {
			return uint64Range(r, 0, 256)
		}
		return uint64Range(r, 0, ^uint64(0))
	}}
}

// Uint32 draws any uint32, small values and the maximum among them.
func Uint32() Gen[uint32] {
	return Gen[uint32]{func(r *rand.Rand) uint32 {
		if r.IntN(4) == 0 {
			return uint32(uint64Range(r, 0, 256))
		}
		return uint32(uint64Range(r, 0, 1<<32-1))
	}}
}

// Bool draws true or false.
func Bool() Gen[bool] {
	return Gen[bool]{func(r *rand.Rand) bool { return r.IntN(2) == 0 }}
}

// Byte draws any byte.
func Byte() Gen[byte] {
	return Gen[byte]{func(r *rand.Rand) byte { return byte(uint64Range(r, 0, 255)) }}
}

// SampledFrom draws one of values (which must not be empty).
func SampledFrom[V any](values []V) Gen[V] {
	if len(values) == 0 {
		panic("prop: SampledFrom of no values")
	}
	return Gen[V]{func(r *rand.Rand) V { return values[r.IntN(len(values))] }}
}

// SliceOfN draws a slice of min to max elements of elem (max < 0: up to
// min+100).
func SliceOfN[V any](elem Gen[V], min, max int) Gen[[]V] {
	if max < 0 {
		max = min + 100
	}
	return Gen[[]V]{func(r *rand.Rand) []V {
		out := make([]V, int64Range(r, int64(min), int64(max)))
		for i := range out {
			out[i] = elem.draw(r)
		}
		return out
	}}
}
