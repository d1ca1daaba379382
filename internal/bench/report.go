package bench

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// Measurement is one timed drain or write of the corpus (or, for the naive
// projector, of its sample).
type Measurement struct {
	// Events is the number of records handled; for the naive projector, the
	// records its chunks amount to at the corpus's chunks per record.
	Events  float64
	Chunks  int
	Seconds float64
	// PerChunk marks the naive projector's sample.
	PerChunk bool
	// Shares is where the time went: for the service, each part's sum over
	// the sum of batch times (projector_*_seconds_sum); for the ceiling,
	// each store's part of the writers' time.
	Shares Shares
	// PeakRSS is the service's peak resident memory (VmHWM), in bytes.
	PeakRSS int64
	// BatchRecords is the service's mean records per batch.
	BatchRecords float64
	// CPU is the CPU time, in seconds, each process spent over the
	// measurement: the servers of Config.Processes, and the projector (or
	// the ceiling's writers, the benchmark's own process).
	CPU map[string]float64
	// Settle is the time, in seconds, the measurement waited after its
	// last write for the index's optimizer (Config.IndexSettle): CPU
	// covers it, Seconds does not.
	Settle float64
	// Idle is, per store, the service's share of the drain with no call to
	// the store in flight; nil for the others.
	Idle map[string]float64
}

// DocumentsPerSecond is the rate of records (document versions and
// withdrawals).
func (m Measurement) DocumentsPerSecond() float64 { return m.Events / m.Seconds }

// ChunksPerSecond is the rate of chunks written.
func (m Measurement) ChunksPerSecond() float64 { return float64(m.Chunks) / m.Seconds }

// Shares are fractions of a measurement's time.
type Shares struct {
	Index, Graph, Relational, Fence, Embed float64
}

// Round is one measurement of each kind at one partition count.
type Round struct {
	Ceiling, IDs Measurement
	// Count is the service with count fences; nil when skipped.
	Count *Measurement
	// Variant is the service with Config.VariantArgs; nil without them.
	Variant *Measurement
	// Naive is nil when skipped.
	Naive *Measurement
	// Peer is the JDBC sink writing the chunk rows into PostgreSQL alone;
	// nil when not measured.
	Peer *Measurement
}

// PartitionResult holds the rounds of one partition count.
type PartitionResult struct {
	Partitions int
	Rounds     []Round
}

// Report is the benchmark's result.
type Report struct {
	Documents, Events, NewVersions, Withdrawals, Chunks int
	Seed                                                uint64
	NaiveChunks                                         int
	Partitions                                          []PartitionResult
}

// Ratios are the comparisons of one round, by chunks per second.
type Ratios struct {
	// CountToCeiling is 0 when count fences were skipped.
	CountToCeiling, IDsToCeiling float64
	// CountToNaive and IDsToNaive are 0 when the naive projector (or the
	// count fences) was skipped.
	CountToNaive, IDsToNaive float64
	// VariantToIDs is 0 without a variant.
	VariantToIDs float64
	// IDsToPeer is 0 when the peer sink was not measured.
	IDsToPeer float64
}

// Ratios compares the round's measurements.
func (r Round) Ratios() Ratios {
	out := Ratios{IDsToCeiling: r.IDs.ChunksPerSecond() / r.Ceiling.ChunksPerSecond()}
	if r.Count != nil {
		out.CountToCeiling = r.Count.ChunksPerSecond() / r.Ceiling.ChunksPerSecond()
	}
	if r.Naive != nil {
		out.IDsToNaive = r.IDs.ChunksPerSecond() / r.Naive.ChunksPerSecond()
		if r.Count != nil {
			out.CountToNaive = r.Count.ChunksPerSecond() / r.Naive.ChunksPerSecond()
		}
	}
	if r.Variant != nil {
		out.VariantToIDs = r.Variant.ChunksPerSecond() / r.IDs.ChunksPerSecond()
	}
	if r.Peer != nil {
		out.IDsToPeer = r.IDs.ChunksPerSecond() / r.Peer.ChunksPerSecond()
	}
	return out
}

// median returns the median of what f gives for each round.
func (p PartitionResult) median(f func(Round) float64) float64 {
	xs := p.sorted(f)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// sorted returns what f gives for each round, in increasing order.
func (p PartitionResult) sorted(f func(Round) float64) []float64 {
	xs := make([]float64, len(p.Rounds))
	for i, r := range p.Rounds {
		xs[i] = f(r)
	}
	slices.Sort(xs)
	return xs
}

// reportRow is a kind of measurement, a row of the report's tables.
type reportRow struct {
	name    string
	service bool
	get     func(Round) *Measurement
}

// Print writes the report as tables of medians over the runs.
func (rep *Report) Print(w io.Writer) error {
	runs := 0
	if len(rep.Partitions) > 0 {
		runs = len(rep.Partitions[0].Rounds)
	}
	perEvent := float64(rep.Chunks) / float64(rep.Events)
	fmt.Fprintf(w, "corpus: %d documents, %d records (%d new versions, %d withdrawals), %d chunks (%.2f per record), seed %d\n",
		rep.Documents, rep.Events, rep.NewVersions, rep.Withdrawals, rep.Chunks, perEvent, rep.Seed)
	fmt.Fprintf(w, "figures: medians of %d run(s); documents/s counts records (versions and withdrawals)\n", runs)
	if rep.NaiveChunks > 0 && hasNaive(rep) {
		fmt.Fprintf(w, "naive projector: one write per chunk per store, on a sample of %d chunks; its documents/s is chunks/s / %.2f chunks per record\n",
			rep.NaiveChunks, perEvent)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "partitions\tmeasurement\tdocuments/s\tchunks/s\tpeak RSS\tindex\tgraph\trelational\tfence\tembed\tbatch records\t")
	rows := []reportRow{
		{"raw-store ceiling", false, func(r Round) *Measurement { return &r.Ceiling }},
		{"end-to-end, count fences", true, func(r Round) *Measurement { return r.Count }},
		{"end-to-end, id fences", true, func(r Round) *Measurement { return &r.IDs }},
		{"end-to-end, id fences, variant", true, func(r Round) *Measurement { return r.Variant }},
		{"naive (per chunk)", false, func(r Round) *Measurement { return r.Naive }},
		{"JDBC sink, PostgreSQL only", false, func(r Round) *Measurement { return r.Peer }},
	}
	for _, p := range rep.Partitions {
		for _, rw := range rows {
			if rw.get(p.Rounds[0]) == nil {
				continue
			}
			m := func(f func(*Measurement) float64) float64 {
				return p.median(func(r Round) float64 { return f(rw.get(r)) })
			}
			pct := func(f func(*Measurement) float64) string {
				v := m(f)
				if v == 0 {
					return "-"
				}
				return fmt.Sprintf("%.0f%%", 100*v)
			}
			rss, batch := "-", "-"
			if rw.service {
				rss = fmt.Sprintf("%.0f MiB", m(func(x *Measurement) float64 { return float64(x.PeakRSS) })/(1<<20))
				batch = fmt.Sprintf("%.0f", m(func(x *Measurement) float64 { return x.BatchRecords }))
			}
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Partitions, rw.name,
				m(func(x *Measurement) float64 { return x.DocumentsPerSecond() }),
				m(func(x *Measurement) float64 { return x.ChunksPerSecond() }), rss,
				pct(func(x *Measurement) float64 { return x.Shares.Index }),
				pct(func(x *Measurement) float64 { return x.Shares.Graph }),
				pct(func(x *Measurement) float64 { return x.Shares.Relational }),
				pct(func(x *Measurement) float64 { return x.Shares.Fence }),
				pct(func(x *Measurement) float64 { return x.Shares.Embed }), batch)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nshares: of the summed batch time for the service (projector_store_write_seconds_sum, projector_fence_seconds_sum,")
	fmt.Fprintln(w, "projector_embed_seconds_sum over projector_batch_seconds_sum), of the writers' time for the ceiling")
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "partitions\tcount / ceiling\tids / ceiling\tcount / naive\tids / naive\tids / JDBC sink\tvariant / ids\t")
	for _, p := range rep.Partitions {
		ratio := func(f func(Ratios) float64) string {
			of := func(r Round) float64 { return f(r.Ratios()) }
			v := p.median(of)
			if v == 0 {
				return "-"
			}
			if xs := p.sorted(of); len(xs) > 1 {
				return fmt.Sprintf("%.2f (%.2f-%.2f)", v, xs[0], xs[len(xs)-1])
			}
			return fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Partitions,
			ratio(func(r Ratios) float64 { return r.CountToCeiling }), ratio(func(r Ratios) float64 { return r.IDsToCeiling }),
			ratio(func(r Ratios) float64 { return r.CountToNaive }), ratio(func(r Ratios) float64 { return r.IDsToNaive }),
			ratio(func(r Ratios) float64 { return r.IDsToPeer }), ratio(func(r Ratios) float64 { return r.VariantToIDs }))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nratios: of chunks/s, the median of the runs' ratios (lowest-highest), each run comparing measurements made a minute apart")
	return rep.printCPU(w, rows)
}

// cpuOrder lists the processes of the CPU table, the projector's side
// first; a process no measurement read is left out.
var cpuOrder = []string{"projector", "ceiling writers", "qdrant", "neo4j", "postgres", "kafka"}

// printCPU writes the CPU each process spent per chunk written, and the
// stores' idle shares of the service's drain.
func (rep *Report) printCPU(w io.Writer, rows []reportRow) error {
	seen := map[string]bool{}
	for _, p := range rep.Partitions {
		for _, r := range p.Rounds {
			for _, rw := range rows {
				if m := rw.get(r); m != nil {
					for name := range m.CPU {
						seen[name] = true
					}
				}
			}
		}
	}
	var names []string
	for _, n := range cpuOrder {
		if seen[n] {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "partitions\tmeasurement\t")
	for _, n := range names {
		fmt.Fprintf(tw, "%s µs/chunk\t", n)
	}
	fmt.Fprintln(tw, "all µs/chunk\tcores busy\tindex settle s\tindex idle\tgraph idle\trelational idle\t")
	for _, p := range rep.Partitions {
		for _, rw := range rows {
			if rw.get(p.Rounds[0]) == nil || len(rw.get(p.Rounds[0]).CPU) == 0 {
				continue
			}
			m := func(f func(*Measurement) float64) float64 {
				return p.median(func(r Round) float64 { return f(rw.get(r)) })
			}
			fmt.Fprintf(tw, "%d\t%s\t", p.Partitions, rw.name)
			for _, n := range names {
				fmt.Fprintf(tw, "%.1f\t", m(func(x *Measurement) float64 { return 1e6 * x.CPU[n] / float64(x.Chunks) }))
			}
			all := func(x *Measurement) float64 {
				t := 0.0
				for _, v := range x.CPU {
					t += v
				}
				return t
			}
			fmt.Fprintf(tw, "%.1f\t%.2f\t", m(func(x *Measurement) float64 { return 1e6 * all(x) / float64(x.Chunks) }),
				m(func(x *Measurement) float64 { return all(x) / (x.Seconds + x.Settle) }))
			fmt.Fprintf(tw, "%.1f\t", m(func(x *Measurement) float64 { return x.Settle }))
			for _, s := range []string{"index", "graph", "relational"} {
				if rw.service {
					fmt.Fprintf(tw, "%.0f%%\t", 100*m(func(x *Measurement) float64 { return x.Idle[s] }))
				} else {
					fmt.Fprint(tw, "-\t")
				}
			}
			fmt.Fprintln(tw)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\ncpu: user and system time from /proc/<pid>/stat over the measurement, of each process and the processes it started")
	fmt.Fprintln(w, "(PostgreSQL's backends), per chunk the measurement wrote, with the index's optimizer until the collection was green")
	fmt.Fprintln(w, "(index settle, after the timed part; --index-settle); cores busy: all of it over the wall time of both; idle: the share")
	fmt.Fprintln(w, "of the service's drain with no call of its own to the store in flight (projector_store_busy_seconds_total)")
	return nil
}

func hasNaive(rep *Report) bool {
	return len(rep.Partitions) > 0 && len(rep.Partitions[0].Rounds) > 0 && rep.Partitions[0].Rounds[0].Naive != nil
}
