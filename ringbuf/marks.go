package ringbuf

// Marks remembers the cursors of the few writes that need a second look
// when a range of cursors is lost: for a producer, the writes no store
// keeps (a DirectBroadcast, a request), so that a node that fell behind can
// be told whether every write it missed is one its store holds. Cursors
// are marked in increasing order. It is bounded: Forget drops the marks
// below a cursor no range will start before again, and past MaxMarks the
// oldest marks are dropped; a range that starts before what was dropped
// (the floor) is answered "may contain one" (AnyIn), never "none" by
// mistake. The zero value is usable, with floor 0; NewMarks sets the floor
// for a ring that was written before marking began. Not safe for concurrent
// use; Mark and Forget do not allocate once the slice has grown.
type Marks struct {
	cs    []uint64 // marked cursors, increasing, all >= floor
	floor uint64   // nothing below it is known
}

// MaxMarks bounds how many marks are kept.
const MaxMarks = 4096

// NewMarks returns Marks that know nothing below floor (e.g. the ring's
// write cursor when marking began).
func NewMarks(floor uint64) Marks { return Marks{floor: floor} }

// Mark records cursor c, not lower than any cursor marked before.
func (m *Marks) Mark(c uint64) {
	if len(m.cs) >= MaxMarks {
		m.Forget(m.cs[0] + 1)
	}
	m.cs = append(m.cs, c)
}

// Forget drops every mark below c: no range asked about starts below c.
func (m *Marks) Forget(c uint64) {
	if c <= m.floor {
		return
	}
	m.floor = c
	i := 0
	for i < len(m.cs) && m.cs[i] < c {
		i++
	}
	if i > 0 {
		n := copy(m.cs, m.cs[i:])
		m.cs = m.cs[:n]
	}
}

// AnyIn reports whether a marked cursor may lie in [from, to): true when one
// does, or when from is below the floor (what was there is forgotten).
func (m *Marks) AnyIn(from, to uint64) bool {
	if from < m.floor {
		return from < to
	}
	for _, c := range m.cs { // few: a binary search would not pay
		if c >= to {
			return false
		}
		if c >= from {
			return true
		}
	}
	return false
}

// Len is the number of marks kept.
func (m *Marks) Len() int { return len(m.cs) }
