package seglog

import (
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/storetest"
	"github.com/echopubsub/echopubsub/test"
)

// TestSeglogSurvivesPowerLoss: storetest.PowerLoss on a log whose files
// lose, at each crash point, every write no fdatasync covered (dropped,
// torn at a byte, or kept in some sectors only): small segments, so that
// commits rotate segments and trims remove them.
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
			s, err := open(last.image(seed))
			if err != nil {
				return nil, err
			}
			return s, nil
		},
	})
	t.Logf("power loss: %d crash points over a run of %d operations, %d states recovered; %d rows acknowledged, %d read before the crash; %d acknowledged rows read back after (the rest trimmed), 0 lost, 0 torn served, 0 cursors reused",
		fig.Points, fig.Ops, fig.Images, fig.Acked, fig.Seen, fig.Survived)
}
