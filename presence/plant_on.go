//go:build plantdefect

package presence

import "github.com/echopubsub/echopubsub/internal/plant"

// plantedSkipChange plants the presence_lost_diff defect (internal/plant):
// the test/chaos soak must catch the replica it leaves stale. Only this
// build-tagged file imports a package of the root's internal/.
func plantedSkipChange() func() bool { return plant.SkipPresenceChange }
