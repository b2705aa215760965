// Command chaosnode is the node the chaos tests run as a separate OS
// process: one EchoPubSub node (or, with -proxy, the fault-injecting TCP
// proxy) driven by JSON lines on stdin, answering and reporting with JSON
// lines on stdout. Logs go to stderr. See package chaos for the protocol.
//
// It is built by the tests (go build into a temporary directory); it is not
// meant to be run by hand, though it can be:
//
//	echo '{"id":1,"op":"status"}' | chaosnode -name n0 -listen 127.0.0.1:7100 -peers 127.0.0.1:7100
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	var cfg nodeFlags
	proxy := flag.Bool("proxy", false, "run the fault-injecting TCP proxy instead of a node")
	flag.StringVar(&cfg.name, "name", "n0", "label of this node in reports (publisher and subscriber names)")
	flag.IntVar(&cfg.incarnation, "incarnation", 1, "process incarnation (1 on first start, +1 on each restart)")
	flag.StringVar(&cfg.listen, "listen", "127.0.0.1:0", "host:port the remote binds")
	flag.StringVar(&cfg.advertise, "advertise", "", "host:port other nodes reach this one at (a proxy); defaults to -listen")
	flag.StringVar(&cfg.peers, "peers", "", "comma-separated advertised addresses of every node, this one included")
	flag.IntVar(&cfg.buffer, "buffer", 10_000, "Config.BufferSize")
	flag.IntVar(&cfg.pool, "pool", 2, "Config.PoolSize")
	flag.DurationVar(&cfg.batch, "batch-interval", -1, "Config.BatchInterval, 0 included (negative: library default)")
	flag.DurationVar(&cfg.callTimeout, "call-timeout", 0, "Config.CallTimeout (0: library default)")
	flag.DurationVar(&cfg.retry, "retry", 0, "Config.RetryInterval (0: library default)")
	flag.DurationVar(&cfg.presenceDownAfter, "presence-down-after", 0, "run a presence tracker with this presence.Config.DownAfter, and its churn (0: none)")
	flag.StringVar(&cfg.level, "log-level", "info", "zerolog level for stderr")
	flag.StringVar(&cfg.record, "record", "", "append-only record of every publish and reception (the soak's verdict is checked from it)")
	flag.Parse()

	// SIGTERM/SIGINT end the process cleanly; the harness uses "quit" or SIGKILL.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)

	var err error
	if *proxy {
		err = runProxy(os.Stdin, os.Stdout, sig)
	} else {
		err = runNode(cfg, os.Stdin, os.Stdout, sig)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosnode:", err)
		os.Exit(1)
	}
}
