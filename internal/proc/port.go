package proc

import (
	"net"
	"strconv"
)

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago (all held open together while they are picked, so they differ).
// Another process may take one before the caller binds it: callers that
// can bind port 0 themselves should.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
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
