// Command sessionnode is the node of the session soak (package sessionsoak):
// one EchoPubSub node with a durable topic in a store (store/bolt, one file
// per node that outlives its processes, or a shared PostgreSQL), driven by
// the chaos protocol (package test/chaos: JSON lines on stdin and stdout,
// the same flags as chaosnode). Its publishers broadcast numbered stamps on
// the durable topic; its owners hold one session each, subscribed
// WithFrom, and ack at random. Everything goes to the node's record
// (chaos.Recorder: B lines for publishes, the session lines of
// test/chaos/sessions.go). It lives in test/e2e because the root module
// links no store backend; the proxy stays chaosnode's.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	var cfg nodeFlags
	flag.StringVar(&cfg.name, "name", "n0", "label of this node in reports (publisher and owner names)")
	flag.IntVar(&cfg.incarnation, "incarnation", 1, "process incarnation (1 on first start, +1 on each restart)")
	flag.StringVar(&cfg.listen, "listen", "127.0.0.1:0", "host:port the remote binds")
	flag.StringVar(&cfg.advertise, "advertise", "", "host:port other nodes reach this one at (a proxy); defaults to -listen")
	flag.StringVar(&cfg.peers, "peers", "", "comma-separated advertised addresses of every node, this one included")
	flag.IntVar(&cfg.buffer, "buffer", 10_000, "Config.BufferSize")
	flag.IntVar(&cfg.pool, "pool", 2, "Config.PoolSize")
	flag.DurationVar(&cfg.batch, "batch-interval", 0, "Config.BatchInterval (0: library default)")
	flag.DurationVar(&cfg.callTimeout, "call-timeout", 0, "Config.CallTimeout (0: library default)")
	flag.DurationVar(&cfg.retry, "retry", 0, "Config.RetryInterval (0: library default)")
	flag.StringVar(&cfg.level, "log-level", "info", "zerolog level for stderr")
	flag.StringVar(&cfg.record, "record", "", "append-only record of every publish and of what each owner receives and commits")
	flag.StringVar(&cfg.bolt, "bolt", "", "the node's store/bolt file (kept across restarts); exclusive with -dsn")
	flag.StringVar(&cfg.dsn, "dsn", "", "the cluster's shared PostgreSQL (store/postgres); exclusive with -bolt")
	flag.Float64Var(&cfg.ackProb, "ack-prob", 0.3, "probability that an owner acks everything outstanding when an envelope arrives")
	flag.DurationVar(&cfg.ackEvery, "ack-every", 200*time.Millisecond, "an owner also acks everything outstanding this often")
	flag.IntVar(&cfg.softQueue, "soft-queue", 0, "Config.SoftQueue (0: library default)")
	flag.IntVar(&cfg.hardQueue, "hard-queue", 0, "Config.HardQueue (0: library default)")
	flag.Uint64Var(&cfg.retainRows, "retention-rows", 0, "WithRetention(Retention{MaxRows}) (0: no retention)")
	flag.DurationVar(&cfg.retainEvery, "retention-interval", 0, "Config.RetentionInterval (0: library default)")
	flag.StringVar(&cfg.rows, "rows", "", "the rows log: a copy of the store's rows as they appear (sessionsoak.RowLog), kept across restarts")
	flag.Parse()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if err := runNode(cfg, os.Stdin, os.Stdout, sig); err != nil {
		fmt.Fprintln(os.Stderr, "sessionnode:", err)
		os.Exit(1)
	}
}
