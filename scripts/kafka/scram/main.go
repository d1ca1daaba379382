// Command scram gives a Kafka user SCRAM-SHA-256 and SCRAM-SHA-512 credentials
// through the admin API (AlterUserScramCredentials), then logs in with them over
// the broker's SASL_SSL listener to prove that it works. scripts/services.sh runs
// it after every start of the local broker: an upsert, so it also brings a broker
// whose storage was formatted before the credentials existed up to date.
//
// The password is read from a file, so it never shows in a process listing.
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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "listener to add the credentials through (no authentication)")
	secure := flag.String("secure", "127.0.0.1:9094", "SASL_SSL listener to log in on afterwards")
	caFile := flag.String("ca-file", "", "CA certificate of the SASL_SSL listener")
	user := flag.String("user", "projector", "user name")
	passwordFile := flag.String("password-file", "", "file holding the password")
	timeout := flag.Duration("timeout", 30*time.Second, "time allowed for the whole run")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *brokers, *secure, *caFile, *user, *passwordFile); err != nil {
		fmt.Fprintf(os.Stderr, "kafka scram: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("user %s: SCRAM-SHA-256 and SCRAM-SHA-512 set, login over SASL_SSL on %s works\n", *user, *secure)
}

func run(ctx context.Context, brokers, secure, caFile, user, passwordFile string) error {
	b, err := os.ReadFile(passwordFile)
	if err != nil {
		return fmt.Errorf("read password: %w", err)
	}
	password := strings.TrimSpace(string(b))
	if password == "" {
		return fmt.Errorf("%s is empty", passwordFile)
	}
	if err := upsert(ctx, brokers, user, password); err != nil {
		return err
	}
	// The broker applies the credentials from its metadata log a moment after
	// the admin call returns: try the login until it works or time runs out.
	for {
		err := login(ctx, secure, caFile, user, password)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("log in on %s: %w", secure, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func upsert(ctx context.Context, brokers, user, password string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return fmt.Errorf("new client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// One request may alter a user only once: one call per mechanism.
	for _, m := range []kadm.ScramMechanism{kadm.ScramSha256, kadm.ScramSha512} {
		res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: m, Password: password, Iterations: 8192}})
		if err != nil {
			return fmt.Errorf("alter %s credentials: %w", m, err)
		}
		for _, r := range res.Sorted() {
			if r.Err != nil {
				return fmt.Errorf("alter %s credentials of %s: %w (%s)", m, r.User, r.Err, r.ErrMessage)
			}
		}
	}
	return nil
}

func login(ctx context.Context, secure, caFile, user, password string) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(secure),
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()),
		kgo.DialTimeout(3*time.Second))
	if err != nil {
		return fmt.Errorf("new client: %w", err)
	}
	defer cl.Close()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).BrokerMetadata(lctx)
	if err != nil {
		return err
	}
	if len(md.Brokers) == 0 {
		return errors.New("metadata lists no broker")
	}
	return nil
}
