package main

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// Config is the demo's configuration, set by main's flags.
type Config struct {
	// Nodes is the number of node processes. Defaults to 3.
	Nodes int
	// BufferSize is EchoPubSub's buffer_size. Defaults to 5, small enough to
	// overflow by hand.
	BufferSize int
	// BatchInterval is EchoPubSub's batch_interval. Defaults to 100ms.
	BatchInterval time.Duration
	// GoalEvery is the pace of automatic goals. Defaults to 2s: slow enough
	// that a node coming back online (a few seconds to reconnect) is
	// replayed, not expired, unless a burst overflowed its buffer.
	GoalEvery time.Duration
	// Port is the page's HTTP port on 127.0.0.1. Defaults to 4000; 0 picks
	// a free port.
	Port int
	// Consul is a Consul agent address for membership. Defaults to empty:
	// the embedded static membership, which needs nothing installed.
	Consul string
	// TLS runs the nodes over mutual TLS with a throw-away CA and node
	// certificates made in a temporary directory (removed on Stop).
	// Defaults to false.
	TLS bool
	// LogLevel is the zerolog level of the demo and its nodes. Defaults to
	// "error": cutting nodes off is the point, so transport warnings are
	// expected and hidden.
	LogLevel string
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		Nodes:         3,
		BufferSize:    5,
		BatchInterval: 100 * time.Millisecond,
		GoalEvery:     2 * time.Second,
		Port:          4000,
		LogLevel:      "error",
	}
}

// logLevels are the values of LogLevel: zerolog's level names.
var logLevels = []string{"trace", "debug", "info", "warn", "error", "fatal", "panic", "disabled"}

// maxNodes bounds Nodes: the proxy tags each connection with one byte, and
// the page has room for a handful of columns.
const maxNodes = 9

// Validate names the field and the value of the first invalid setting.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 2 || c.Nodes > maxNodes:
		return fmt.Errorf("nodes must be between 2 and %d, got %d", maxNodes, c.Nodes)
	case c.BufferSize < 1:
		return fmt.Errorf("buffer must be > 0, got %d", c.BufferSize)
	case c.BatchInterval < 0:
		return fmt.Errorf("batch must be >= 0, got %v", c.BatchInterval)
	case c.GoalEvery < 100*time.Millisecond:
		return fmt.Errorf("goal-every must be >= 100ms, got %v", c.GoalEvery)
	case c.Port < 0 || c.Port > 65535:
		return fmt.Errorf("port must be between 0 and 65535, got %d", c.Port)
	}
	if c.Consul != "" {
		if _, _, err := net.SplitHostPort(c.Consul); err != nil {
			return fmt.Errorf("consul must be host:port, got %q: %w", c.Consul, err)
		}
	}
	if !slices.Contains(logLevels, c.LogLevel) {
		return fmt.Errorf("log must be one of %s, got %q", strings.Join(logLevels, ", "), c.LogLevel)
	}
	return nil
}

// burstSize is how many goals the burst button scores: comfortably more
// than the buffer, so a node that is offline during the burst overflows.
func (c Config) burstSize() int { return 2*c.BufferSize + 2 }

// burstGap spaces the burst's goals so that every online node acknowledges
// each batch before the next ones arrive: only the offline node overflows.
func (c Config) burstGap() time.Duration {
	g := 3 * c.BatchInterval
	if g < 50*time.Millisecond {
		g = 50 * time.Millisecond
	}
	return g
}
