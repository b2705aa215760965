package prop

import (
	"math/rand/v2"
	"testing"
)

func newT(t *testing.T, seed uint64) *T {
	return &T{TB: t, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// TestDrawsStayInRangeAndReachTheBounds: every draw is in its range, and a
// wide range gives both bounds and small values (uniform draws alone
// would almost never give them).
func TestDrawsStayInRangeAndReachTheBounds(t *testing.T) {
	pt := newT(t, 1)
	const lo, hi = -5, 1_000_000_000
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		v := IntRange(lo, hi).Draw(pt, "v")
		if v < lo || v > hi {
			t.Fatalf("IntRange(%d, %d) drew %d", lo, hi, v)
		}
		seen["lo"] = seen["lo"] || v == lo
		seen["hi"] = seen["hi"] || v == hi
		seen["small"] = seen["small"] || (v > lo+1 && v < lo+100)
		if u := Uint64().Draw(pt, "u"); u == ^uint64(0) {
			seen["max"] = true
		}
	}
	for _, k := range []string{"lo", "hi", "small", "max"} {
		if !seen[k] {
			t.Errorf("1,000 draws never gave %s", k)
		}
	}
}

// TestSeedReplaysTheCase: the seed a failure prints draws the same values.
func TestSeedReplaysTheCase(t *testing.T) {
	draw := func(seed uint64) []int {
		pt := newT(t, seed)
		var out []int
		for i := 0; i < 20; i++ {
			out = append(out, IntRange(0, 1<<20).Draw(pt, "v"))
		}
		return out
	}
	a, b := draw(42), draw(42)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 42 drew %v, then %v", a, b)
		}
	}
}

// A case the property skips is discarded, not the whole test: the cases
// after it still run (rapid's Skip does the same).
func TestSkipDiscardsOnlyTheCase(t *testing.T) {
	ran, skipped := 0, 0
	t.Run("property", func(t *testing.T) { // a skipped subtest must not hide the count below
		CheckN(t, 200, func(t *T) {
			if IntRange(0, 1).Draw(t, "skip") == 0 {
				skipped++
				t.Skip("discarded")
			}
			ran++
		})
	})
	if ran == 0 || skipped == 0 || ran+skipped != 200 {
		t.Fatalf("ran %d and skipped %d of 200 cases, want both some, 200 in all", ran, skipped)
	}
}
