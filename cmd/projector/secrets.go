package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
)

// secretFile is the value of a flag that names a file holding a secret,
// such as --kafka-sasl-password-file. envVar, when set, names the
// environment variable that may hold the secret instead. The secret itself
// never passes through a flag, so it never shows in ps, in -h or in a
// "bad flag value" error: the flag's value is the path.
type secretFile struct {
	envVar string
	path   string
	// secret is set by parse, from the file or envVar; it is never logged
	// or put in an error.
	secret string
}

// String returns the path; it is what -h prints.
func (s *secretFile) String() string {
	if s == nil {
		return ""
	}
	return s.path
}

// Set records the path; the file is read by resolve, once all flags and
// variables are known.
func (s *secretFile) Set(path string) error {
	s.path = path
	return nil
}

// resolve reads the secret from the file when one is named, else from the
// environment variable. Both at once is an error: whichever won would be a
// guess, and the operator would rotate the one that is not used.
func (s *secretFile) resolve(flagName string, getenv func(string) string) error {
	fromEnv := ""
	if s.envVar != "" {
		fromEnv = getenv(s.envVar)
	}
	if s.path == "" {
		s.secret = fromEnv
		return nil
	}
	if fromEnv != "" {
		return fmt.Errorf("--%s and %s are both set: give the secret one way", flagName, s.envVar)
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return fmt.Errorf("--%s: %w", flagName, err)
	}
	// Files written by editors and `echo` end with a newline; secrets
	// mounted by Kubernetes do not. Neither is part of the secret.
	s.secret = strings.TrimRight(string(b), "\r\n")
	if s.secret == "" {
		return fmt.Errorf("--%s: %s is empty", flagName, s.path)
	}
	return nil
}

// commandLineSecret is the value of a flag that may carry a secret itself:
// --neo4j-password and --postgres-dsn, which the public contract keeps. It
// stores into the string it points to, and parse records whether the value
// came from the command line, where ps shows it to every user of the
// machine, so that `projector run` can warn.
type commandLineSecret struct {
	value         *string
	onCommandLine bool
}

// String returns the value; -h prints it only as the default, which holds
// no real secret.
func (c *commandLineSecret) String() string {
	if c == nil || c.value == nil {
		return ""
	}
	return *c.value
}

// Set stores v.
func (c *commandLineSecret) Set(v string) error {
	*c.value = v
	return nil
}

// resolveSecrets finishes the secret flags of fs once the command line and
// the environment are parsed: it reads every secretFile and notes which
// commandLineSecret values came from the command line. A value equal to its
// environment variable's is taken to come from the environment.
func resolveSecrets(fs *flag.FlagSet, getenv func(string) string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil {
			return
		}
		switch v := f.Value.(type) {
		case *secretFile:
			err = v.resolve(f.Name, getenv)
		case *commandLineSecret:
			v.onCommandLine = v.String() != "" && v.String() != getenv(variableOf(fs.Name(), f.Name)) && f.DefValue != v.String()
		}
	})
	return err
}

// dsnHasPassword reports whether a PostgreSQL connection string, URL or
// key=value form, carries a password itself.
func dsnHasPassword(dsn string) bool {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return true // cannot tell: assume the worst
		}
		_, set := u.User.Password()
		return set || u.Query().Has("password")
	}
	return keywordPassword.MatchString(dsn)
}

// keywordPassword finds the password keyword of a key=value connection
// string, where spaces may surround the "=".
var keywordPassword = regexp.MustCompile(`(^|\s)password\s*=`)

// clientTLS returns the TLS configuration of a connection to a service:
// the system's roots, or only the CA certificates in caFile when it is
// given (a private CA), and a client certificate when certFile and keyFile
// are given. flagPrefix names the flags in errors, e.g. "--kafka-tls".
func clientTLS(flagPrefix, caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%s-ca-file: %w", flagPrefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s-ca-file: %s holds no PEM certificate", flagPrefix, caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "" || keyFile == "":
		return nil, fmt.Errorf("%s-cert-file and %s-key-file go together: a client certificate needs its key", flagPrefix, flagPrefix)
	default:
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			// The error names the files and what is wrong with them, never
			// the key's bytes.
			return nil, fmt.Errorf("%s-cert-file, %s-key-file: %w", flagPrefix, flagPrefix, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
