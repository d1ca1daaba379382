package services

import (
	"bytes"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// TestWriteTLS: the certificates every secured endpoint presents are
// trusted through ca.crt for 127.0.0.1 and localhost, as a server's, and
// the files have the form and modes PostgreSQL, Kafka and Neo4j need.
func TestWriteTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	now := time.Now()
	if err := writeTLS(dir, now); err != nil {
		t.Fatal(err)
	}
	roots, err := readCA(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatalf("server key and certificate: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if leaf.IsCA || leaf.NotAfter.Before(now.AddDate(9, 0, 0)) {
		t.Errorf("server certificate: CA %v, valid until %v; want no CA, ten years", leaf.IsCA, leaf.NotAfter)
	}
	for _, name := range []string{"ca.key", "server.key"} {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		block, _ := pem.Decode(b)
		if block == nil || block.Type != "PRIVATE KEY" {
			t.Fatalf("%s: want a PKCS#8 PEM block (PRIVATE KEY)", name)
		}
		key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if k, ok := key.(*rsa.PrivateKey); !ok || k.N.BitLen() != 2048 {
			t.Errorf("%s: want an RSA key of 2048 bits", name)
		}
	}
	// Kafka's PEM key store: the key, then the certificate, in one file.
	store, _ := os.ReadFile(filepath.Join(dir, "kafka-keystore.pem"))
	if !regexp.MustCompile(`(?s)^-----BEGIN PRIVATE KEY-----.*-----BEGIN CERTIFICATE-----`).Match(store) {
		t.Errorf("kafka-keystore.pem holds %q..., want the key then the certificate", store[:min(len(store), 40)])
	}
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if trusted, _ := os.ReadFile(filepath.Join(dir, "trusted/ca.crt")); string(trusted) != string(ca) {
		t.Errorf("trusted/ca.crt (Neo4j's trusted directory) is not ca.crt")
	}
	modes := map[string]os.FileMode{"ca.key": 0o600, "server.key": 0o600, "kafka-keystore.pem": 0o600, "ca.crt": 0o644, "server.crt": 0o644, "revoked": 0o755 | os.ModeDir, ".": 0o755 | os.ModeDir}
	for name, want := range modes {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", name, st.Mode(), want)
		}
	}
}

func TestEnsureTLSOnce(t *testing.T) {
	r := New(Config{Root: t.TempDir()}, nil, &bytes.Buffer{})
	if err := r.ensureTLS(); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(filepath.Join(r.cfg.tlsDir(), "ca.crt"))
	if err := r.ensureTLS(); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(r.cfg.tlsDir(), "ca.crt")); string(again) != string(first) {
		t.Errorf("a second up made a new CA: clients that trust the first would fail")
	}
}

func TestSecret(t *testing.T) {
	r := New(Config{Root: t.TempDir()}, nil, nil)
	s, err := r.secret("kafka-password")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^kafka-password-[0-9a-f]{24}$`).MatchString(s) {
		t.Errorf("secret = %q, want kafka-password- and 24 hex digits", s)
	}
	if again, _ := r.secret("kafka-password"); again != s {
		t.Errorf("second secret = %q, want the first, %q", again, s)
	}
	if other, _ := r.secret("neo4j-password"); other == s {
		t.Errorf("two secrets are the same")
	}
	for path, want := range map[string]os.FileMode{r.cfg.secretsDir(): 0o700 | os.ModeDir, filepath.Join(r.cfg.secretsDir(), "kafka-password"): 0o600} {
		if st, err := os.Stat(path); err != nil || st.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, st.Mode(), err, want)
		}
	}
}
