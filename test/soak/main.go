// Command soak is the long chaos soak of docs/reliability.md: node processes
// publishing under every fault kind in turn until -messages were sent, then
// the delivery checker's verdict and the figures. Run it as root to include
// the network-namespace faults (partitions, packet loss):
//
//	nice go run ./test/soak -messages 1000000
//
// The verdict is the records' (chaos.CheckRecords). It exits 1 when the
// guarantee was broken (a silent gap or a reorder), on anything unexpected
// (undecodable or other messages, an expiry for a gap in a producer's
// stream), on a false alarm, or when a fault could not be confirmed.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/echopubsub/echopubsub/test/chaos"
)

func main() {
	messages := flag.Int64("messages", 1_000_000, "broadcasts to send in total (the run also injects every fault kind once)")
	nodes := flag.Int("nodes", 3, "node processes")
	publishers := flag.Int("publishers", 2, "publishers per node")
	rate := flag.Int("rate", 300, "messages per second per publisher")
	pad := flag.Int("pad", 256, "payload padding in bytes")
	subs := flag.Int("subscribers", 2, "subscribers per node")
	slow := flag.Int("slow-subscribers", 0, "slow subscribers per node (bounded at 100 queued messages: dropped for, with BackPressure notices)")
	slowMicros := flag.Int("slow-micros", 1500, "time a slow subscriber spends on each message, in microseconds")
	buffer := flag.Int("buffer", 2000, "Config.BufferSize of every producer")
	batch := flag.Duration("batch-interval", 20*time.Millisecond, "Config.BatchInterval of every node (0 included)")
	hold := flag.Duration("hold", 10*time.Second, "how long each fault lasts")
	settle := flag.Duration("settle", 5*time.Second, "healthy time between faults")
	isolate := flag.Duration("isolate", 60*time.Second, "at the end, cut the last node off this long and sample node 0's RSS (0: skip)")
	race := flag.Bool("race", false, "build the node binary with -race")
	netns := flag.Bool("netns", chaos.DefaultNetns(), "nodes in network namespaces (root): adds partitions and packet loss")
	out := flag.String("json", "", "also write the result as JSON to this file")
	seed := flag.Int64("seed", 0, "fault schedule seed (0: time)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *messages, *nodes, *publishers, *rate, *pad, *subs, *slow, *slowMicros, *buffer, *batch, *hold, *settle, *isolate, *race, *netns, *out, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, messages int64, nodes, publishers, rate, pad, subs, slow, slowMicros, buffer int,
	batch, hold, settle, isolate time.Duration, race, netns bool, out string, seed int64) error {
	dir, err := os.MkdirTemp("", "echopubsub-soak-")
	if err != nil {
		return err
	}
	logf := func(format string, args ...interface{}) {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
	}
	logf("logs in %s", dir)
	bin, err := chaos.BuildNode(ctx, dir, race)
	if err != nil {
		return err
	}
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	res, err := chaos.RunSoak(ctx, chaos.SoakOptions{
		Cluster: chaos.ClusterOptions{Binary: bin, Dir: dir, Nodes: nodes, Netns: netns, Buffer: buffer, Pool: 2,
			BatchInterval: batch, CallTimeout: time.Second, Retry: 100 * time.Millisecond,
			LogLevel: "info", Logf: logf},
		Messages: messages, Publishers: publishers, Rate: rate, Pad: pad, Subscribers: subs,
		SlowSubscribers: slow, SlowMicros: slowMicros,
		Hold: hold, Settle: settle, Drain: 2 * time.Minute, Seed: seed, IsolateAtEnd: isolate,
	})
	if err != nil {
		return err
	}
	fmt.Printf("seed %d, race %v, netns %v, buffer %d, pad %d\n%s", seed, race, netns, buffer, pad, res.Summary())
	if out != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			return err
		}
	}
	if len(res.Skipped) > 0 {
		fmt.Printf("SKIPPED fault kinds (no root or no ip tool): %v\n", res.Skipped)
	}
	n := res.Counts
	if n.SilentGaps != 0 || n.Reorders != 0 || n.StreamGaps != 0 || n.Undecodable != 0 || n.Other != 0 {
		return fmt.Errorf("guarantee broken: %d silent gaps, %d reorders, %d expiries for a gap in a producer's stream, %d undecodable, %d other",
			n.SilentGaps, n.Reorders, n.StreamGaps, n.Undecodable, n.Other)
	}
	if n.FalseAlarms != 0 {
		return fmt.Errorf("%d false alarms: %v", n.FalseAlarms, res.FalseAlarmReasons())
	}
	return nil
}
