//go:build !unix

package storetest

import "time"

// cpuTime is 0 outside unix (no getrusage): cpu-cores reads 0.
func cpuTime() time.Duration { return 0 }
