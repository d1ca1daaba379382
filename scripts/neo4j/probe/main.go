// Command probe asks a Neo4j server once, over Bolt, to run a real query. It
// prints the name, version and edition from dbms.components() and exits 0, or
// prints why not and exits 1. scripts/services.sh runs it in a loop while Neo4j
// starts. For the secured instance it reads the password from a file (never a
// command line) and trusts a private CA for bolt+s:// URIs.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j/config"
)

func main() {
	uri := flag.String("uri", "bolt://127.0.0.1:7687", "Bolt URI")
	user := flag.String("user", "neo4j", "user name; ignored when -password is empty")
	password := flag.String("password", "", "password; empty means no authentication")
	passwordFile := flag.String("password-file", "", "file holding the password (instead of -password)")
	caFile := flag.String("ca-file", "", "CA certificate to trust for bolt+s:// and neo4j+s:// URIs")
	timeout := flag.Duration("timeout", 5*time.Second, "time allowed for the whole probe")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	version, err := probeWith(ctx, *uri, *user, *password, *passwordFile, *caFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "neo4j probe: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(version)
}

// probeWith reads the password and the CA, then probes.
func probeWith(ctx context.Context, uri, user, password, passwordFile, caFile string) (string, error) {
	if passwordFile != "" {
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		password = strings.TrimSpace(string(b))
	}
	auth := neo4j.NoAuth()
	if password != "" {
		auth = neo4j.BasicAuth(user, password, "")
	}
	var roots *x509.CertPool
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return "", fmt.Errorf("read CA: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return "", fmt.Errorf("%s holds no PEM certificate", caFile)
		}
	}
	return probe(ctx, uri, auth, roots)
}

// probe runs RETURN 1 and returns e.g. "Neo4j Kernel 5.26.30 community".
func probe(ctx context.Context, uri string, auth neo4j.AuthToken, roots *x509.CertPool) (string, error) {
	driver, err := neo4j.NewDriverWithContext(uri, auth, func(c *config.Config) {
		if roots != nil {
			c.TlsConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		}
	})
	if err != nil {
		return "", fmt.Errorf("new driver: %w", err)
	}
	defer driver.Close(ctx)

	res, err := neo4j.ExecuteQuery(ctx, driver, "RETURN 1 AS one", nil, neo4j.EagerResultTransformer)
	if err != nil {
		return "", fmt.Errorf("return 1: %w", err)
	}
	if len(res.Records) != 1 {
		return "", fmt.Errorf("return 1: got %d records, want 1", len(res.Records))
	}
	res, err = neo4j.ExecuteQuery(ctx, driver,
		"CALL dbms.components() YIELD name, versions, edition RETURN name + ' ' + versions[0] + ' ' + edition AS v",
		nil, neo4j.EagerResultTransformer)
	if err != nil {
		return "", fmt.Errorf("dbms.components: %w", err)
	}
	if len(res.Records) == 0 {
		return "", errors.New("dbms.components returned no record")
	}
	v, _ := res.Records[0].Get("v")
	return fmt.Sprint(v), nil
}
