// Command probe asks a Kafka broker once whether it serves clients: a metadata
// request must list a broker and a controller, and every broker must answer
// ApiVersions. It prints the version the ApiVersions answer matches and exits 0,
// or prints why not and exits 1. scripts/services.sh runs it in a loop while the
// broker starts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated bootstrap addresses")
	timeout := flag.Duration("timeout", 5*time.Second, "time allowed for the whole probe")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	version, err := probe(ctx, strings.Split(*brokers, ","))
	if err != nil {
		fmt.Fprintf(os.Stderr, "kafka probe: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(version)
}

// probe returns the broker version guessed from ApiVersions, e.g. "v4.1".
func probe(ctx context.Context, brokers []string) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DialTimeout(2*time.Second))
	if err != nil {
		return "", fmt.Errorf("new client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return "", fmt.Errorf("metadata: %w", err)
	}
	if len(md.Brokers) == 0 || md.Controller < 0 {
		return "", errors.New("metadata lists no broker or no controller yet")
	}
	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		return "", fmt.Errorf("api versions: %w", err)
	}
	var guesses []string
	for _, v := range versions.Sorted() {
		if v.Err != nil {
			return "", fmt.Errorf("api versions of broker %d: %w", v.NodeID, v.Err)
		}
		guesses = append(guesses, v.VersionGuess())
	}
	return strings.Join(guesses, ", "), nil
}
