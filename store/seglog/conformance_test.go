package seglog_test

import (
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/seglog"
	"github.com/echopubsub/echopubsub/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSeglogConformance(t *testing.T) {
	dirs := map[echopubsub.Store]string{}
	storetest.Run(t, storetest.Harness{
		GapRows: true,
		Open: func(t *testing.T) echopubsub.Store {
			d := filepath.Join(t.TempDir(), "log")
			s, err := seglog.Open(d)
			if err != nil {
				t.Fatal(err)
			}
			dirs[s] = d
			return s
		},
		Reopen: func(t *testing.T, s echopubsub.Store) echopubsub.Store {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2, err := seglog.Open(dirs[s])
			if err != nil {
				t.Fatal(err)
			}
			dirs[s2] = dirs[s]
			return s2
		},
	})
}
