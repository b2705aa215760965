package chaos

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// A record read back gives the checker what was written: a publisher first
// seen in a delivery and then defined by its publishes, a gap, a
// notice's range (one naming cursor 4, which came: a wrong range), a killed
// process's torn last line.
func TestRecordRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "n0#1.rec")
	r, err := CreateRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	d := func(seq uint64) *messages.Delivery {
		return &messages.Delivery{Node: "a:1", Group: 1, Incarnation: 9, Cursor: seq,
			Message: &testpb.Stamp{Publisher: "n0#1/p0", Seq: seq}}
	}
	r.Subscriber(0, "n0#1/s0")
	r.Subscribed(0, 5)
	r.Received(0, d(1)) // delivered locally before its publish was recorded
	for seq := uint64(1); seq <= 4; seq++ {
		r.Published("n0#1/p0", "a:1", 1, seq, int64(10+seq))
	}
	r.Received(0, d(2))
	r.Received(0, d(4)) // 3 lost, silently
	r.Received(0, &messages.CursorExpired{Node: "a:1", Group: 1, Reason: "fell behind the buffer"})
	r.Received(0, &messages.BackPressure{State: messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED})
	r.Received(0, &messages.CursorExpired{Node: "a:1", Group: 1, Reason: "fell behind the buffer", Missed: 3,
		ProducerIncarnation: 9, From: 4, To: 7})
	r.Received(0, d(7))
	r.WorkerCrash("b:2", 17)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	_, _ = f.WriteString("D 0 0 5") // a kill -9 in the middle of a write
	f.Close()

	rc, err := CheckRecords([]RecordFile{{Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	c := rc.Report.Counts
	if c.Delivered != 4 || c.SilentGaps != 2 || c.CursorGaps != 1 || c.Expiries != 2 || c.Resumed != 1 || c.FalseAlarms != 0 ||
		c.WrongRanges != 1 || c.CoveredGaps != 1 {
		t.Fatalf("counts %+v, want 4 delivered, a silent gap at 3 (publisher and cursor), 2 expiries (both explaining 5 and 6 missing; the second names 4 again: a wrong range), 1 resumed", c)
	}
	for _, v := range rc.Report.Violations {
		if v.Kind == test.RangeOver && v.Prev == 4 && v.Got == 4 {
			continue
		}
		if v.Prev != 2 || v.Got != 4 || (v.Kind != test.SilentGap && v.Kind != test.CursorGap) || v.Node != "a:1" || v.Group != 1 {
			t.Errorf("violation %v", v)
		}
	}
	if rc.Messages != 4 || rc.Publishers != 1 || rc.WorkerCrashes != 1 || rc.TornLines != 1 {
		t.Fatalf("record check %+v", rc)
	}
}
