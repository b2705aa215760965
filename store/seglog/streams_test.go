package seglog_test

import (
	"path/filepath"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/seglog"
	"github.com/echopubsub/echopubsub/store/storetest"
)

// TestSeglogStreams: seglog lists its streams (echopubsub.StreamLister),
// also once its index is rebuilt by a reopen.
func TestSeglogStreams(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	open := func(t *testing.T) echopubsub.Store {
		s, err := seglog.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	storetest.Streams(t, storetest.Harness{Open: open, Reopen: func(t *testing.T, s echopubsub.Store) echopubsub.Store {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return open(t)
	}})
}
