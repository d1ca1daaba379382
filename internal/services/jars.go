package services

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
)

// jars are the runtime jars of a pom in scripts/, fetched from Maven
// Central once into .cache/NAME-VERSION-KEY/lib, where KEY is a hash of the
// pom, so that editing it gives a fresh download.
type jars struct {
	name     string // kafka, neo4j
	pom      string // its path
	property string // the pom's version property, e.g. kafka.version
	version  string // the version override (KAFKA_VERSION); empty: the pom's
}

// pomVersion returns the value of the element property in pom.
func pomVersion(pom []byte, property string) string {
	re := regexp.MustCompile(`<` + regexp.QuoteMeta(property) + `>(.*)</` + regexp.QuoteMeta(property) + `>`)
	if m := re.FindSubmatch(pom); m != nil {
		return string(m[1])
	}
	return ""
}

// cacheKey is the first 8 hex digits of the SHA-1 of b.
func cacheKey(b []byte) string {
	sum := sha1.Sum(b)
	return hex.EncodeToString(sum[:])[:8]
}

// resolve returns the version and the cache directory of j.
func (j jars) resolve(cacheDir string) (version, dir string, err error) {
	pom, err := os.ReadFile(j.pom)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", j.name, err)
	}
	version = j.version
	if version == "" {
		version = pomVersion(pom, j.property)
	}
	return version, filepath.Join(cacheDir, fmt.Sprintf("%s-%s-%s", j.name, version, cacheKey(pom))), nil
}

// fetch copies the runtime jars into dir/lib once; dir/.complete marks a
// finished download, so later runs neither call Maven nor touch the network.
func (r *Runner) fetch(ctx context.Context, j jars, version, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return nil
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return fmt.Errorf("%s: mvn not found (apt-get install maven)", j.name)
	}
	r.logf("%s: downloading %s %s jars from Maven Central into %s", j.name, j.name, version, dir)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logf := filepath.Join(r.cfg.logDir(), "mvn-"+j.name+".log")
	mvn := exec.CommandContext(ctx, "mvn", "-B", "-q", "-f", j.pom, "dependency:copy-dependencies",
		"-D"+j.property+"="+version, "-DoutputDirectory="+dir+"/lib")
	if err := overwritten(mvn, logf); err != nil {
		return &Failure{Service: j.name, Log: logf, Reason: fmt.Sprintf("Maven could not fetch %s %s", j.name, version)}
	}
	return os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644)
}
