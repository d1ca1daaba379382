//! One collection: its engine shards, how points are routed to them, the
//! order its updates are applied in, and its optimizer.
//!
//! On disk, under the collection's directory:
//!
//! ```text
//! shard/, shard-1/, ...  engine shard 0, 1, ...: segments and the engine's WAL
//! collection.pb          the CreateCollection it was made with (updates merged in)
//! intake.log             updates taken and not yet applied, in order
//! intake.applied         the number of the last one applied
//! ```
//!
//! **Updates**, as the server takes them: an update is written to the intake
//! log and queued before it is answered; one thread per collection applies
//! the queue in order to the shards (where each is written to the engine's
//! WAL, then to the segments). `wait=true` answers once its update is
//! applied, `wait=false` once it is in the intake log, so a client that
//! forgets `wait` races here as it does on the server, and loses nothing
//! acknowledged to a SIGKILL: at load the updates of the intake log after
//! the last one applied are applied again before the collection is served.
//! One applied twice that way (killed between applying it and counting it)
//! changes nothing: every update this server takes gives the same points
//! applied twice in a row.
//!
//! **Shards**: points are routed by id as the server routes them, on its
//! hash ring (100 places a shard, SipHash-2-4 of the id's stable bytes);
//! a filter update and a field index go to every shard; reads ask every
//! shard and merge.

use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use prost::Message;
use qdrant_client::qdrant as grpc;
use qdrant_edge::{
    ConditionalInsertOperation, CountRequest, CreateIndex, DEFAULT_VECTOR_NAME, Distance, EdgeConfigBuilder,
    EdgeOptimizersConfig, EdgeShard, EdgeVectorParamsBuilder, FacetRequest, FacetResponse, FieldIndexOperations,
    Filter, HnswIndexConfig, JsonPath, Memory, PayloadFieldSchema, PayloadSchemaType, PointId, PointInsertOperations,
    PointOperations, PointStructPersisted, QueryRequest, Record, RetrieveRequest, ScoredPoint, ScrollRequest,
    ShardInfo, UpdateMode, UpdateOperation, VectorStructPersisted, WithPayloadInterface, WithVector,
};
use siphasher::sip::SipHasher24;
use tokio::sync::oneshot;

use crate::error::ApiError;

pub const META_FILE: &str = "collection.pb";
const INTAKE_LOG: &str = "intake.log";
const INTAKE_APPLIED: &str = "intake.applied";
/// The server's places on its hash ring for each shard (`HASH_RING_SHARD_SCALE`).
const RING_SCALE: u32 = 100;
/// Updates taken and not yet applied, at most: past it a new update waits
/// for room, so a flood of `wait=false` updates holds its callers back
/// instead of growing the queue without end.
const QUEUE_BOUND: u64 = 128;
/// The intake log's size past which the updates already applied are cut
/// from it, when a steady stream never lets it empty.
const INTAKE_COMPACT_BYTES: u64 = 64 << 20;

/// The directory of engine shard `i`: `shard` for the first, as the layout
/// of one shard a collection always had.
fn shard_dir(dir: &Path, i: usize) -> PathBuf {
    if i == 0 { dir.join("shard") } else { dir.join(format!("shard-{i}")) }
}

/// An update taken, waiting to be applied; `reply` is there when the caller
/// waits for it.
struct Job {
    seq: u64,
    op: UpdateOperation,
    reply: Option<oneshot::Sender<Result<(), ApiError>>>,
}

/// The intake log and the queue it feeds. The lock is held across the log
/// write and the send, so the queue's order is the log's.
struct Intake {
    log: File,
    applied: File,
    next_seq: u64,
    last_written: u64,
    last_applied: u64,
    queue: Option<mpsc::Sender<Job>>,
}

/// One collection.
pub struct Collection {
    pub dir: PathBuf,
    shards: Vec<EdgeShard>,
    ring: Option<hashring::HashRing<RingNode, BuildHasherDefault<SipHasher24>>>,
    meta: Mutex<grpc::CreateCollection>,
    /// Vector sizes by name ("" is the unnamed vector), to check points
    /// before they are taken.
    sizes: HashMap<String, usize>,
    /// Whether a higher score is a better one, by vector name.
    higher_is_better: HashMap<String, bool>,
    intake: Mutex<Intake>,
    /// Signalled when an update is applied: there is room in the queue.
    room: std::sync::Condvar,
    /// Optimizations running now, for the collection's status.
    optimizing: AtomicUsize,
    /// Whether updates were applied since the optimizer last looked.
    dirty: AtomicBool,
    /// Set by a delete that could not wait for an optimization to end: what
    /// to do with the directory once the shards are closed.
    on_drop: Mutex<Option<OnDrop>>,
}

/// What a delete leaves for the last holder of a collection to do with its
/// directory.
pub type OnDrop = Box<dyn FnOnce(&Path) + Send>;

impl Drop for Collection {
    fn drop(&mut self) {
        let Some(then) = self.on_drop.get_mut().ok().and_then(Option::take) else { return };
        // Close (and flush) the shards before their files go.
        drop(std::mem::take(&mut self.shards));
        then(&self.dir);
    }
}

/// A shard's place on the ring, hashed as the server hashes `(ShardId, u32)`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct RingNode(u32, u32);

impl Hash for RingNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write(&self.0.to_ne_bytes());
        state.write(&self.1.to_ne_bytes());
    }
}

/// A point id hashed as the server's `StableHash` of `ExtendedPointId`.
struct RingKey(PointId);

impl Hash for RingKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self.0 {
            PointId::NumId(n) => {
                state.write(&0u64.to_ne_bytes());
                state.write(&n.to_ne_bytes());
            }
            PointId::Uuid(u) => {
                state.write(&1u64.to_ne_bytes());
                state.write(&(u.as_bytes().len() as u64).to_ne_bytes());
                state.write(u.as_bytes());
            }
        }
    }
}

impl Collection {
    /// Makes the engine shards of a new collection under `dir` (a directory
    /// being created) and closes them again.
    pub fn make(dir: &Path, req: &grpc::CreateCollection) -> Result<(), ApiError> {
        let mut builder =
            EdgeConfigBuilder::new().payload_memory(Memory::from_on_disk(req.on_disk_payload.unwrap_or(true)));
        for (name, params) in vector_params(req)? {
            builder = builder.vector(name, params.build());
        }
        if let Some(h) = &req.hnsw_config {
            builder = builder.hnsw_config(hnsw(h));
        }
        if let Some(o) = &req.optimizers_config {
            builder = builder.optimizers(optimizers(o));
        }
        let config = builder.build();
        for i in 0..req.shard_number.unwrap_or(1).max(1) as usize {
            let shard = EdgeShard::new(&shard_dir(dir, i), config.clone())?;
            // The server numbers a shard's first operation 1, the engine 0:
            // an empty delete takes 0, so that point versions, which a
            // search returns, are the server's.
            shard.update(UpdateOperation::PointOperation(PointOperations::DeletePoints { ids: vec![] }))?;
        }
        Ok(())
    }

    /// Loads a collection, replaying each shard's WAL and then the updates
    /// taken and not yet applied, and starts the thread that applies its
    /// updates.
    pub fn load(dir: &Path) -> Result<Arc<Self>, String> {
        let bytes = std::fs::read(dir.join(META_FILE)).map_err(|e| format!("{META_FILE}: {e}"))?;
        let meta = grpc::CreateCollection::decode(bytes.as_slice()).map_err(|e| format!("{META_FILE}: {e}"))?;
        let params = vector_params(&meta).map_err(|e| e.to_string())?;
        let sizes = params.iter().map(|(n, p)| (n.clone(), p.clone().build().size)).collect();
        let higher_is_better = params
            .iter()
            .map(|(n, p)| (n.clone(), matches!(p.clone().build().distance, Distance::Cosine | Distance::Dot)))
            .collect();
        let n = meta.shard_number.unwrap_or(1).max(1) as usize;
        let shards = (0..n)
            .map(|i| EdgeShard::load(&shard_dir(dir, i), None).map_err(|e| format!("shard {i}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let ring = (n > 1).then(|| {
            let mut ring = hashring::HashRing::with_hasher(BuildHasherDefault::<SipHasher24>::default());
            for shard in 0..n as u32 {
                for place in 0..RING_SCALE {
                    ring.add(RingNode(shard, place));
                }
            }
            ring
        });
        let open = |name: &str| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(dir.join(name))
                .map_err(|e| format!("{name}: {e}"))
        };
        let (mut log, mut applied) = (open(INTAKE_LOG)?, open(INTAKE_APPLIED)?);
        let mut mark = [0u8; 8];
        let applied_seq = match applied.read(&mut mark) {
            Ok(8) => u64::from_le_bytes(mark),
            _ => 0,
        };
        let pending = read_intake(&mut log).map_err(|e| format!("{INTAKE_LOG}: {e}"))?;
        let last = pending.last().map_or(applied_seq, |(seq, _)| (*seq).max(applied_seq));
        let c = Self {
            dir: dir.to_path_buf(),
            shards,
            ring,
            meta: Mutex::new(meta),
            sizes,
            higher_is_better,
            room: std::sync::Condvar::new(),
            intake: Mutex::new(Intake {
                log,
                applied,
                next_seq: last + 1,
                last_written: last,
                last_applied: last,
                queue: None,
            }),
            optimizing: AtomicUsize::new(0),
            dirty: AtomicBool::new(true),
            on_drop: Mutex::new(None),
        };
        let replay: Vec<_> = pending.into_iter().filter(|(seq, _)| *seq > applied_seq).collect();
        if !replay.is_empty() {
            log::info!("{}: applying {} updates taken before a stop", dir.display(), replay.len());
        }
        for (seq, op) in replay {
            if let Err(e) = c.apply(op) {
                log::warn!("{}: update {seq} taken before a stop failed: {e}", dir.display());
            }
        }
        c.mark_applied(last);
        let c = Arc::new(c);
        let (tx, rx) = mpsc::channel::<Job>();
        c.intake.lock().expect("intake lock").queue = Some(tx);
        let worker = c.clone();
        std::thread::Builder::new()
            .name("qe-apply".into())
            .spawn(move || worker.apply_queue(rx))
            .map_err(|e| format!("start the update thread: {e}"))?;
        Ok(c)
    }

    /// Stops taking updates and optimizing; the thread applies what it has
    /// and ends, letting the collection go.
    pub fn close(&self) {
        self.intake.lock().expect("intake lock").queue = None;
        self.room.notify_all();
        self.dirty.store(false, Ordering::Release);
    }

    fn closed(&self) -> bool {
        self.intake.lock().expect("intake lock").queue.is_none()
    }

    /// Leaves `then` to the last holder of the collection, to run on its
    /// directory once its shards are closed.
    pub fn on_drop(&self, then: OnDrop) {
        *self.on_drop.lock().expect("on_drop lock") = Some(then);
    }

    /// Takes an update: writes it to the intake log and queues it. The
    /// receiver, when asked for, tells once it is applied.
    pub fn submit(
        &self,
        op: UpdateOperation,
        wait: bool,
    ) -> Result<Option<oneshot::Receiver<Result<(), ApiError>>>, ApiError> {
        let mut op = op;
        let frame = frame(0, &mut op).map_err(|e| ApiError::Internal(format!("encode an update: {e}")))?;
        let mut intake = self.intake.lock().expect("intake lock");
        while intake.queue.is_some() && intake.last_written - intake.last_applied >= QUEUE_BOUND {
            intake = self.room.wait(intake).expect("intake lock");
        }
        let Some(queue) = intake.queue.clone() else {
            return Err(ApiError::collection_not_found(&self.name()));
        };
        let seq = intake.next_seq;
        let mut frame = frame;
        frame[..8].copy_from_slice(&seq.to_le_bytes());
        // No fsync, as the server's WAL has none per update: what is
        // written survives the process, not the machine.
        intake.log.write_all(&frame).map_err(|e| ApiError::Internal(format!("write {INTAKE_LOG}: {e}")))?;
        intake.next_seq += 1;
        intake.last_written = seq;
        let (reply, rx) = match wait {
            true => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx))
            }
            false => (None, None),
        };
        queue.send(Job { seq, op, reply }).map_err(|_| ApiError::collection_not_found(&self.name()))?;
        Ok(rx)
    }

    /// Takes an update and waits until it is applied, from a thread that
    /// may block.
    #[cfg(test)]
    pub fn apply_now(&self, op: UpdateOperation) -> Result<(), ApiError> {
        let rx = self.submit(op, true)?.expect("a receiver when waiting");
        rx.blocking_recv().map_err(|_| ApiError::Internal("the update thread ended".into()))?
    }

    /// Whether every update taken is applied.
    pub fn drained(&self) -> bool {
        let intake = self.intake.lock().expect("intake lock");
        intake.last_applied >= intake.last_written
    }

    fn name(&self) -> String {
        self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    fn apply_queue(&self, rx: mpsc::Receiver<Job>) {
        while let Ok(job) = rx.recv() {
            let result = self.apply(job.op);
            self.mark_applied(job.seq);
            if !self.closed() {
                self.dirty.store(true, Ordering::Release);
            }
            match job.reply {
                Some(reply) => {
                    let _ = reply.send(result);
                }
                None => {
                    if let Err(e) = result {
                        // As on the server: an update answered before it was
                        // applied fails in the log only.
                        log::warn!("collection {}: update {} failed: {e}", self.name(), job.seq);
                    }
                }
            }
        }
    }

    /// Counts `seq` as applied, and empties the intake log once every
    /// update written to it is.
    fn mark_applied(&self, seq: u64) {
        let mut intake = self.intake.lock().expect("intake lock");
        intake.last_applied = seq;
        self.room.notify_all();
        if let Err(e) = intake.applied.write_all_at(&seq.to_le_bytes(), 0) {
            log::error!("collection {}: write {INTAKE_APPLIED}: {e}", self.name());
        }
        if seq >= intake.last_written {
            if let Err(e) = intake.log.set_len(0).and_then(|()| intake.log.seek(SeekFrom::Start(0)).map(|_| ())) {
                log::error!("collection {}: empty {INTAKE_LOG}: {e}", self.name());
            }
        } else if intake.log.metadata().is_ok_and(|m| m.len() > INTAKE_COMPACT_BYTES)
            && let Err(e) = self.compact(&mut intake)
        {
            log::error!("collection {}: compact {INTAKE_LOG}: {e}", self.name());
        }
    }

    /// Rewrites the intake log with only the updates not yet applied (at
    /// most the queue's bound), through a new file and a rename, so a crash
    /// leaves the old log or the new.
    fn compact(&self, intake: &mut Intake) -> std::io::Result<()> {
        let mut pending: Vec<(u64, UpdateOperation)> =
            read_intake(&mut intake.log)?.into_iter().filter(|(seq, _)| *seq > intake.last_applied).collect();
        let tmp = self.dir.join(format!("{INTAKE_LOG}.tmp"));
        let mut out = File::create(&tmp)?;
        for (seq, op) in &mut pending {
            out.write_all(&frame(*seq, op).map_err(std::io::Error::other)?)?;
        }
        out.sync_all()?;
        std::fs::rename(&tmp, self.dir.join(INTAKE_LOG))?;
        let mut log = std::fs::OpenOptions::new().read(true).write(true).open(self.dir.join(INTAKE_LOG))?;
        log.seek(SeekFrom::End(0))?;
        intake.log = log;
        Ok(())
    }

    /// Applies one update to the shards it concerns.
    fn apply(&self, op: UpdateOperation) -> Result<(), ApiError> {
        for (i, op) in self.split(op) {
            let twice = matches!(op, UpdateOperation::FieldIndexOperation(FieldIndexOperations::CreateIndex(_)));
            if twice {
                // The server applies a payload index twice, once from its
                // consensus and once as the update (its do_create_index),
                // and so takes two operation numbers: here too.
                self.shards[i].update(op.clone())?;
            }
            self.shards[i].update(op)?;
        }
        Ok(())
    }

    /// The shard of a point.
    fn shard_of(&self, id: PointId) -> usize {
        match &self.ring {
            None => 0,
            Some(ring) => ring.get(&RingKey(id)).map_or(0, |n| n.0 as usize),
        }
    }

    /// An update split into the shards it goes to, as the server splits it:
    /// points and ids by their shard (a shard with none gets nothing), the
    /// rest to every shard.
    fn split(&self, op: UpdateOperation) -> Vec<(usize, UpdateOperation)> {
        use PointOperations::{DeletePoints, UpsertPoints, UpsertPointsConditional};
        if self.shards.len() == 1 {
            return vec![(0, op)];
        }
        let by_shard = |points: Vec<PointStructPersisted>| {
            let mut parts: Vec<Vec<PointStructPersisted>> = vec![Vec::new(); self.shards.len()];
            for p in points {
                parts[self.shard_of(p.id)].push(p);
            }
            parts.into_iter().enumerate().filter(|(_, p)| !p.is_empty()).collect::<Vec<_>>()
        };
        match op {
            UpdateOperation::PointOperation(UpsertPoints(PointInsertOperations::PointsList(points))) => {
                by_shard(points)
                    .into_iter()
                    .map(|(i, p)| {
                        (i, UpdateOperation::PointOperation(UpsertPoints(PointInsertOperations::PointsList(p))))
                    })
                    .collect()
            }
            UpdateOperation::PointOperation(UpsertPointsConditional(ConditionalInsertOperation {
                points_op: PointInsertOperations::PointsList(points),
                condition,
                update_mode,
            })) => by_shard(points)
                .into_iter()
                .map(|(i, p)| {
                    let op = ConditionalInsertOperation {
                        points_op: PointInsertOperations::PointsList(p),
                        condition: condition.clone(),
                        update_mode,
                    };
                    (i, UpdateOperation::PointOperation(UpsertPointsConditional(op)))
                })
                .collect(),
            UpdateOperation::PointOperation(DeletePoints { ids }) => {
                let mut parts: Vec<Vec<PointId>> = vec![Vec::new(); self.shards.len()];
                for id in ids {
                    parts[self.shard_of(id)].push(id);
                }
                parts
                    .into_iter()
                    .enumerate()
                    .filter(|(_, ids)| !ids.is_empty())
                    .map(|(i, ids)| (i, UpdateOperation::PointOperation(DeletePoints { ids })))
                    .collect()
            }
            other => (0..self.shards.len()).map(|i| (i, other.clone())).collect(),
        }
    }

    /// What the collection was created with, updates merged in.
    pub fn meta(&self) -> grpc::CreateCollection {
        self.meta.lock().expect("meta lock").clone()
    }

    /// Changes what the collection was created with, saving it first; the
    /// HNSW and optimizer settings are handed to the shards, whose
    /// optimizer then acts on them.
    pub fn update_meta(
        &self,
        f: impl FnOnce(&mut grpc::CreateCollection) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        let mut meta = self.meta.lock().expect("meta lock");
        let mut next = meta.clone();
        f(&mut next)?;
        crate::storage::write_atomically(&self.dir.join(META_FILE), &next.encode_to_vec())?;
        for shard in &self.shards {
            if next.hnsw_config != meta.hnsw_config {
                shard.set_hnsw_config(hnsw(next.hnsw_config.as_ref().unwrap_or(&Default::default())))?;
            }
            if next.optimizers_config != meta.optimizers_config {
                shard.set_optimizers_config(optimizers(
                    next.optimizers_config.as_ref().unwrap_or(&Default::default()),
                ))?;
            }
        }
        *meta = next;
        self.dirty.store(true, Ordering::Release);
        Ok(())
    }

    /// The vector sizes by name, "" for the unnamed vector.
    pub fn sizes(&self) -> &HashMap<String, usize> {
        &self.sizes
    }

    /// Strict mode's `upsert_max_batchsize`, with the server's message.
    pub fn check_upsert_limit(&self, n: usize) -> Result<(), ApiError> {
        let meta = self.meta.lock().expect("meta lock");
        let Some(strict) = meta.strict_mode_config.as_ref().filter(|s| s.enabled == Some(true)) else { return Ok(()) };
        match strict.upsert_max_batchsize {
            Some(limit) if n as u64 > limit => Err(ApiError::BadRequest(format!(
                "Limit exceeded {n} > {limit} for \"upsert limit\". Help: Reduce the \"upsert limit\" parameter to or below {limit}."
            ))),
            _ => Ok(()),
        }
    }

    /// The update that upserts points; with a condition, an existing point
    /// is overwritten only where it matches (Qdrant's conditional upsert).
    pub fn upsert_op(
        points: Vec<PointStructPersisted>,
        condition: Option<Filter>,
        mode: Option<UpdateMode>,
    ) -> UpdateOperation {
        let points_op = PointInsertOperations::PointsList(points);
        UpdateOperation::PointOperation(match (condition, mode) {
            (None, None | Some(UpdateMode::Upsert)) => PointOperations::UpsertPoints(points_op),
            (condition, mode) => PointOperations::UpsertPointsConditional(ConditionalInsertOperation {
                points_op,
                condition: condition.unwrap_or_default(),
                update_mode: mode,
            }),
        })
    }

    pub fn delete_ids_op(ids: Vec<PointId>) -> UpdateOperation {
        UpdateOperation::PointOperation(PointOperations::DeletePoints { ids })
    }

    pub fn delete_filter_op(filter: Filter) -> UpdateOperation {
        UpdateOperation::PointOperation(PointOperations::DeletePointsByFilter(filter))
    }

    pub fn create_index_op(field: JsonPath, schema: PayloadSchemaType) -> UpdateOperation {
        UpdateOperation::FieldIndexOperation(FieldIndexOperations::CreateIndex(CreateIndex {
            field_name: field,
            field_schema: Some(PayloadFieldSchema::FieldType(schema)),
        }))
    }

    pub fn delete_index_op(field: JsonPath) -> UpdateOperation {
        UpdateOperation::FieldIndexOperation(FieldIndexOperations::DeleteIndex(field))
    }

    /// A page of points in id order from `req.offset`, and the id the next
    /// page starts at: each shard is asked for one more than the page, and
    /// the answers merged, as the server merges them.
    pub fn scroll(&self, req: ScrollRequest) -> Result<(Vec<Record>, Option<PointId>), ApiError> {
        if self.shards.len() == 1 {
            return Ok(self.shards[0].scroll(req)?);
        }
        let limit = req.limit.unwrap_or(10);
        let mut all = Vec::new();
        for shard in &self.shards {
            let mut r = req.clone();
            r.limit = Some(limit + 1);
            all.extend(shard.scroll(r)?.0);
        }
        all.sort_by_key(|r| r.id);
        all.dedup_by_key(|r| r.id);
        let next = (all.len() > limit).then(|| all[limit].id);
        all.truncate(limit);
        Ok((all, next))
    }

    /// Points by id, in the order asked for, those that exist.
    pub fn retrieve(
        &self,
        ids: Vec<PointId>,
        with_payload: WithPayloadInterface,
        with_vector: WithVector,
    ) -> Result<Vec<Record>, ApiError> {
        let req = |point_ids| RetrieveRequest {
            point_ids,
            with_payload: Some(with_payload.clone()),
            with_vector: Some(with_vector.clone()),
        };
        if self.shards.len() == 1 {
            return Ok(self.shards[0].retrieve(req(ids))?);
        }
        let mut parts: Vec<Vec<PointId>> = vec![Vec::new(); self.shards.len()];
        for id in &ids {
            parts[self.shard_of(*id)].push(*id);
        }
        let mut found: HashMap<PointId, Record> = HashMap::new();
        for (i, part) in parts.into_iter().enumerate().filter(|(_, p)| !p.is_empty()) {
            found.extend(self.shards[i].retrieve(req(part))?.into_iter().map(|r| (r.id, r)));
        }
        Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
    }

    /// The points nearest a query, best first, through the engine's own
    /// search (HNSW where a segment has one, exact otherwise or when asked),
    /// each shard asked for `offset + limit` and the answers merged.
    pub fn query(&self, req: QueryRequest) -> Result<Vec<ScoredPoint>, ApiError> {
        if self.shards.len() == 1 {
            return Ok(self.shards[0].query(req)?);
        }
        let (offset, limit) = (req.offset, req.limit);
        let mut all = Vec::new();
        for shard in &self.shards {
            let mut r = req.clone();
            r.offset = 0;
            r.limit = offset + limit;
            all.extend(shard.query(r)?);
        }
        match &req.query {
            None => all.sort_by_key(|p| p.id),
            Some(q) => {
                let name = match q {
                    qdrant_edge::ScoringQuery::Vector(v) => v.get_vector_name().to_string(),
                    _ => DEFAULT_VECTOR_NAME.to_string(),
                };
                let higher = self.higher_is_better.get(&name).copied().unwrap_or(true);
                all.sort_by(|a, b| {
                    let by_score = a.score.total_cmp(&b.score);
                    (if higher { by_score.reverse() } else { by_score }).then(a.id.cmp(&b.id))
                });
            }
        }
        Ok(all.into_iter().skip(offset).take(limit).collect())
    }

    pub fn count(&self, filter: Option<Filter>, exact: bool) -> Result<usize, ApiError> {
        let mut n = 0;
        for shard in &self.shards {
            n += shard.count(CountRequest { filter: filter.clone(), exact })?;
        }
        Ok(n)
    }

    /// Facet counts summed over the shards, the most frequent first (ties
    /// by value), cut to the limit, as the server merges them.
    pub fn facet(&self, req: FacetRequest) -> Result<FacetResponse, ApiError> {
        if self.shards.len() == 1 {
            return Ok(self.shards[0].facet(req)?);
        }
        let limit = req.limit;
        let mut counts: HashMap<qdrant_edge::FacetValue, usize> = HashMap::new();
        for shard in &self.shards {
            for hit in shard.facet(req.clone())?.hits {
                *counts.entry(hit.value).or_default() += hit.count;
            }
        }
        // The server's own merge (collection/src/collection/facet.rs).
        Ok(FacetResponse::top_hits(counts, limit))
    }

    /// The shards' counts and payload schema, summed.
    pub fn info(&self) -> Result<ShardInfo, ApiError> {
        let mut total: Option<ShardInfo> = None;
        for shard in &self.shards {
            let i = shard.info()?;
            match &mut total {
                None => total = Some(i),
                Some(t) => {
                    t.segments_count += i.segments_count;
                    t.points_count += i.points_count;
                    t.indexed_vectors_count += i.indexed_vectors_count;
                    for (k, v) in i.payload_schema {
                        t.payload_schema.entry(k).and_modify(|e| e.points += v.points).or_insert(v);
                    }
                }
            }
        }
        Ok(total.expect("a collection has a shard"))
    }

    /// Whether an optimization runs now.
    pub fn optimizing(&self) -> bool {
        self.optimizing.load(Ordering::Acquire) > 0
    }

    /// Runs the engine's optimizers (vacuum, merge, indexing, config
    /// changes) on every shard, if updates came since the last run, until
    /// they plan nothing more. Blocking; the optimizer thread calls it.
    pub fn optimize(&self) {
        if !self.dirty.swap(false, Ordering::AcqRel) || self.closed() {
            return;
        }
        self.optimizing.fetch_add(1, Ordering::AcqRel);
        for (i, shard) in self.shards.iter().enumerate() {
            if let Err(e) = shard.optimize() {
                log::error!("collection {}: optimize shard {i}: {e}", self.name());
            }
        }
        self.optimizing.fetch_sub(1, Ordering::AcqRel);
    }

    /// Flushes the shards' segments, after which their WALs are truncated.
    pub fn flush(&self) -> Result<(), ApiError> {
        for shard in &self.shards {
            shard.flush()?;
        }
        Ok(())
    }
}

/// An intake log record: the update's number, its length and its CBOR,
/// the engine's own WAL encoding. The dense vectors of its points follow
/// the CBOR as raw floats (the length's top bit says so, and the CBOR's own
/// length comes first): CBOR tries each float as a half first, and that
/// was most of the CPU of writing an upsert to the log.
fn frame(seq: u64, op: &mut UpdateOperation) -> Result<Vec<u8>, serde_cbor::Error> {
    let vectors: Vec<Vec<f32>> = points_mut(op)
        .into_iter()
        .flatten()
        .map(|p| match &mut p.vector {
            VectorStructPersisted::Single(v) => std::mem::take(v),
            _ => Vec::new(),
        })
        .collect();
    let frame = serde_cbor::to_vec(op).and_then(|record| {
        let floats: usize = vectors.iter().map(|v| 4 + 4 * v.len()).sum();
        let len = 4 + record.len() + floats;
        let Some(len32) = u32::try_from(len).ok().filter(|n| n & RAW_VECTORS == 0) else {
            return Err(serde::ser::Error::custom(format!("an update of {len} bytes, past the intake log's 2 GiB")));
        };
        let mut frame = Vec::with_capacity(12 + len);
        frame.extend_from_slice(&seq.to_le_bytes());
        frame.extend_from_slice(&(len32 | RAW_VECTORS).to_le_bytes());
        frame.extend_from_slice(&(record.len() as u32).to_le_bytes());
        frame.extend_from_slice(&record);
        for v in &vectors {
            frame.extend_from_slice(&(v.len() as u32).to_le_bytes());
            frame.extend(v.iter().flat_map(|x| x.to_le_bytes()));
        }
        Ok(frame)
    });
    for (p, v) in points_mut(op).into_iter().flatten().zip(vectors) {
        if let VectorStructPersisted::Single(slot) = &mut p.vector
            && !v.is_empty()
        {
            *slot = v;
        }
    }
    frame
}

/// The top bit of a record's length: its vectors follow its CBOR. Without
/// it (a log of an earlier qdrant-engine) the record is CBOR alone.
const RAW_VECTORS: u32 = 1 << 31;

/// The points of an upsert, in the order frame writes their vectors.
fn points_mut(op: &mut UpdateOperation) -> Option<&mut Vec<PointStructPersisted>> {
    use PointOperations::{UpsertPoints, UpsertPointsConditional};
    match op {
        UpdateOperation::PointOperation(UpsertPoints(PointInsertOperations::PointsList(points)))
        | UpdateOperation::PointOperation(UpsertPointsConditional(ConditionalInsertOperation {
            points_op: PointInsertOperations::PointsList(points),
            ..
        })) => Some(points),
        _ => None,
    }
}

/// The update of a record (frame), its vectors put back.
fn unframe(record: &[u8], raw_vectors: bool) -> Result<UpdateOperation, String> {
    if !raw_vectors {
        return serde_cbor::from_slice(record).map_err(|e| e.to_string());
    }
    let word = |at: usize| -> Result<u32, String> {
        let b = record.get(at..at + 4).ok_or("a record cut short")?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    };
    let cbor_len = word(0)? as usize;
    let cbor = record.get(4..4 + cbor_len).ok_or("a record cut short")?;
    let mut op: UpdateOperation = serde_cbor::from_slice(cbor).map_err(|e| e.to_string())?;
    let mut at = 4 + cbor_len;
    for p in points_mut(&mut op).into_iter().flatten() {
        let n = word(at)? as usize;
        let bytes = record.get(at + 4..at + 4 + 4 * n).ok_or("a record cut short")?;
        at += 4 + 4 * n;
        if let VectorStructPersisted::Single(slot) = &mut p.vector
            && n > 0
        {
            *slot = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
        }
    }
    Ok(op)
}

/// The records of an intake log, in order; a record cut short by a crash
/// (never acknowledged) ends it.
fn read_intake(log: &mut File) -> std::io::Result<Vec<(u64, UpdateOperation)>> {
    let mut bytes = Vec::new();
    log.seek(SeekFrom::Start(0))?;
    log.read_to_end(&mut bytes)?;
    let mut out = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let seq = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let raw_len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().expect("4 bytes"));
        let len = (raw_len & !RAW_VECTORS) as usize;
        let Some(record) = bytes.get(at + 12..at + 12 + len) else { break };
        match unframe(record, raw_len & RAW_VECTORS != 0) {
            Ok(op) => out.push((seq, op)),
            Err(e) => {
                log::error!("an update of the intake log cannot be read, and what follows it is dropped: {e}");
                break;
            }
        }
        at += 12 + len;
    }
    log.seek(SeekFrom::End(0))?;
    Ok(out)
}

/// The HNSW settings of a diff, over the server's defaults.
fn hnsw(d: &grpc::HnswConfigDiff) -> HnswIndexConfig {
    let mut h = HnswIndexConfig::default();
    if let Some(m) = d.m {
        h.m = m as usize;
    }
    if let Some(ef) = d.ef_construct {
        h.ef_construct = ef as usize;
    }
    if let Some(t) = d.full_scan_threshold {
        h.full_scan_threshold = t as usize;
    }
    if let Some(t) = d.max_indexing_threads {
        h.max_indexing_threads = t as usize;
    }
    if let Some(on_disk) = d.on_disk {
        h.memory = Some(Memory::from_on_disk(on_disk));
    }
    if let Some(m) = d.payload_m {
        h.payload_m = Some(m as usize);
    }
    h
}

/// The optimizer settings of a diff; what it leaves out keeps the server's
/// defaults (vacuum past 20% deleted and 1000 vectors, HNSW past 10 MB).
fn optimizers(d: &grpc::OptimizersConfigDiff) -> EdgeOptimizersConfig {
    EdgeOptimizersConfig {
        deleted_threshold: d.deleted_threshold,
        vacuum_min_vector_number: d.vacuum_min_vector_number.map(|n| n as usize),
        default_segment_number: d.default_segment_number.map(|n| n as usize),
        max_segment_size: d.max_segment_size.map(|n| n as usize),
        indexing_threshold: d.indexing_threshold.map(|n| n as usize),
        prevent_unoptimized: d.prevent_unoptimized,
    }
}

/// The dense vectors of a CreateCollection, by name ("" is the unnamed one).
pub fn vector_params(req: &grpc::CreateCollection) -> Result<Vec<(String, EdgeVectorParamsBuilder)>, ApiError> {
    use grpc::vectors_config::Config;
    let named: Vec<(String, &grpc::VectorParams)> = match req.vectors_config.as_ref().and_then(|v| v.config.as_ref()) {
        Some(Config::Params(p)) => vec![(DEFAULT_VECTOR_NAME.to_string(), p)],
        Some(Config::ParamsMap(m)) => m.map.iter().map(|(k, v)| (k.clone(), v)).collect(),
        None => {
            return Err(ApiError::BadInput(
                "vectors_config is required: qdrant-engine serves dense vectors only".into(),
            ));
        }
    };
    named
        .into_iter()
        .map(|(name, p)| {
            if p.quantization_config.is_some() {
                return Err(ApiError::unsupported("Quantization"));
            }
            if p.multivector_config.is_some() {
                return Err(ApiError::unsupported("A multivector"));
            }
            if p.datatype.is_some_and(|d| d != grpc::Datatype::Float32 as i32 && d != grpc::Datatype::Default as i32) {
                return Err(ApiError::unsupported("A vector datatype other than float32"));
            }
            let distance = match grpc::Distance::try_from(p.distance) {
                Ok(grpc::Distance::Cosine) => Distance::Cosine,
                Ok(grpc::Distance::Euclid) => Distance::Euclid,
                Ok(grpc::Distance::Dot) => Distance::Dot,
                Ok(grpc::Distance::Manhattan) => Distance::Manhattan,
                _ => return Err(ApiError::Invalid("Malformed distance parameter: UnknownDistance".into())),
            };
            Ok((name, EdgeVectorParamsBuilder::new(p.size as usize, distance)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use qdrant_edge::{NamedQuery, QueryEnum, ScoringQuery, SearchParams, VectorStructPersisted};

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("qe-{name}-{}", qdrant_edge::external::uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn make(dir: &Path, dim: u64, shards: u32, optimizers: Option<grpc::OptimizersConfigDiff>) -> Arc<Collection> {
        let req = grpc::CreateCollection {
            collection_name: "c".into(),
            shard_number: Some(shards),
            optimizers_config: optimizers,
            vectors_config: Some(grpc::VectorsConfig {
                config: Some(grpc::vectors_config::Config::Params(grpc::VectorParams {
                    size: dim,
                    distance: grpc::Distance::Cosine as i32,
                    ..Default::default()
                })),
            }),
            ..Default::default()
        };
        Collection::make(dir, &req).unwrap();
        crate::storage::write_atomically(&dir.join(META_FILE), &req.encode_to_vec()).unwrap();
        Collection::load(dir).unwrap()
    }

    /// A vector of `dim` numbers that is the same for the same `n`.
    fn vector(n: u64, dim: usize) -> Vec<f32> {
        let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..dim)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 2000) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    fn points(ids: std::ops::Range<u64>, dim: usize) -> Vec<PointStructPersisted> {
        ids.map(|n| PointStructPersisted {
            id: PointId::NumId(n),
            vector: VectorStructPersisted::Single(vector(n, dim)),
            payload: Some(qdrant_edge::Payload::from(
                serde_json::json!({"doc": format!("d{}", n % 3)}).as_object().unwrap().clone(),
            )),
        })
        .collect()
    }

    /// The disk a directory takes: the blocks allocated, not the lengths,
    /// since the engine sizes its files ahead of what they hold.
    fn du(dir: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| {
                let m = e.metadata().unwrap();
                if m.is_dir() { du(&e.path()) } else { m.blocks() * 512 }
            })
            .sum()
    }

    /// The resident memory of this process, in kB.
    fn rss() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (norm(a) * norm(b))
    }

    #[test]
    fn several_shards_hold_the_points_and_reads_merge_them() {
        let dir = temp_dir("shards");
        let c = make(&dir, 4, 3, None);
        c.apply_now(Collection::create_index_op("doc".parse().unwrap(), PayloadSchemaType::Keyword)).unwrap();
        c.apply_now(Collection::upsert_op(points(1..61, 4), None, None)).unwrap();
        let per_shard: Vec<usize> =
            c.shards.iter().map(|s| s.count(CountRequest { filter: None, exact: true }).unwrap()).collect();
        assert!(per_shard.iter().all(|n| *n > 0), "every shard holds points: {per_shard:?}");
        assert_eq!(c.count(None, true).unwrap(), 60);
        // Scroll pages of 7 go through every id once, in order.
        let (mut seen, mut offset) = (Vec::new(), None);
        loop {
            let req = ScrollRequest {
                offset,
                limit: Some(7),
                with_payload: Some(WithPayloadInterface::Bool(false)),
                ..Default::default()
            };
            let (page, next) = c.scroll(req).unwrap();
            seen.extend(page.into_iter().map(|r| r.id));
            match next {
                Some(n) => offset = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, (1..61).map(PointId::NumId).collect::<Vec<_>>());
        let mut facet = FacetRequest::new("doc".parse().unwrap());
        facet.exact = true;
        let hits: Vec<usize> = c.facet(facet).unwrap().hits.into_iter().map(|h| h.count).collect();
        assert_eq!(hits, vec![20, 20, 20]);
        let ids = vec![PointId::NumId(9), PointId::NumId(99), PointId::NumId(2)];
        let got: Vec<PointId> = c
            .retrieve(ids, WithPayloadInterface::Bool(false), WithVector::Bool(false))
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(got, vec![PointId::NumId(9), PointId::NumId(2)], "in the order asked, the missing left out");
        // An exact query is the exhaustive cosine ranking.
        let q = vector(1000, 4);
        let mut want: Vec<(f32, u64)> = (1..61).map(|n| (cosine(&q, &vector(n, 4)), n)).collect();
        want.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut req = QueryRequest::new(10);
        req.offset = 3;
        req.query = Some(ScoringQuery::Vector(QueryEnum::Nearest(NamedQuery::default_dense(q))));
        req.params = Some(SearchParams { exact: true, ..Default::default() });
        let got: Vec<PointId> = c.query(req).unwrap().into_iter().map(|p| p.id).collect();
        let want: Vec<PointId> = want[3..13].iter().map(|(_, n)| PointId::NumId(*n)).collect();
        assert_eq!(got, want);
        c.apply_now(Collection::delete_ids_op((1..31).map(PointId::NumId).collect())).unwrap();
        assert_eq!(c.count(None, true).unwrap(), 30);
        shut(c);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn updates_taken_and_not_applied_are_applied_at_load() {
        let dir = temp_dir("intake");
        let c = make(&dir, 4, 1, None);
        c.apply_now(Collection::upsert_op(points(1..3, 4), None, None)).unwrap();
        shut(c);
        // As a SIGKILL leaves it: two updates taken (in the intake log,
        // answered) and not applied, the second cut short by the kill, so
        // never answered.
        let mut log = std::fs::OpenOptions::new().append(true).open(dir.join(INTAKE_LOG)).unwrap();
        for (seq, mut op) in [
            (2u64, Collection::upsert_op(points(3..5, 4), None, None)),
            (3, Collection::delete_ids_op(vec![PointId::NumId(1)])),
        ] {
            let mut frame = frame(seq, &mut op).unwrap();
            if seq == 3 {
                frame.truncate(frame.len() - 2);
            }
            log.write_all(&frame).unwrap();
        }
        drop(log);
        let c = load_again(&dir);
        assert_eq!(c.count(None, true).unwrap(), 4, "the taken update is applied, the cut one is not");
        assert_eq!(std::fs::metadata(dir.join(INTAKE_LOG)).unwrap().len(), 0, "and the log is emptied");
        c.apply_now(Collection::delete_ids_op(vec![PointId::NumId(4)])).unwrap();
        assert_eq!(c.count(None, true).unwrap(), 3);
        shut(c);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Closes a collection and waits until its update thread lets it go,
    /// so that its shards close here.
    fn shut(c: Arc<Collection>) {
        c.close();
        while Arc::strong_count(&c) > 1 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn compacting_the_intake_log_keeps_only_what_is_not_applied() {
        let dir = temp_dir("compact");
        let c = make(&dir, 4, 1, None);
        c.close();
        {
            let mut intake = c.intake.lock().unwrap();
            for seq in 1..=3 {
                intake
                    .log
                    .write_all(&frame(seq, &mut Collection::delete_ids_op(vec![PointId::NumId(seq)])).unwrap())
                    .unwrap();
            }
            intake.last_applied = 2;
            c.compact(&mut intake).unwrap();
            let left: Vec<u64> = read_intake(&mut intake.log).unwrap().into_iter().map(|(seq, _)| seq).collect();
            assert_eq!(left, vec![3]);
            intake.log.write_all(&frame(4, &mut Collection::delete_ids_op(vec![])).unwrap()).unwrap();
            let left: Vec<u64> = read_intake(&mut intake.log).unwrap().into_iter().map(|(seq, _)| seq).collect();
            assert_eq!(left, vec![3, 4], "and it is appended to after");
        }
        shut(c);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A record keeps its update whole, vectors and all, and a record of an
    /// earlier qdrant-engine (CBOR alone) still reads.
    #[test]
    fn an_intake_record_reads_back_as_its_update() {
        let dir = temp_dir("frames");
        let mut named = points(7..9, 3);
        named[1].vector = VectorStructPersisted::Named(HashMap::from([(
            "v".to_string(),
            qdrant_edge::VectorPersisted::Dense(vec![0.5, -1.0]),
        )]));
        let ops = [
            Collection::upsert_op(points(1..4, 5), None, None),
            Collection::upsert_op(named, Some(Filter::default()), Some(UpdateMode::InsertOnly)),
            Collection::delete_ids_op(vec![PointId::NumId(2)]),
        ];
        let mut log = File::options().read(true).write(true).create(true).truncate(true).open(dir.join("log")).unwrap();
        for (seq, op) in ops.iter().enumerate() {
            log.write_all(&frame(seq as u64, &mut op.clone()).unwrap()).unwrap();
        }
        let old = serde_cbor::to_vec(&ops[0]).unwrap();
        log.write_all(&9u64.to_le_bytes()).unwrap();
        log.write_all(&(old.len() as u32).to_le_bytes()).unwrap();
        log.write_all(&old).unwrap();
        let got: Vec<(u64, UpdateOperation)> = read_intake(&mut log).unwrap();
        let want: Vec<(u64, UpdateOperation)> =
            ops.iter().cloned().enumerate().map(|(i, op)| (i as u64, op)).chain([(9, ops[0].clone())]).collect();
        assert_eq!(got, want);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn load_again(dir: &Path) -> Arc<Collection> {
        Collection::load(dir).unwrap()
    }

    /// The optimizer as the server's defaults run it: after most points are
    /// deleted, vacuum gives the disk back; a collection past its indexing
    /// threshold gets an HNSW index of every vector. QE_TEST_POINTS sizes it
    /// (100000 for the issue's figure; a smaller default keeps CI fast).
    #[test]
    fn the_optimizer_vacuums_and_indexes() {
        let n: u64 = std::env::var("QE_TEST_POINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
        let dim = 64;
        let dir = temp_dir("optimize");
        // The server's defaults but the indexing threshold, lowered so the
        // points that stay are past it at this size: 1 MB of vectors.
        let c = make(
            &dir,
            dim,
            1,
            Some(grpc::OptimizersConfigDiff { indexing_threshold: Some(1000), ..Default::default() }),
        );
        for start in (0..n).step_by(1000) {
            c.apply_now(Collection::upsert_op(points(start..(start + 1000).min(n), dim as usize), None, None)).unwrap();
        }
        let kept = n / 10;
        for start in (kept..n).step_by(1000) {
            c.apply_now(Collection::delete_ids_op((start..(start + 1000).min(n)).map(PointId::NumId).collect()))
                .unwrap();
        }
        c.flush().unwrap();
        let (before, segments_before, rss_before) = (du(&dir), du(&dir.join("shard/segments")), rss());
        c.optimize();
        // The segments an optimization replaced go once the new ones are
        // durable: at the flushes after it (the server's every 5 s).
        c.flush().unwrap();
        c.flush().unwrap();
        let (after, segments_after, rss_after) = (du(&dir), du(&dir.join("shard/segments")), rss());
        let info = c.info().unwrap();
        eprintln!(
            "{n} upserts, {} deletes: {before} bytes on disk before optimizing ({segments_before} of segments), {after} after ({segments_after}); resident {rss_before} kB before, {rss_after} kB after; {info:?}",
            n - kept
        );
        // What stays besides the segments is the WAL's, whose files the
        // engine sizes ahead (32 MiB each, as the server's).
        assert!(after < before, "the disk shrinks: {before} -> {after} bytes");
        assert!(
            segments_after * 4 < segments_before,
            "vacuum gives the segments' disk back: {segments_before} -> {segments_after}"
        );
        assert_eq!(c.count(None, true).unwrap() as u64, kept);
        assert_eq!(info.points_count as u64, kept);
        assert_eq!(info.indexed_vectors_count as u64, kept, "every vector left is in an HNSW index");
        assert!(!c.optimizing(), "green once the optimizer is done");
        shut(c);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The server's routing of ids over a hash ring, as
    /// `collection/src/hash_ring.rs` of v1.17.1 builds it: a few ids whose
    /// shard must not change, since that would move points a restart loads
    /// from one shard to another.
    #[test]
    fn points_route_as_on_the_servers_ring() {
        let mut ring = hashring::HashRing::with_hasher(BuildHasherDefault::<SipHasher24>::default());
        for shard in 0..2u32 {
            for place in 0..RING_SCALE {
                ring.add(RingNode(shard, place));
            }
        }
        let shard = |id| ring.get(&RingKey(id)).unwrap().0;
        let routed: Vec<u32> = (1..=8).map(|n| shard(PointId::NumId(n))).collect();
        let spread = routed.iter().filter(|s| **s == 0).count();
        assert!(spread > 0 && spread < 8, "both shards get points: {routed:?}");
        assert_eq!(routed, (1..=8).map(|n| shard(PointId::NumId(n))).collect::<Vec<_>>(), "routing is stable");
    }
}
