package plant

import "testing"

// A normal build plants nothing, whatever the environment says.
func TestNormalBuildPlantsNothing(t *testing.T) {
	if Enabled {
		t.Skip("built with -tags plantdefect")
	}
	t.Setenv(Env, WorkerSkip)
	var expected uint64 = 7
	AckFirst[DeliveredHook](&expected, 7, nil, "n")
	if DropLocal(true) || DropAfterResumed("s") || SkipEntry() || Advance(1, 9) != 1 || expected != 7 ||
		SkipCatchUpRow() || ResumeFrom(5) != 5 || DropGapNotice() || DropTruncatedNotice() || IgnoreAppendError() || JoinSince(5) != 5 {
		t.Fatal("a normal build planted a defect")
	}
}
