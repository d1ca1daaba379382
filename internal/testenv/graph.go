package testenv

import (
	"context"
	"fmt"

	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
)

// DeleteGraph removes a test's nodes from the graph, which all tests
// share: the documents, chunks and tombstones whose key starts with prefix,
// and the fencing nodes of topic. It deletes a few thousand a transaction:
// one transaction for the 300,000 nodes of a large test outgrows Neo4j's
// transaction memory, and its nodes would stay behind in the store that
// `make run` uses.
func DeleteGraph(ctx context.Context, driver neo4j.DriverWithContext, prefix, topic string) error {
	for _, match := range []string{
		"MATCH (n:Chunk) WHERE n.document_key STARTS WITH $p",
		"MATCH (n:Document) WHERE n.key STARTS WITH $p",
		"MATCH (n:WithdrawnDocument) WHERE n.key STARTS WITH $p",
		"MATCH (n:PartitionWriter) WHERE n.topic = $t",
	} {
		for {
			res, err := neo4j.ExecuteQuery(ctx, driver, match+" WITH n LIMIT 5000 DETACH DELETE n RETURN count(*) AS deleted",
				map[string]any{"p": prefix, "t": topic}, neo4j.EagerResultTransformer)
			if err != nil {
				return fmt.Errorf("%s: %w", match, err)
			}
			if deleted, _ := res.Records[0].Get("deleted"); deleted == int64(0) {
				break
			}
		}
	}
	return nil
}
