package sessionsoak_test

import (
	"context"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/store/postgres/pgtest"
	"github.com/echopubsub/echopubsub/test/chaos"
	"github.com/echopubsub/echopubsub/test/e2e/sessionsoak"
)

// sessionPlant is one planted session defect, the short soak that exposes
// it (default: bolt, kill -9 and restart, a proxy cut) and the violation
// the verdict must name.
type sessionPlant struct {
	defect string
	store  string
	kinds  []string
	named  func(c *chaos.SessionCheck) bool
}

var sessionPlants = []sessionPlant{
	// A catch-up row skipped: message rows jumped over, no notice.
	{plant.CatchUpSkip, "", nil, func(c *chaos.SessionCheck) bool { return c.SilentGaps > c.GapRowsJumped }},
	// A resumed session starts one below WithFrom: the row its owner
	// committed and acked last comes again.
	{plant.ResumeRedeliver, "", nil, func(c *chaos.SessionCheck) bool { return c.RedeliveredAfterAck > 0 }},
	// A gap row passed over without its StreamGap.
	{plant.GapNoticeLost, "", nil, func(c *chaos.SessionCheck) bool { return c.GapRowsJumped > 0 }},
	// Rows retention removed passed over without their StreamTruncated:
	// only retention exposes it (an owner closed at HardQueue comes back
	// after its rows were trimmed).
	{plant.TruncatedNoticeLost, sessionsoak.StoreBolt, []string{sessionsoak.FaultOwnerHardQueue},
		func(c *chaos.SessionCheck) bool { return c.SilentGaps > 0 }},
	// A durable broadcast whose append failed queued as if stored: only a
	// failing store exposes it (PostgreSQL down, or paused past the append
	// timeout); the store lacks messages its publisher was told were taken.
	{plant.AppendErrorIgnored, sessionsoak.StorePostgres, []string{sessionsoak.FaultPGCrash, sessionsoak.FaultPGPause},
		func(c *chaos.SessionCheck) bool { return c.StoreHoles > 0 }},
}

// TestSessionSoakCatchesPlantedDefects builds the session node with -tags
// plantdefect and runs a short soak with each session defect of
// internal/plant planted (the faults that expose it: by default a bolt
// soak with kill -9 and restart and a proxy cut): the verdict must fail,
// naming the defect's violation.
func TestSessionSoakCatchesPlantedDefects(t *testing.T) {
	if testing.Short() {
		t.Skip("short soaks: -short skips them")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	node, proxy, err := sessionsoak.Build(ctx, t.TempDir(), false, "plantdefect")
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range sessionPlants {
		t.Run(pc.defect, func(t *testing.T) {
			t.Setenv(plant.Env, pc.defect) // the node processes inherit it
			store, kinds := pc.store, pc.kinds
			if store == "" {
				store, kinds = sessionsoak.StoreBolt, []string{chaos.FaultKill, chaos.FaultProxyCut}
			}
			var pg *pgtest.Server
			if store == sessionsoak.StorePostgres {
				var err error
				if pg, err = pgtest.Start(); err != nil {
					t.Fatal(err)
				}
				defer pg.Stop()
			}
			o := options(t, store, pg, node, proxy, 5000)
			o.Kinds = kinds
			o.Drain = 30 * time.Second
			res, err := sessionsoak.Run(ctx, o)
			if err != nil {
				t.Fatalf("the soak could not run: %v", err)
			}
			t.Logf("session soak with %s planted:\n%s", pc.defect, res.Summary())
			if !res.Check.Failed() {
				t.Fatalf("planted defect %s: the session soak passed", pc.defect)
			}
			if !pc.named(res.Check) {
				t.Fatalf("planted defect %s: the soak failed, but without the defect's violation", pc.defect)
			}
		})
	}
}
