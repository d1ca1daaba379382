package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// The corpus's promised shares, per document: this share of documents gets
// a second version later in the topic (so older chunks are withdrawn), and
// this share is withdrawn after its last version.
const (
	NewVersionShare = 0.20
	WithdrawalShare = 0.05
)

// laterWindow bounds how many first versions may come between a document's
// version and its next event, so later events land in other batches than
// the first version, sometimes in the same one.
const laterWindow = 800

// Record is one event of the corpus, ready to publish.
type Record struct {
	// Doc is the document's number in the corpus, 0..Documents-1; it picks
	// the partition, independently of the key prefix.
	Doc   int
	Key   string
	Value []byte
	// Chunks is the number of chunks of an upsert, 0 for a withdrawal.
	Chunks   int
	Withdraw bool
}

// Corpus is a synthetic topic: first versions of documents, later versions
// and withdrawals, in publishing order.
type Corpus struct {
	Records     []Record
	Documents   int
	NewVersions int
	Withdrawals int
	// Chunks is the sum of the chunks of every upsert.
	Chunks int
}

// ChunksPerEvent is the mean number of chunks per record, withdrawals
// included; it turns a per-chunk rate into a per-document rate.
func (c *Corpus) ChunksPerEvent() float64 {
	return float64(c.Chunks) / float64(len(c.Records))
}

// eventJSON is the JSON of a document event (docs/events.md).
type eventJSON struct {
	DocumentKey string            `json:"document_key"`
	Version     int64             `json:"version"`
	Op          string            `json:"op,omitempty"`
	Title       string            `json:"title,omitempty"`
	Source      string            `json:"source,omitempty"`
	Metadata    map[string]any    `json:"metadata,omitempty"`
	Chunks      []json.RawMessage `json:"chunks,omitempty"`
}

// Generate returns a corpus of documents whose keys start with prefix. It
// is a pure function of its arguments: the same seed gives the same
// records, byte for byte; the prefix changes the keys and nothing else, so
// every measurement of a run writes the same corpus under keys of its own.
//
// Documents vary in size: most have 1 to 3 chunks, some 4 to 8, a few 9
// to 24, of 150 to 1,200 bytes each.
func Generate(documents int, seed uint64, prefix string) *Corpus {
	r := rand.New(rand.NewPCG(seed, 0x70726f6a))
	c := &Corpus{Documents: documents}
	later := map[int][]Record{}
	emit := func(rec Record) {
		c.Records = append(c.Records, rec)
		c.Chunks += rec.Chunks
		if rec.Withdraw {
			c.Withdrawals++
		}
	}
	for doc := range documents {
		key := fmt.Sprintf("%sdoc-%07d", prefix, doc)
		emit(upsert(r, doc, key, 1))
		version, due := int64(1), doc
		if r.Float64() < NewVersionShare {
			version++
			due += 1 + r.IntN(laterWindow)
			later[due] = append(later[due], upsert(r, doc, key, version))
			c.NewVersions++
		}
		if r.Float64() < WithdrawalShare {
			due += 1 + r.IntN(laterWindow)
			later[due] = append(later[due], withdrawal(doc, key, version))
		}
		for _, rec := range later[doc] {
			emit(rec)
		}
		delete(later, doc)
	}
	for due := documents; len(later) > 0; due++ {
		for _, rec := range later[due] {
			emit(rec)
		}
		delete(later, due)
	}
	return c
}

func upsert(r *rand.Rand, doc int, key string, version int64) Record {
	var n int
	switch p := r.Float64(); {
	case p < 0.6:
		n = 1 + r.IntN(3)
	case p < 0.9:
		n = 4 + r.IntN(5)
	default:
		n = 9 + r.IntN(16)
	}
	chunks := make([]json.RawMessage, n)
	for i := range chunks {
		c := map[string]any{"text": text(r, 150+r.IntN(1050))}
		if i%2 == 0 {
			c["metadata"] = map[string]any{"section": int64(i / 2)}
		}
		chunks[i], _ = json.Marshal(c)
	}
	value, _ := json.Marshal(eventJSON{
		DocumentKey: key, Version: version,
		Title:    fmt.Sprintf("Document %d, version %d", doc, version),
		Source:   sources[doc%len(sources)],
		Metadata: map[string]any{"lang": langs[r.IntN(len(langs))], "pages": int64(n), "draft": version == 1},
		Chunks:   chunks,
	})
	return Record{Doc: doc, Key: key, Value: value, Chunks: n}
}

func withdrawal(doc int, key string, version int64) Record {
	value, _ := json.Marshal(eventJSON{DocumentKey: key, Version: version, Op: "withdraw"})
	return Record{Doc: doc, Key: key, Value: value, Withdraw: true}
}

var (
	sources = []string{"wiki", "crm", "tickets", "mail"}
	langs   = []string{"en", "de", "fr"}
	words   = strings.Fields(`projector index graph relational chunk document version ledger
fence offset partition batch commit replay reconcile vector payload schema topic broker
quarterly report customer contract invoice meeting summary release incident review
design proposal budget roadmap support ticket answer question policy security audit`)
)

// text returns about n bytes of words.
func text(r *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.String()
}

// Partition returns the partition of document doc among n, the same for
// the service's topic and for the writers of the other measurements. A
// document's events all go to one partition, in order.
func Partition(doc, n int) int {
	x := uint64(doc) + 0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	return int(x % uint64(n))
}
