// Command echopubsub runs an EchoPubSub node as a standalone server and
// looks inside a running one.
//
//	echopubsub serve --membership-peers 10.0.0.1:7400,10.0.0.2:7400 --node-advertise 10.0.0.1:7400
//	echopubsub peers                      # each peer's lag, registration, last ack
//	echopubsub streams                    # durable streams: cursors, rows, bytes, retention
//	echopubsub sessions                   # sessions: identity, pending, stalled
//	echopubsub tail room:1 --from 1       # live messages and every notice
//	echopubsub replay room:1 --from 1 --to 500
//	echopubsub publish room:1 '"hello"'
//
// serve's settings (flags, ECHOPUBSUB_* variables, a YAML or JSON file)
// and the admin endpoint the other commands talk to are in docs/server.md.
// main only builds the command tree; serve.go runs a node, client.go talks
// to one.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := rootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "echopubsub:", err)
		os.Exit(1)
	}
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "echopubsub",
		Short:         "Run and inspect EchoPubSub nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	c := &client{}
	c.addFlags(root)
	root.AddCommand(serveCommand(), c.peersCommand(), c.streamsCommand(), c.sessionsCommand(),
		c.tailCommand(), c.replayCommand(), c.publishCommand())
	return root
}
