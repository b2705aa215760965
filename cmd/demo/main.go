// Command demo runs ScoreBoard: a cluster of EchoPubSub nodes on this
// machine, each its own OS process, following one live match, with a web
// page to cut nodes off and watch the guarantee hold.
//
//	go run ./cmd/demo            # 3 nodes, buffer 5, page on 127.0.0.1:4000
//	go run ./cmd/demo -tls       # the same over mutual TLS (throw-away CA)
//	go run ./cmd/demo -chat      # the chat demo: WebSocket gateway, replay from storage
//	go run ./cmd/demo -h         # every flag
//
// main only parses flags, validates, starts and waits for Ctrl-C; the demo
// lives in the other files of this package.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() { os.Exit(run()) }

// run is main with an exit code, so that its deferred steps (the
// terminal's restore) run before the process exits.
func run() int {
	// A node process is this binary re-executed by the demo (see children.go).
	if len(os.Args) == 3 && os.Args[1] == nodeFlag {
		if err := runNode(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "demo node:", err)
			return 1
		}
		return 0
	}

	cfg := DefaultConfig()
	var chat bool
	fs := newFlagSet(&cfg, &chat, flag.ExitOnError)
	_ = fs.Parse(os.Args[1:]) // ExitOnError

	err := cfg.Validate()
	if err == nil && chat {
		err = chatFlagsOnly(fs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, restore := stopOnKey(ctx)
	defer restore()
	if chat {
		return runChat(ctx, stop, cfg)
	}

	d, err := Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	if cfg.TLS {
		fmt.Printf("Nodes talk mutual TLS; CA and node certificates in %s (removed on exit)\n", d.TLSDir())
	}
	fmt.Printf("ScoreBoard is running: open %s (Ctrl-C stops every node)\n", d.URL())

	<-ctx.Done()
	stop()    // a second Ctrl-C now kills the demo outright
	restore() // (from the terminal too)
	fmt.Println("ScoreBoard: stopping")
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Stop(shutdown); err != nil {
		fmt.Fprintln(os.Stderr, "demo: stop:", err)
		return 1
	}
	return 0
}

// newFlagSet binds the demo's flags to cfg and chat.
func newFlagSet(cfg *Config, chat *bool, h flag.ErrorHandling) *flag.FlagSet {
	fs := flag.NewFlagSet("demo", h)
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "number of nodes, each its own OS process")
	fs.IntVar(&cfg.BufferSize, "buffer", cfg.BufferSize, "EchoPubSub buffer_size: messages a producer keeps for a node that is behind")
	fs.DurationVar(&cfg.BatchInterval, "batch", cfg.BatchInterval, "EchoPubSub batch_interval: how long a producer collects writes before flushing")
	fs.DurationVar(&cfg.GoalEvery, "goal-every", cfg.GoalEvery, "time between two automatic goals")
	fs.IntVar(&cfg.Port, "port", cfg.Port, "HTTP port of the page on 127.0.0.1 (0: any free port)")
	fs.StringVar(&cfg.Consul, "consul", cfg.Consul, "Consul agent address (host:port) for membership; empty: the embedded static membership")
	fs.BoolVar(&cfg.TLS, "tls", cfg.TLS, "run the nodes over mutual TLS, with a throw-away CA and certificates made in a temp dir")
	fs.StringVar(&cfg.LogLevel, "log", cfg.LogLevel, "log level of the demo and its nodes ("+strings.Join(logLevels, ", ")+")")
	fs.BoolVar(chat, "chat", false, fmt.Sprintf("run the chat demo instead (%d nodes in this process, durable room, WebSocket gateway; see chat.go); it takes -%s only",
		chatNodes, strings.Join(chatFlags, " and -")))
	return fs
}

// chatFlags are the flags the chat demo uses besides -chat: the others
// configure the ScoreBoard's node processes, which the chat does not run.
var chatFlags = []string{"port", "log"}

// chatFlagsOnly refuses a flag set on the command line that the chat demo
// would ignore, naming it and its value.
func chatFlagsOnly(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if err == nil && f.Name != "chat" && !slices.Contains(chatFlags, f.Name) {
			err = fmt.Errorf("-chat runs its own %d nodes in this process and takes -%s only: -%s %s does not apply to it",
				chatNodes, strings.Join(chatFlags, " and -"), f.Name, f.Value)
		}
	})
	return err
}
