package proc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RunQueueWait is the time the threads of process pid have spent runnable
// but waiting for a core (the second field of Linux's
// /proc/<pid>/task/<tid>/schedstat, summed over the threads alive now); 0
// where the kernel does not report it. Over an interval, with the process's
// CPU time, it tells a pipeline that waits (neither ran nor was runnable)
// from one the machine's other work kept off the cores.
func RunQueueWait(pid int) time.Duration {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil { // the thread exited meanwhile
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			sum += v
		}
	}
	return time.Duration(sum)
}
