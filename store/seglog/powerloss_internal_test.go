package seglog

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storetest"
	"github.com/echopubsub/echopubsub/test"
)

// TestSeglogSurvivesPowerLoss: storetest.PowerLoss on a log whose files
// lose, at each crash point, every write no fdatasync covered (dropped,
// torn at a byte, or kept in some sectors only): small segments, so that
// commits rotate segments and trims remove them. Half the recoveries lose
// power again during their own Open (at its 1st to 4th operation); a
// quarter start from a process killed instead (its writes kept in the page
// cache, not durable), reopened and written to before the power fails.
func TestSeglogSurvivesPowerLoss(t *testing.T) {
	var last *crashFS
	dir := ""
	log := test.Logger(t, zerolog.ErrorLevel)
	open := func(fs *crashFS) (*Store, error) {
		return Open(dir, WithSegmentSize(MinSegmentSize), WithLogger(log), func(o *options) { o.fs = fs })
	}
	fig := storetest.PowerLoss(t, storetest.PowerLossHarness{
		Points: 300,
		Open: func(t *testing.T, crashAt int) (echopubsub.Store, func() int) {
			dir = filepath.Join(t.TempDir(), "log")
			last = newCrashFS(crashAt)
			s, err := open(last)
			if err != nil {
				t.Fatal(err)
			}
			return s, last.Ops
		},
		Recover: func(t *testing.T, seed int64) (echopubsub.Store, error) {
			img := last.image(seed)
			switch seed % 4 {
			case 1, 3: // the power fails again during this Open (its tail cut, its fdatasync)
				img.crashAt = 1 + int(seed/2%4)
				if s, err := open(img); err == nil {
					_ = s.Close()
				}
				img = img.image(seed + 1<<20)
			case 2: // the process was killed (the page cache kept its writes), reopened, wrote, then the power failed
				img = last.killImage()
				s, err := open(img)
				if err != nil {
					return nil, err
				}
				err = s.AppendAt(context.Background(), nil, store.ProducerPosition{Node: "after-kill", Group: 1, Incarnation: 1, Next: 1})
				if cerr := s.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return nil, err
				}
				img = img.image(seed + 1<<20)
			}
			s, err := open(img)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
	})
	t.Logf("power loss: %d crash points over a run of %d operations, %d states recovered; %d rows acknowledged, %d read before the crash; %d acknowledged rows read back after (the rest trimmed), 0 lost, 0 torn served, 0 cursors reused",
		fig.Points, fig.Ops, fig.Images, fig.Acked, fig.Seen, fig.Survived)
}

// TestSeglogRepairSurvivesPowerLoss: a repair (WithRepair) of a bit
// flipped in the first of several sealed segments, stopped by a power
// loss at each of its operations in turn: the next Open with WithRepair
// succeeds on whatever survived, and then every cursor of the 200 rows
// handed out holds its row or, for the one hit, a gap row; the next row
// gets cursor 201 (none reused).
func TestSeglogRepairSurvivesPowerLoss(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	log := test.Logger(t, zerolog.ErrorLevel)
	open := func(fs *crashFS, repair bool) (*Store, error) {
		return Open(dir, WithSegmentSize(MinSegmentSize), WithLogger(log), WithRepair(repair), func(o *options) { o.fs = fs })
	}
	base := newCrashFS(0)
	s, err := open(base, false)
	if err != nil {
		t.Fatal(err)
	}
	payload := func(i int) []byte { return []byte(fmt.Sprintf("row %03d", i)) }
	for i := 1; i <= 200; i++ {
		if err := s.Append(context.Background(), []echopubsub.Record{{Stream: "a", Kind: echopubsub.RecordMessage, PayloadType: "t", Payload: payload(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	seg := base.files[filepath.Join(dir, segName(1))]
	at := bytes.Index(seg.synced, payload(20))
	seg.data[at] ^= 1
	seg.synced[at] ^= 1
	calib := base.image(0)
	if s, err = open(calib, true); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	total := calib.Ops()
	for k := 1; k <= total; k++ {
		crashed := base.image(0)
		crashed.crashAt = k
		if s, err := open(crashed, true); err == nil {
			_ = s.Close()
		}
		for seed := int64(0); seed < 3; seed++ {
			s, err := open(crashed.image(seed), true)
			if err != nil {
				t.Fatalf("power lost at repair operation %d of %d (seed %d): the next Open with WithRepair: %v", k, total, seed, err)
			}
			recs, _, err := s.Read(context.Background(), "a", 1, 1000)
			if err != nil || len(recs) != 200 {
				t.Fatalf("power lost at repair operation %d (seed %d): %d rows, %v; want the 200 handed out", k, seed, len(recs), err)
			}
			for i, r := range recs {
				if i+1 == 20 && r.Kind != echopubsub.RecordGap || i+1 != 20 && !bytes.Equal(r.Payload, payload(i+1)) {
					t.Fatalf("power lost at repair operation %d (seed %d): cursor %d holds %+v", k, seed, r.Cursor, r)
				}
			}
			more := []echopubsub.Record{{Stream: "a", Kind: echopubsub.RecordMessage, PayloadType: "t", Payload: []byte("after")}}
			if err := s.Append(context.Background(), more); err != nil || more[0].Cursor != 201 {
				t.Fatalf("power lost at repair operation %d (seed %d): append: cursor %d, %v", k, seed, more[0].Cursor, err)
			}
			_ = s.Close()
		}
	}
	t.Logf("a repair stopped at each of its %d operations, 3 states each: every next Open with WithRepair kept the 199 rows and told the one lost", total)
}
