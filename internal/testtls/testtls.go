// Package testtls makes throwaway certificate authorities and certificates
// for tests of TLS connections, in memory and in a test's temporary
// directory, so no test depends on a certificate someone must renew.
package testtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority that lives as long as a test.
type CA struct {
	t    testing.TB
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// CertPEM is the CA certificate, PEM-encoded.
	CertPEM []byte
	// CertFile is CertPEM in a file of the test's temporary directory.
	CertFile string
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("create CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("parse CA certificate: %v", err)
	}
	ca := &CA{t: t, cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.CertFile = writeFile(t, "ca-*.crt", ca.CertPEM)
	return ca
}

// Pool returns a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return pool
}

// Pair is a certificate signed by a CA and its private key.
type Pair struct {
	// CertPEM and KeyPEM are the certificate and its PKCS#8 key.
	CertPEM, KeyPEM []byte
	// CertFile and KeyFile hold them in the test's temporary directory.
	CertFile, KeyFile string
	// TLS is the pair, ready for tls.Config.Certificates.
	TLS tls.Certificate
}

// Server issues a server certificate for hosts: IP addresses and DNS names.
func (ca *CA) Server(hosts ...string) *Pair {
	return ca.issue(x509.ExtKeyUsageServerAuth, hosts)
}

// Client issues a client certificate with common name name.
func (ca *CA) Client(name string) *Pair {
	return ca.issue(x509.ExtKeyUsageClientAuth, []string{name})
}

func (ca *CA) issue(usage x509.ExtKeyUsage, names []string) *Pair {
	t := ca.t
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		for _, h := range names {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("create certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("marshal key: %v", err)
	}
	p := &Pair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
	p.CertFile = writeFile(t, "cert-*.crt", p.CertPEM)
	p.KeyFile = writeFile(t, "key-*.key", p.KeyPEM)
	p.TLS, err = tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatalf("load pair: %v", err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("serial number: %v", err)
	}
	return n
}

// writeFile writes b to a new file, readable by its owner only, in the
// test's temporary directory.
func writeFile(t testing.TB, pattern string, b []byte) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), pattern)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(f.Name())
}
