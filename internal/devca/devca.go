// Package devca makes a throw-away certificate authority and node
// certificates with crypto/x509, for the demo's -tls mode and for tests.
// Nothing it makes is meant to outlive the process that made it.
package devca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority held in memory.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

// New makes a CA named name, valid for a day.
func New(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devca: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("devca: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("devca: CA certificate: %w", err)
	}
	return &CA{Cert: cert, key: key, der: der}, nil
}

// Identity is what a node certificate stands for: URI SANs (see
// echopubsub.NodeURI), IP and DNS SANs.
type Identity struct {
	Name string
	URIs []*url.URL
	IPs  []net.IP
	DNS  []string
}

// Issue makes a certificate for id, usable as server and client, valid for
// a day, and returns it with its key as PEM.
func (ca *CA) Issue(id Identity) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("devca: key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: id.Name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        id.URIs, IPAddresses: id.IPs, DNSNames: id.DNS,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("devca: certificate for %s: %w", id.Name, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("devca: key for %s: %w", id.Name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// PEM is the CA certificate as PEM.
func (ca *CA) PEM() []byte { return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der}) }

// Pool is a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// TLSConfig issues a certificate for id and returns a tls.Config with it
// that trusts only this CA, for echopubsub.WithTLS.
func (ca *CA) TLSConfig(id Identity) (*tls.Config, error) {
	certPEM, keyPEM, err := ca.Issue(id)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("devca: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.Pool(), ClientCAs: ca.Pool(),
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

// WriteFiles writes ca.pem into dir and, for each identity, <name>.pem and
// <name>-key.pem (keys readable by the owner only).
func (ca *CA) WriteFiles(dir string, ids ...Identity) error {
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca.PEM(), 0o644); err != nil {
		return fmt.Errorf("devca: %w", err)
	}
	for _, id := range ids {
		certPEM, keyPEM, err := ca.Issue(id)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, id.Name+".pem"), certPEM, 0o644); err != nil {
			return fmt.Errorf("devca: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, id.Name+"-key.pem"), keyPEM, 0o600); err != nil {
			return fmt.Errorf("devca: %w", err)
		}
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}
