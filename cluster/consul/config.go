package consul

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/consul/api"
)

// Service metadata keys a Consul member registers with.
const (
	// MetaNode is the node name (EchoPubSub's name for the node).
	MetaNode = "node"
	// MetaIncarnation is the node's incarnation, in decimal.
	MetaIncarnation = "incarnation"
)

// Config configures a Consul membership. A zero field takes its
// default (see each field); DefaultConfig returns them all.
type Config struct {
	// Address is the Consul agent's HTTP API, host:port. Defaults to
	// $CONSUL_HTTP_ADDR, else 127.0.0.1:8500.
	Address string
	// Scheme is "http" or "https". Defaults to $CONSUL_HTTP_SSL's choice,
	// else "http".
	Scheme string
	// Token is the ACL token. Defaults to $CONSUL_HTTP_TOKEN, else none.
	Token string
	// Datacenter to register in and query. Defaults to the agent's.
	Datacenter string

	// TTL is the service's TTL check: a node whose check is not refreshed
	// for TTL turns critical, drops out of the healthy instances and is
	// reported Left by every other node. Defaults to 10s.
	TTL time.Duration
	// RefreshInterval is how often the check is refreshed; it must be
	// shorter than TTL. Defaults to TTL/3.
	RefreshInterval time.Duration
	// DeregisterCriticalServiceAfter is how long Consul keeps a critical
	// instance before removing it (Consul enforces at least one minute).
	// Defaults to 1m.
	DeregisterCriticalServiceAfter time.Duration
	// WaitTime bounds one blocking query (Consul caps it at 10m). Defaults
	// to 1m.
	WaitTime time.Duration
	// RequestTimeout bounds every non-blocking call: register, refresh,
	// deregister. Defaults to 5s.
	RequestTimeout time.Duration
	// RetryMin and RetryMax bound the exponential backoff (with jitter)
	// between attempts while Consul fails. Default to 500ms and 30s.
	RetryMin, RetryMax time.Duration
	// RecoveryGrace is how long after Consul comes back (from an outage, or
	// restarted and empty) a member missing from it is not yet reported
	// Left: the other nodes need that long to notice and register again.
	// Defaults to RetryMax + TTL.
	RecoveryGrace time.Duration
}

// DefaultConfig returns the defaults described on Config, with
// the environment variables of the Consul API client applied.
func DefaultConfig() Config {
	env := api.DefaultConfig()
	c := Config{
		Address: env.Address, Scheme: env.Scheme, Token: env.Token, Datacenter: env.Datacenter,
		TTL: 10 * time.Second, DeregisterCriticalServiceAfter: time.Minute, WaitTime: time.Minute,
		RequestTimeout: 5 * time.Second, RetryMin: 500 * time.Millisecond, RetryMax: 30 * time.Second,
	}
	if c.Address == "" || c.Address == "localhost:8500" {
		c.Address = "127.0.0.1:8500"
	}
	c.RefreshInterval = c.TTL / 3
	c.RecoveryGrace = c.RetryMax + c.TTL
	return c
}

// withDefaults fills every zero field. Derived defaults (RefreshInterval,
// RecoveryGrace) follow the TTL and RetryMax actually used.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	str := func(v *string, def string) {
		if *v == "" {
			*v = def
		}
	}
	dur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	str(&c.Address, d.Address)
	str(&c.Scheme, d.Scheme)
	str(&c.Token, d.Token)
	str(&c.Datacenter, d.Datacenter)
	dur(&c.TTL, d.TTL)
	dur(&c.RefreshInterval, c.TTL/3)
	dur(&c.DeregisterCriticalServiceAfter, d.DeregisterCriticalServiceAfter)
	dur(&c.WaitTime, d.WaitTime)
	dur(&c.RequestTimeout, d.RequestTimeout)
	dur(&c.RetryMin, d.RetryMin)
	dur(&c.RetryMax, d.RetryMax)
	dur(&c.RecoveryGrace, c.RetryMax+c.TTL)
	return c
}

// Validate reports the first invalid field, naming it and its value. It
// expects defaults to be applied (New does that first).
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Address); err != nil {
		return fmt.Errorf("cluster: consul Address must be host:port, got %q", c.Address)
	}
	if c.Scheme != "http" && c.Scheme != "https" {
		return fmt.Errorf("cluster: consul Scheme must be http or https, got %q", c.Scheme)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"TTL", c.TTL}, {"RefreshInterval", c.RefreshInterval},
		{"DeregisterCriticalServiceAfter", c.DeregisterCriticalServiceAfter}, {"WaitTime", c.WaitTime},
		{"RequestTimeout", c.RequestTimeout}, {"RetryMin", c.RetryMin}, {"RetryMax", c.RetryMax},
		{"RecoveryGrace", c.RecoveryGrace},
	} {
		if f.v < 0 {
			return fmt.Errorf("cluster: consul %s must be > 0, got %v", f.name, f.v)
		}
	}
	if c.TTL < time.Second {
		return fmt.Errorf("cluster: consul TTL must be >= 1s, got %v", c.TTL)
	}
	if c.RefreshInterval >= c.TTL {
		return fmt.Errorf("cluster: consul RefreshInterval (%v) must be shorter than TTL (%v)", c.RefreshInterval, c.TTL)
	}
	if c.WaitTime > 10*time.Minute {
		return fmt.Errorf("cluster: consul WaitTime must be <= 10m, got %v", c.WaitTime)
	}
	if c.RetryMin > c.RetryMax {
		return fmt.Errorf("cluster: consul RetryMin (%v) must be <= RetryMax (%v)", c.RetryMin, c.RetryMax)
	}
	return nil
}
