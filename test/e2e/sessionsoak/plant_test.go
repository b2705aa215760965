package sessionsoak_test

import (
	"context"
	"testing"
	"time"

	"github.com/echopubsub/echopubsub/internal/plant"
	"github.com/echopubsub/echopubsub/test/chaos"
	"github.com/echopubsub/echopubsub/test/e2e/sessionsoak"
)

// sessionPlant is one planted session defect and the violation the
// verdict must name.
type sessionPlant struct {
	defect string
	named  func(c *chaos.SessionCheck) bool
}

var sessionPlants = []sessionPlant{
	// A catch-up row skipped: message rows jumped over, no notice.
	{plant.CatchUpSkip, func(c *chaos.SessionCheck) bool { return c.SilentGaps > c.GapRowsJumped }},
	// A resumed session starts one below WithFrom: the row its owner
	// committed and acked last comes again.
	{plant.ResumeRedeliver, func(c *chaos.SessionCheck) bool { return c.RedeliveredAfterAck > 0 }},
	// A gap row passed over without its StreamGap.
	{plant.GapNoticeLost, func(c *chaos.SessionCheck) bool { return c.GapRowsJumped > 0 }},
}

// TestSessionSoakCatchesPlantedDefects builds the session node with -tags
// plantdefect and runs a short bolt soak (kill -9 and restart, a proxy
// cut) with each session defect of internal/plant planted: the verdict
// must fail, naming the defect's violation.
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
			o := options(t, sessionsoak.StoreBolt, nil, node, proxy, 5000)
			o.Kinds = []string{chaos.FaultKill, chaos.FaultProxyCut}
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
