package dns

import (
	"fmt"
	"net"
	"strings"
	"time"
)

// Config configures a DNS membership. A zero field takes its default (see
// each field); DefaultConfig returns them all.
type Config struct {
	// Name is what to resolve: with SRV false, a name whose A and AAAA
	// records are the members' addresses (a Kubernetes headless Service:
	// "echopubsub.prod.svc.cluster.local"); with SRV true, a name whose SRV
	// records give each member's host and port
	// ("_remote._tcp.echopubsub.prod.svc.cluster.local"). Required.
	Name string
	// SRV resolves Name's SRV records instead of its addresses. Each
	// member's address is then the record's target (without the final dot)
	// and port, so each node must advertise that name: in a StatefulSet,
	// "$(POD_NAME).<service>.<namespace>.svc.cluster.local:<port>". With
	// addresses (the default), each node advertises its pod IP and Port.
	// Defaults to false.
	SRV bool
	// Port is every member's remote port, for address records. Required
	// unless SRV (then it must be 0: the records carry the ports).
	Port int
	// Interval is the time between two lookups. Defaults to 5s.
	Interval time.Duration
	// Timeout bounds one lookup. Defaults to 2s; at most Interval.
	Timeout time.Duration
	// LeftAfter is how many successive answers must lack a member before it
	// is reported Left: a Kubernetes headless Service drops a pod that fails
	// its readiness probe, and a brief drop should not cost the others a
	// Left (producers keep a member's cursor for Config.ForgetAfter anyway).
	// Defaults to 2.
	LeftAfter int
	// RetryMin and RetryMax bound the backoff between lookups while the DNS
	// server fails (an error, not an answer that lists no one). Default to
	// 500ms and 30s.
	RetryMin, RetryMax time.Duration
	// Resolver does the lookups. Defaults to net.DefaultResolver.
	Resolver *net.Resolver
}

// DefaultConfig returns the defaults described on Config (Name and Port
// empty: they have none).
func DefaultConfig() Config {
	return Config{Interval: 5 * time.Second, Timeout: 2 * time.Second, LeftAfter: 2,
		RetryMin: 500 * time.Millisecond, RetryMax: 30 * time.Second, Resolver: net.DefaultResolver}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	dur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	dur(&c.Interval, d.Interval)
	dur(&c.Timeout, min(d.Timeout, c.Interval))
	dur(&c.RetryMin, d.RetryMin)
	dur(&c.RetryMax, d.RetryMax)
	if c.LeftAfter == 0 {
		c.LeftAfter = d.LeftAfter
	}
	if c.Resolver == nil {
		c.Resolver = d.Resolver
	}
	return c
}

// Validate reports the first invalid field, naming it and its value. It
// expects defaults to be applied (New does that first).
func (c Config) Validate() error {
	name := strings.TrimSuffix(c.Name, ".")
	if name == "" || strings.ContainsAny(name, " /:\t") || len(name) > 253 {
		return fmt.Errorf("cluster: dns Name must be a DNS name, got %q", c.Name)
	}
	if c.SRV && c.Port != 0 {
		return fmt.Errorf("cluster: dns Port must be 0 with SRV (the records carry the ports), got %d", c.Port)
	}
	if !c.SRV && (c.Port <= 0 || c.Port > 65535) {
		return fmt.Errorf("cluster: dns Port must be 1..65535 for address records, got %d", c.Port)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"Interval", c.Interval}, {"Timeout", c.Timeout}, {"RetryMin", c.RetryMin}, {"RetryMax", c.RetryMax}} {
		if f.v <= 0 {
			return fmt.Errorf("cluster: dns %s must be > 0, got %v", f.name, f.v)
		}
	}
	if c.Timeout > c.Interval {
		return fmt.Errorf("cluster: dns Timeout (%v) must be <= Interval (%v)", c.Timeout, c.Interval)
	}
	if c.RetryMin > c.RetryMax {
		return fmt.Errorf("cluster: dns RetryMin (%v) must be <= RetryMax (%v)", c.RetryMin, c.RetryMax)
	}
	if c.LeftAfter < 1 {
		return fmt.Errorf("cluster: dns LeftAfter must be >= 1, got %d", c.LeftAfter)
	}
	return nil
}

// addr is the member address of one resolved host and port.
func addr(host string, port int) string {
	return net.JoinHostPort(strings.TrimSuffix(host, "."), fmt.Sprint(port))
}
