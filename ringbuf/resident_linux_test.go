package ringbuf

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestNewRingIsResident: New touches the ring's memory, so the writes that
// fill it take no page faults (see New). The process's resident set grows
// by the ring's size at New, not as it is written.
func TestNewRingIsResident(t *testing.T) {
	const capacity = 4 << 20 // 4 Mi slots of 8 + 8 bytes: 64 MiB
	before := residentBytes(t)
	r, err := New[uint64](capacity)
	if err != nil {
		t.Fatal(err)
	}
	grew := residentBytes(t) - before
	want := int64(capacity * 16 * 8 / 10) // 80 % of it: other allocations come and go
	if grew < want {
		t.Fatalf("resident set grew by %d bytes at New, want >= %d (the ring's memory untouched)", grew, want)
	}
	_ = r.Cap()
}

// residentBytes is this process's VmRSS.
func residentBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}
