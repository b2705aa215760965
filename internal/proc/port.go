package proc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
)

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago (all held open together while they are picked, so they differ).
// Another process may take one before the caller binds it: callers that
// can bind port 0 themselves should.
func FreePorts(n int) ([]int, error) {
	lo, hi := portRange()
	ports := make([]int, 0, n)
	for attempts := 0; len(ports) < n; attempts++ {
		var ln net.Listener
		var err error
		if hi > lo && attempts < 100*n {
			ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+rand.IntN(hi-lo))))
			if err != nil {
				continue // taken: try another
			}
		} else if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portRange is where FreePorts picks: below the kernel's ephemeral range
// (ip_local_port_range), from which outgoing connections take their local
// port. A port picked from that range (what listening on port 0 gives) may
// be taken by some process's outgoing connection between the pick and the
// child's bind ("address already in use", seen in CI); one below it is only
// ever taken by a listener. Empty (lo == hi) when the range is unknown or
// too low to leave room: then the kernel picks.
func portRange() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	var ephLo, ephHi int
	if _, err := fmt.Sscan(string(b), &ephLo, &ephHi); err != nil || ephLo <= 21000 {
		return 0, 0
	}
	return 20000, ephLo
}

// FreePort is FreePorts(1)'s port.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreeAddr is FreePort as a "127.0.0.1:port" address.
func FreeAddr() (string, error) {
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}
