package ringbuf

import "testing"

func TestMarksAny(t *testing.T) {
	m := NewMarks(10)
	for _, c := range []uint64{12, 15, 15, 20} {
		m.Mark(c)
	}
	cases := []struct {
		from, to uint64
		want     bool
	}{
		{10, 12, false}, {10, 13, true}, {12, 13, true}, {13, 15, false}, {13, 16, true},
		{16, 20, false}, {16, 21, true}, {21, 100, false}, {20, 20, false},
		{9, 12, true}, // below the floor: not known
		{5, 5, false}, // empty
	}
	for _, c := range cases {
		if got := m.AnyIn(c.from, c.to); got != c.want {
			t.Errorf("AnyIn(%d, %d) = %v, want %v (marks %v, floor %d)", c.from, c.to, got, c.want, m.cs, m.floor)
		}
	}
	m.Forget(16)
	if m.Len() != 1 || m.AnyIn(16, 20) || !m.AnyIn(16, 21) || !m.AnyIn(15, 16) {
		t.Errorf("after Forget(16): marks %v floor %d", m.cs, m.floor)
	}
	m.Forget(3) // lower: no effect
	if m.floor != 16 || m.Len() != 1 {
		t.Errorf("Forget below the floor moved it: marks %v floor %d", m.cs, m.floor)
	}
}

func TestMarksBounded(t *testing.T) {
	var m Marks
	for c := uint64(0); c < MaxMarks+10; c++ {
		m.Mark(2 * c)
	}
	if m.Len() != MaxMarks {
		t.Fatalf("kept %d marks, want %d", m.Len(), MaxMarks)
	}
	// The dropped ones are below the floor: a range over them is "may".
	if !m.AnyIn(1, 2) {
		t.Errorf("a range over a dropped mark's place answered none (floor %d)", m.floor)
	}
	last := 2 * uint64(MaxMarks+9)
	if m.AnyIn(last+1, last+100) || !m.AnyIn(last, last+1) {
		t.Errorf("the newest marks are wrong")
	}
}
