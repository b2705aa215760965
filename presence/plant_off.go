//go:build !plantdefect

package presence

// plantedSkipChange is nil: no defect planted (see plant_on.go).
func plantedSkipChange() func() bool { return nil }
