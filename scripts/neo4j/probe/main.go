// Command probe asks a Neo4j server once, over Bolt, to run a real query. It
// prints the name, version and edition from dbms.components() and exits 0, or
// prints why not and exits 1. scripts/services.sh runs it in a loop while Neo4j
// starts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
)

func main() {
	uri := flag.String("uri", "bolt://127.0.0.1:7687", "Bolt URI")
	user := flag.String("user", "neo4j", "user name; ignored when -password is empty")
	password := flag.String("password", "", "password; empty means no authentication")
	timeout := flag.Duration("timeout", 5*time.Second, "time allowed for the whole probe")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	auth := neo4j.NoAuth()
	if *password != "" {
		auth = neo4j.BasicAuth(*user, *password, "")
	}
	version, err := probe(ctx, *uri, auth)
	if err != nil {
		fmt.Fprintf(os.Stderr, "neo4j probe: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(version)
}

// probe runs RETURN 1 and returns e.g. "Neo4j Kernel 5.26.30 community".
func probe(ctx context.Context, uri string, auth neo4j.AuthToken) (string, error) {
	driver, err := neo4j.NewDriverWithContext(uri, auth)
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
