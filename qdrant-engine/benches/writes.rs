//! The engine's CPU per point for the writes the projector sends, as a
//! collection grows: a batch upsert, a conditional upsert (`update_filter`)
//! of new points and of stored ones, and a delete by filter, each measured
//! on a collection filled to each size of `QE_BENCH_SIZES`.
//!
//! The requests are the projector's (internal/store/index): 256 points a
//! call, vectors of 384 dimensions, the payload it writes (document key,
//! version, title, source, event position, ordinal, text, metadata), its
//! update_filter (a document's points may be replaced by a write of the
//! same or a later event) and its delete of the points a write makes
//! obsolete. They go through the server's own gRPC handlers
//! (`PointsService`), decoded from their bytes, so what is measured is the
//! server's work but HTTP/2 and the network.
//!
//! CPU is the process's (`CLOCK_PROCESS_CPUTIME_ID`: every thread, the
//! engine's included), never wall time, read around each call so that
//! building the requests is left out. The optimizer is held off while an
//! operation's calls run and then run to the end, so its CPU is told apart
//! from the write path's; during a fill it runs every `OPTIMIZE_EVERY`
//! points, as the server's runs within 200 ms of updates. The machine is
//! shared: compare the sizes of one run, never runs of different days.
//!
//! ```sh
//! QE_BENCH_SIZES=10000,100000,1000000 QE_BENCH_POINTS=10240 cargo bench --bench writes
//! ```
//!
//! `QE_BENCH_SIZES` (points the collection holds before the operations;
//! default 2000,20000, seconds of CPU), `QE_BENCH_POINTS` (points each
//! operation writes, a multiple of 256; default 2560), `QE_BENCH_DIM`
//! (default 384), `QE_BENCH_DIR` (where the collection is made; default the
//! temporary directory, and removed after), `QE_BENCH_OPTIMIZE=0` (the
//! optimizer never runs: the write path alone, to profile it).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use qdrant_client::qdrant as grpc;
use qdrant_client::qdrant::points_server::Points;
use qdrant_client::qdrant::{Condition, Filter, Range};
use qdrant_engine::convert::json_value;
use qdrant_engine::grpc::PointsService;
use qdrant_engine::storage::{Collection, Storage};
use serde_json::json;
use tonic::Request;

const COLLECTION: &str = "bench";
/// The projector's points a call (index.Config.UpsertBatch).
const BATCH: usize = 256;
/// Chunks a document: the default corpus has 4.55 (17,103 of 3,757 records).
const CHUNKS: usize = 5;
/// Points written between two optimizer runs while filling: the server's
/// optimizer looks within 200 ms of an update, about 2,000 points of the
/// projector's upserts.
const OPTIMIZE_EVERY: usize = 2048;
/// Points written between two flushes while filling: the server flushes
/// every 5 s.
const FLUSH_EVERY: usize = 32_768;
const TOPIC: &str = "documents";
const TOPIC_ID: &str = "6f1c2b7e-3d4a-4e5f-9a8b-1c2d3e4f5a6b";

fn main() {
    let sizes = env_list("QE_BENCH_SIZES", &[2000, 20_000]);
    let points = env_list("QE_BENCH_POINTS", &[2560])[0].div_ceil(BATCH) * BATCH;
    let dim = env_list("QE_BENCH_DIM", &[384])[0];
    let root = std::env::var_os("QE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("qe-bench-{}", std::process::id()));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let storage = Arc::new(Storage::open(&root).expect("open the storage"));
    let service = PointsService { storage: storage.clone() };
    let optimize = std::env::var("QE_BENCH_OPTIMIZE").map_or(true, |v| v != "0");
    let mut bench = Bench { runtime, service, dim, optimize, next_doc: 0, stored: 0 };
    bench.migrate(&storage);
    let c = storage.get(COLLECTION).expect("the collection");
    eprintln!(
        "qdrant-engine on {}: sizes {sizes:?}, {points} points an operation, {dim} dimensions, in {}",
        qdrant_engine::grpc::ENGINE,
        root.display()
    );

    let mut rows = Vec::new();
    // Each row is told as it is measured too: a run to 1M points takes
    // hours on a busy machine, and what it measured on the way is kept.
    let mut row = |op: String, size: usize, c: Cost| {
        eprintln!("{op} at {size}: {} points, {} µs a point (write, flush, optimizer, total)", c.points, c.columns());
        rows.push((op, size, c));
    };
    for &size in &sizes {
        let from = bench.stored;
        row(format!("fill {from}-{size}"), size, bench.fill(&c, size));
        row("upsert".into(), size, bench.upsert(&c, points, false));
        let new = bench.next_doc - points / CHUNKS;
        row("conditional upsert, new points".into(), size, bench.upsert(&c, points, true));
        let conditional = bench.next_doc - points / CHUNKS;
        row("conditional upsert, overwrite".into(), size, bench.write(&c, conditional..bench.next_doc, true));
        row("delete by filter".into(), size, bench.delete(&c, new..bench.next_doc));
    }
    report(&rows, &sizes);
    drop(c);
    drop(bench);
    storage.close_all(Duration::from_secs(30));
    drop(storage);
    let _ = std::fs::remove_dir_all(&root);
}

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(v) => v.split(',').map(|n| n.trim().parse().unwrap_or_else(|_| panic!("{name}: {v}"))).collect(),
        Err(_) => default.to_vec(),
    }
}

/// The process's CPU time so far, every thread's.
fn cpu() -> Duration {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: t is a valid timespec to write to.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The CPU of one operation, by part, and the points it wrote or deleted.
#[derive(Default, Clone, Copy)]
struct Cost {
    write: Duration,
    flush: Duration,
    optimize: Duration,
    points: usize,
}

impl Cost {
    fn per_point(d: Duration, points: usize) -> f64 {
        d.as_secs_f64() * 1e6 / points.max(1) as f64
    }

    fn total(&self) -> Duration {
        self.write + self.flush + self.optimize
    }

    /// The write, flush, optimizer and total columns of a table, in µs a
    /// point.
    fn columns(&self) -> String {
        let us = |d| Self::per_point(d, self.points);
        format!(
            "{:.1} | {:.1} | {:.1} | **{:.1}**",
            us(self.write),
            us(self.flush),
            us(self.optimize),
            us(self.total())
        )
    }
}

struct Bench {
    runtime: tokio::runtime::Runtime,
    service: PointsService,
    dim: usize,
    /// Whether the optimizer runs (QE_BENCH_OPTIMIZE).
    optimize: bool,
    /// The next document number: document n holds points n*CHUNKS ...
    next_doc: usize,
    stored: usize,
}

impl Bench {
    /// The collection and payload indexes the projector's Migrate makes.
    fn migrate(&mut self, storage: &Storage) {
        storage
            .create(grpc::CreateCollection {
                collection_name: COLLECTION.into(),
                vectors_config: Some(grpc::VectorsConfig {
                    config: Some(grpc::vectors_config::Config::Params(grpc::VectorParams {
                        size: self.dim as u64,
                        distance: grpc::Distance::Cosine as i32,
                        ..Default::default()
                    })),
                }),
                ..Default::default()
            })
            .expect("create the collection");
        for (field, kind) in [("document_key", grpc::FieldType::Keyword), ("version", grpc::FieldType::Integer)] {
            let req = grpc::CreateFieldIndexCollection {
                collection_name: COLLECTION.into(),
                field_name: field.into(),
                field_type: Some(kind as i32),
                wait: Some(true),
                ..Default::default()
            };
            self.runtime.block_on(self.service.create_field_index(Request::new(req))).expect("a payload index");
        }
    }

    /// Fills the collection to `size` points with batch upserts, the
    /// optimizer run every OPTIMIZE_EVERY points and to its end at the
    /// end, as the server's would leave it.
    fn fill(&mut self, c: &Collection, size: usize) -> Cost {
        let mut cost = Cost::default();
        let mut since_optimize = 0;
        let mut since_flush = 0;
        while self.stored < size {
            let docs = (BATCH / CHUNKS).min((size - self.stored).div_ceil(CHUNKS));
            let first = self.next_doc;
            self.next_doc += docs;
            let req = self.upsert_request(first..self.next_doc, 1, false);
            cost.write += self.call_upsert(req);
            cost.points += docs * CHUNKS;
            self.stored += docs * CHUNKS;
            since_optimize += docs * CHUNKS;
            since_flush += docs * CHUNKS;
            if since_optimize >= OPTIMIZE_EVERY && self.optimize {
                cost.optimize += measure(|| c.optimize());
                since_optimize = 0;
            }
            if since_flush >= FLUSH_EVERY {
                cost.flush += measure(|| c.flush().expect("flush"));
                since_flush = 0;
            }
        }
        self.settle(c, &mut cost);
        cost
    }

    /// Flushes the segments and runs the optimizer to its end, as the
    /// server's timers would after the operation's writes.
    fn settle(&self, c: &Collection, cost: &mut Cost) {
        cost.flush += measure(|| c.flush().expect("flush"));
        if self.optimize {
            cost.optimize += measure(|| c.optimize());
        }
    }

    /// Upserts the points of `points / CHUNKS` new documents, in calls of
    /// 51 documents (255 points), with the projector's update_filter when
    /// `conditional`.
    fn upsert(&mut self, c: &Collection, points: usize, conditional: bool) -> Cost {
        let first = self.next_doc;
        self.next_doc += points / CHUNKS;
        self.stored += points / CHUNKS * CHUNKS;
        self.write(c, first..self.next_doc, conditional)
    }

    /// Upserts the points of `docs` at version 1; when they are stored,
    /// the same event as they hold (a redelivery), which the update_filter
    /// lets replace them.
    fn write(&mut self, c: &Collection, docs: std::ops::Range<usize>, conditional: bool) -> Cost {
        let mut cost = Cost { points: docs.len() * CHUNKS, ..Default::default() };
        for calls in docs.clone().step_by(BATCH / CHUNKS) {
            let req = self.upsert_request(calls..(calls + BATCH / CHUNKS).min(docs.end), 1, conditional);
            cost.write += self.call_upsert(req);
        }
        self.settle(c, &mut cost);
        cost
    }

    /// Deletes the points of `docs` as the projector does after writing a
    /// version 2 of them: with the filter of the points that write makes
    /// obsolete, one call per call's worth of documents.
    fn delete(&mut self, c: &Collection, docs: std::ops::Range<usize>) -> Cost {
        let mut cost = Cost { points: docs.len() * CHUNKS, ..Default::default() };
        for calls in docs.clone().step_by(BATCH / CHUNKS) {
            let req = self.obsolete_request(calls..(calls + BATCH / CHUNKS).min(docs.end), 2);
            let bytes = req.encode_to_vec();
            cost.write += measure(|| {
                let req = grpc::DeletePoints::decode(bytes.as_slice()).expect("decode");
                self.runtime.block_on(self.service.delete(Request::new(req))).expect("delete");
            });
        }
        self.stored -= cost.points;
        self.settle(c, &mut cost);
        cost
    }

    /// The CPU of one upsert call, from its bytes as the server reads them.
    fn call_upsert(&self, req: grpc::UpsertPoints) -> Duration {
        let bytes = req.encode_to_vec();
        measure(|| {
            let req = grpc::UpsertPoints::decode(bytes.as_slice()).expect("decode");
            self.runtime.block_on(self.service.upsert(Request::new(req))).expect("upsert");
        })
    }

    fn upsert_request(&self, docs: std::ops::Range<usize>, version: i64, conditional: bool) -> grpc::UpsertPoints {
        let points =
            docs.clone().flat_map(|d| (0..CHUNKS).map(move |i| (d, i))).map(|(d, i)| self.point(d, version, i));
        grpc::UpsertPoints {
            collection_name: COLLECTION.into(),
            wait: Some(true),
            points: points.collect(),
            update_filter: conditional.then(|| Filter::should(docs.map(|d| Condition::from(doc_replace(d, version))))),
            ..Default::default()
        }
    }

    /// Point `i` of document `d` at `version`, with the projector's payload.
    fn point(&self, d: usize, version: i64, i: usize) -> grpc::PointStruct {
        let (topic, partition, offset) = position(d, version);
        let text_len = 150 + mix(d as u64 * 31 + i as u64) as usize % 1050;
        let lang = ["en", "de", "fr"][d % 3];
        let mut metadata = json!({"lang": lang, "pages": CHUNKS, "draft": version == 1});
        if i.is_multiple_of(2) {
            metadata["section"] = json!(i / 2);
        }
        let payload = json!({
            "document_key": key(d),
            "version": version,
            "title": format!("Document {d}, version {version}"),
            "source": format!("s3://corpus/{}", d % 7),
            "source_topic": topic,
            "source_partition": partition,
            "source_offset": offset,
            "source_topic_id": TOPIC_ID,
            "ordinal": i,
            "text": text(d as u64 * 7919 + i as u64, text_len),
            "metadata": metadata,
        });
        let serde_json::Value::Object(fields) = payload else { unreachable!("an object") };
        #[allow(deprecated)]
        let vector = grpc::Vector {
            data: vec![],
            indices: None,
            vectors_count: None,
            vector: Some(grpc::vector::Vector::Dense(grpc::DenseVector { data: self.vector(d, version, i) })),
        };
        grpc::PointStruct {
            id: Some(grpc::PointId {
                point_id_options: Some(grpc::point_id::PointIdOptions::Uuid(chunk_id(d, version, i))),
            }),
            payload: fields.into_iter().map(|(k, v)| (k, json_value(v))).collect::<HashMap<_, _>>(),
            vectors: Some(grpc::Vectors { vectors_options: Some(grpc::vectors::VectorsOptions::Vector(vector)) }),
        }
    }

    /// Numbers in [-1, 1), the same for the same point.
    fn vector(&self, d: usize, version: i64, i: usize) -> Vec<f32> {
        let seed = mix((d as u64) << 20 | (version as u64) << 8 | i as u64);
        (0..self.dim as u64).map(|j| (mix(seed ^ j) % 2000) as f32 / 1000.0 - 1.0).collect()
    }

    /// The projector's delete after a write of `docs` at `version`
    /// (appendObsolete): per document its points of that version from an
    /// event up to the written one that the write does not hold, and the
    /// documents' older versions.
    fn obsolete_request(&self, docs: std::ops::Range<usize>, version: i64) -> grpc::DeletePoints {
        let mut should: Vec<Condition> = docs
            .clone()
            .map(|d| {
                let mut f = Filter::must([
                    Condition::matches("document_key", key(d)),
                    Condition::matches("version", version),
                    replaceable(d, version).into(),
                ]);
                f.must_not = vec![Condition::has_id((0..CHUNKS).map(|i| grpc::PointId {
                    point_id_options: Some(grpc::point_id::PointIdOptions::Uuid(chunk_id(d, version, i))),
                }))];
                f.into()
            })
            .collect();
        should.push(
            Filter::must([
                Condition::matches("document_key", docs.map(key).collect::<Vec<_>>()),
                Condition::range("version", Range { lt: Some(version as f64), ..Default::default() }),
            ])
            .into(),
        );
        grpc::DeletePoints {
            collection_name: COLLECTION.into(),
            wait: Some(true),
            points: Some(grpc::PointsSelector {
                points_selector_one_of: Some(grpc::points_selector::PointsSelectorOneOf::Filter(Filter::should(
                    should,
                ))),
            }),
            ..Default::default()
        }
    }
}

fn measure(f: impl FnOnce()) -> Duration {
    let t = cpu();
    f();
    cpu() - t
}

fn key(d: usize) -> String {
    format!("doc-{d:08}")
}

/// The event position of document `d` at `version`: one log of two
/// partitions, each version a later offset.
fn position(d: usize, version: i64) -> (&'static str, i64, i64) {
    (TOPIC, (d % 2) as i64, (d as i64) * 4 + version)
}

/// A document's condition in an upsert's update_filter
/// (appendDocReplace): its key, and a stored event at or before the
/// written one.
fn doc_replace(d: usize, version: i64) -> Filter {
    Filter::must([Condition::matches("document_key", key(d)), replaceable(d, version).into()])
}

/// The condition that a stored point may be replaced by the write of `d`
/// at `version` (appendReplaceable).
fn replaceable(d: usize, version: i64) -> Filter {
    let (topic, partition, offset) = position(d, version);
    Filter::should([
        Condition::is_empty("source_offset"),
        Filter::must_not([Condition::matches("source_topic", topic.to_string())]).into(),
        Filter::must_not([Condition::matches("source_partition", partition)]).into(),
        Condition::range("source_offset", Range { lte: Some(offset as f64), ..Default::default() }),
        Filter::must_not([
            Condition::is_empty("source_topic_id"),
            Condition::matches("source_topic_id", TOPIC_ID.to_string()),
        ])
        .into(),
    ])
}

/// A chunk's id, a UUID as the projector's (keys.ChunkID) are: the same
/// for the same document, version and ordinal.
fn chunk_id(d: usize, version: i64, i: usize) -> String {
    let hi = mix((d as u64) << 16 | (version as u64) << 8 | i as u64);
    let lo = mix(hi ^ 0x5851_F42D_4C95_7F2D);
    let u = (u128::from(hi) << 64 | u128::from(lo)) & !(0xF000 << 64) | (0x5000 << 64);
    let h = format!("{u:032x}");
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// SplitMix64: a well-spread number for each input.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `len` bytes of words, the same for the same seed.
fn text(seed: u64, len: usize) -> String {
    const WORDS: [&str; 8] = ["index", "vector", "point", "segment", "payload", "filter", "shard", "chunk"];
    let mut out = String::with_capacity(len + 8);
    let mut x = seed;
    while out.len() < len {
        x = mix(x);
        out.push_str(WORDS[(x % 8) as usize]);
        out.push(' ');
    }
    out.truncate(len);
    out
}

fn report(rows: &[(String, usize, Cost)], sizes: &[usize]) {
    let us = Cost::per_point;
    println!("| operation | collection | points | write | flush | optimizer | total (µs/point) |");
    println!("|---|---|---|---|---|---|---|");
    for (op, size, c) in rows {
        println!("| {op} | {size} | {} | {} |", c.points, c.columns());
    }
    // The optimizer's work comes in lumps (an HNSW build each time the
    // appendable segment passes the indexing threshold, a merge now and
    // then), so an operation's own share says little: the four together
    // at a size, per point they touched, is what a stream of them costs.
    let round = |size: usize| {
        rows.iter().filter(|(o, s, _)| *s == size && !o.starts_with("fill")).fold(Cost::default(), |a, (_, _, c)| {
            Cost {
                write: a.write + c.write,
                flush: a.flush + c.flush,
                optimize: a.optimize + c.optimize,
                points: a.points + c.points,
            }
        })
    };
    println!();
    println!("| the four operations together | write | flush | optimizer | total (µs/point) |");
    println!("|---|---|---|---|---|");
    for &size in sizes {
        let c = round(size);
        println!("| at {size} ({} points) | {} |", c.points, c.columns());
    }
    let (Some(first), Some(last)) = (sizes.first(), sizes.last()) else { return };
    println!();
    println!("| operation | write, {last} / {first} | total, {last} / {first} |");
    println!("|---|---|---|");
    let at = |op: &str, size: usize| rows.iter().find(|(o, s, _)| o == op && *s == size).map(|(_, _, c)| *c);
    for (op, _, _) in rows.iter().filter(|(o, s, _)| *s == *first && !o.starts_with("fill")) {
        let (Some(a), Some(b)) = (at(op, *first), at(op, *last)) else { continue };
        println!(
            "| {op} | {:.2} | {:.2} |",
            us(b.write, b.points) / us(a.write, a.points),
            us(b.total(), b.points) / us(a.total(), a.points)
        );
    }
    let (a, b) = (round(*first), round(*last));
    println!(
        "| the four together | {:.2} | {:.2} |",
        us(b.write, b.points) / us(a.write, a.points),
        us(b.total(), b.points) / us(a.total(), a.points)
    );
}
