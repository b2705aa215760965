package presence

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestConfigValidateNamesFieldAndValue: each field out of range is refused
// with an error that names it and its value.
func TestConfigValidateNamesFieldAndValue(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Topic = "" }, `Topic must be a non-empty UTF-8 string, got ""`},
		{func(c *Config) { c.Topic = "\xff" }, `Topic must be a non-empty UTF-8 string, got "\xff"`},
		{func(c *Config) { c.HeartbeatInterval = time.Millisecond }, "HeartbeatInterval must be >= 10ms, got 1ms"},
		{func(c *Config) { c.DownAfter = 3 * time.Second }, "DownAfter must be >= 2 * HeartbeatInterval (2s), got 3s"},
		{func(c *Config) { c.SyncRetry = 0 }, "SyncRetry must be >= 10ms, got 0s"},
		{func(c *Config) { c.SnapshotPart = -1 }, "SnapshotPart must be > 0, got -1"},
		{func(c *Config) { c.CallTimeout = 0 }, "CallTimeout must be > 0, got 0s"},
	} {
		cfg := DefaultConfig()
		c.set(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate = %v, want ErrInvalidConfig saying %q", err, c.want)
		}
	}
}
