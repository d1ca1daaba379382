package services

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ensureTLS makes, once, a throwaway CA and one server certificate for
// 127.0.0.1 and localhost in .services/tls; every secured endpoint presents
// it, clients trust ca.crt. RSA keys in PKCS#8, which Kafka's PEM key
// store, Neo4j and PostgreSQL all read; .complete marks a finished set.
func (r *Runner) ensureTLS() error {
	dir := r.cfg.tlsDir()
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return nil
	}
	r.logf("tls: making a throwaway CA and a server certificate for 127.0.0.1 and localhost in %s", dir)
	if err := writeTLS(dir, time.Now()); err != nil {
		return fmt.Errorf("tls: make the certificates in %s: %w", dir, err)
	}
	return nil
}

// writeTLS writes the CA and the server certificate into dir, valid for
// ten years from now: ca.crt, ca.key, server.crt, server.key, the key and
// certificate in one file for Kafka (kafka-keystore.pem), and the
// trusted/ and revoked/ directories of Neo4j's SSL policy.
func writeTLS(dir string, now time.Time) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, d := range []string{dir, filepath.Join(dir, "trusted"), filepath.Join(dir, "revoked")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	caKey, caPEM, caCert, err := certificate(now, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "projector throwaway dev CA"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}, nil, nil)
	if err != nil {
		return err
	}
	serverKey, serverPEM, _, err := certificate(now, &x509.Certificate{
		Subject:               pkix.Name{CommonName: "localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}, caCert, caKey)
	if err != nil {
		return err
	}
	keyPEM := func(k *rsa.PrivateKey) []byte {
		der, _ := x509.MarshalPKCS8PrivateKey(k) // an RSA key always marshals
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"ca.key", keyPEM(caKey), 0o600},
		{"ca.crt", caPEM, 0o644},
		{"server.key", keyPEM(serverKey), 0o600},
		{"server.crt", serverPEM, 0o644},
		{"kafka-keystore.pem", append(keyPEM(serverKey), serverPEM...), 0o600},
		{"trusted/ca.crt", caPEM, 0o644},
		{".complete", nil, 0o644},
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	return os.Chmod(dir, 0o755)
}

// writeFile writes data to path with exactly mode, whatever the umask.
func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, data, mode); err != nil {
		return err
	}
	return os.Chmod(path, mode)
}

// certificate makes a key and a certificate of tmpl, signed by parent's
// key, or self-signed when parent is nil, and returns them with the PEM.
func certificate(now time.Time, tmpl, parent *x509.Certificate, parentKey *rsa.PrivateKey) (*rsa.PrivateKey, []byte, *x509.Certificate, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now
	tmpl.NotAfter = now.AddDate(0, 0, 3650)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert, nil
}

// secret returns the dev secret name from .services/secrets, made once as
// name- and 24 random hex digits (distinctive, so a test can find it in
// anything that leaked it), readable by this user only.
func (r *Runner) secret(name string) (string, error) {
	dir := r.cfg.secretsDir()
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if err == nil && len(b) > 0 {
		return strings.ReplaceAll(string(b), "\n", ""), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", err
	}
	random := make([]byte, 12)
	if _, err := rand.Read(random); err != nil {
		return "", err
	}
	s := name + "-" + hex.EncodeToString(random)
	if err := writeFile(path, []byte(s+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("secret %s: %w", name, err)
	}
	return s, nil
}
