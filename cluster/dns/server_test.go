package dns_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// server is an authoritative DNS server on a loopback UDP port, in this
// process, whose records the test changes while memberships resolve them:
// A and SRV records per name, NXDOMAIN for a name with none, SERVFAIL for
// every query while failing.
type server struct {
	conn net.PacketConn
	wg   sync.WaitGroup

	mu      sync.Mutex
	a       map[string][]net.IP
	srv     map[string][]net.SRV
	failing bool
	queries int
}

func startServer(t *testing.T) *server {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{conn: conn, a: map[string][]net.IP{}, srv: map[string][]net.SRV{}}
	s.wg.Add(1)
	go s.serve(t)
	t.Cleanup(func() { conn.Close(); s.wg.Wait() })
	return s
}

// resolver is a net.Resolver that asks only this server.
func (s *server) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.conn.LocalAddr().String())
	}}
}

func (s *server) setA(name string, ips ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.a[fqdn(name)] = nil
	for _, ip := range ips {
		s.a[fqdn(name)] = append(s.a[fqdn(name)], net.ParseIP(ip))
	}
}

func (s *server) setSRV(name string, srvs ...net.SRV) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv[fqdn(name)] = srvs
}

func (s *server) setFailing(f bool) { s.mu.Lock(); s.failing = f; s.mu.Unlock() }

// queryCount is how many queries the server answered: a test waits for a
// number of lookups (the membership's only observable pace) by it.
func (s *server) queryCount() int { s.mu.Lock(); defer s.mu.Unlock(); return s.queries }

func fqdn(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) + "." }

func (s *server) serve(t *testing.T) {
	defer s.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("dns server: %v", err)
			}
			return
		}
		var q dnsmessage.Message
		if err := q.Unpack(buf[:n]); err != nil || len(q.Questions) != 1 {
			continue
		}
		out, err := s.answer(q)
		if err != nil {
			t.Errorf("dns server: %v", err)
			return
		}
		_, _ = s.conn.WriteTo(out, from)
	}
}

func (s *server) answer(q dnsmessage.Message) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries++
	question := q.Questions[0]
	name := strings.ToLower(question.Name.String())
	h := dnsmessage.Header{ID: q.Header.ID, Response: true, Authoritative: true}
	switch {
	case s.failing:
		h.RCode = dnsmessage.RCodeServerFailure
	case len(s.a[name]) == 0 && len(s.srv[name]) == 0:
		h.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, h)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(question); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if h.RCode == dnsmessage.RCodeSuccess {
		rh := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 1}
		if err := s.records(&b, rh, question.Type, name); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

func (s *server) records(b *dnsmessage.Builder, rh dnsmessage.ResourceHeader, typ dnsmessage.Type, name string) error {
	switch typ {
	case dnsmessage.TypeA:
		for _, ip := range s.a[name] {
			if v4 := ip.To4(); v4 != nil {
				if err := b.AResource(rh, dnsmessage.AResource{A: [4]byte(v4)}); err != nil {
					return err
				}
			}
		}
	case dnsmessage.TypeAAAA:
		for _, ip := range s.a[name] {
			if ip.To4() == nil {
				if err := b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: [16]byte(ip.To16())}); err != nil {
					return err
				}
			}
		}
	case dnsmessage.TypeSRV:
		for _, r := range s.srv[name] {
			target, err := dnsmessage.NewName(fqdn(r.Target))
			if err != nil {
				return err
			}
			if err := b.SRVResource(rh, dnsmessage.SRVResource{Priority: r.Priority, Weight: r.Weight, Port: r.Port, Target: target}); err != nil {
				return err
			}
		}
	}
	return nil
}
