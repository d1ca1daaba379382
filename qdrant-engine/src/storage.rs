//! Collections and aliases on disk: one engine shard a collection.
//!
//! Layout under `storage_path`:
//!
//! ```text
//! collections/<name>/shard/          the engine's shard: segments and WAL
//! collections/<name>/collection.pb   the CreateCollection it was made with
//!                                    (strict mode updates merged in); written
//!                                    last, so a directory without it is a
//!                                    create that did not finish
//! aliases.json                       alias -> collection
//! ```
//!
//! Every method here does blocking I/O or engine work: callers on an async
//! runtime run them with `spawn_blocking`. The state lock is held only to
//! read or swap the maps, never across engine work; creates, deletes and
//! alias changes take `changes` so they apply one at a time, as the server's
//! consensus applies them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use prost::Message;
use qdrant_client::qdrant as grpc;
use qdrant_edge::external::uuid::Uuid;
use qdrant_edge::{
    ConditionalInsertOperation, CountRequest, CreateIndex, DEFAULT_VECTOR_NAME, Distance, EdgeConfigBuilder, EdgeShard,
    EdgeVectorParamsBuilder, FacetRequest, FieldIndexOperations, Filter, JsonPath, PayloadFieldSchema,
    PayloadSchemaType, PointId, PointInsertOperations, PointOperations, PointStructPersisted, Record, RetrieveRequest,
    ScrollRequest, UpdateMode, UpdateOperation, WithPayloadInterface, WithVector,
};

use crate::error::ApiError;

const META_FILE: &str = "collection.pb";
const SHARD_DIR: &str = "shard";
const ALIASES_FILE: &str = "aliases.json";
/// How long a delete waits for calls still running on the collection.
const DELETE_DRAIN: Duration = Duration::from_secs(30);

/// All collections of the server.
pub struct Storage {
    collections_dir: PathBuf,
    aliases_file: PathBuf,
    state: RwLock<State>,
    changes: Mutex<()>,
}

#[derive(Default)]
struct State {
    collections: HashMap<String, Arc<Collection>>,
    aliases: BTreeMap<String, String>,
}

/// One collection: its engine shard and what it was created with.
pub struct Collection {
    dir: PathBuf,
    shard: EdgeShard,
    meta: Mutex<grpc::CreateCollection>,
    /// Vector sizes by name ("" is the unnamed vector), to check points
    /// before they are written.
    sizes: HashMap<String, usize>,
}

impl Storage {
    /// Loads every collection under `root`, replaying each shard's WAL, and
    /// clears what an interrupted create or delete left behind.
    pub fn open(root: &Path) -> Result<Self, String> {
        let collections_dir = root.join("collections");
        std::fs::create_dir_all(&collections_dir).map_err(|e| format!("create {}: {e}", collections_dir.display()))?;
        let mut state = State::default();
        let entries =
            std::fs::read_dir(&collections_dir).map_err(|e| format!("read {}: {e}", collections_dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("read {}: {e}", collections_dir.display()))?;
            let dir = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !dir.join(META_FILE).exists() {
                log::warn!("removing {}: a collection whose create or delete did not finish", dir.display());
                std::fs::remove_dir_all(&dir).map_err(|e| format!("remove {}: {e}", dir.display()))?;
                continue;
            }
            let started = Instant::now();
            let c = Collection::load(&dir).map_err(|e| format!("load collection {name}: {e}"))?;
            log::info!("loaded collection {name} in {:?}", started.elapsed());
            state.collections.insert(name, Arc::new(c));
        }
        let aliases_file = root.join(ALIASES_FILE);
        if aliases_file.exists() {
            let text =
                std::fs::read_to_string(&aliases_file).map_err(|e| format!("read {}: {e}", aliases_file.display()))?;
            state.aliases =
                serde_json::from_str(&text).map_err(|e| format!("parse {}: {e}", aliases_file.display()))?;
            state.aliases.retain(|_, c| state.collections.contains_key(c));
        }
        Ok(Self { collections_dir, aliases_file, state: RwLock::new(state), changes: Mutex::new(()) })
    }

    /// The collection named `name`, directly or by an alias.
    pub fn get(&self, name: &str) -> Result<Arc<Collection>, ApiError> {
        let state = self.state.read().expect("state lock");
        let target = state.aliases.get(name).map(String::as_str).unwrap_or(name);
        state
            .collections
            .get(name)
            .or_else(|| state.collections.get(target))
            .cloned()
            .ok_or_else(|| ApiError::collection_not_found(name))
    }

    /// The names of all collections, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.state.read().expect("state lock").collections.keys().cloned().collect();
        names.sort();
        names
    }

    /// Whether a collection of that name exists (an alias is not one).
    pub fn exists(&self, name: &str) -> bool {
        self.state.read().expect("state lock").collections.contains_key(name)
    }

    /// Creates a collection from a CreateCollection request.
    pub fn create(&self, req: grpc::CreateCollection) -> Result<(), ApiError> {
        let _changes = self.changes.lock().expect("changes lock");
        let name = req.collection_name.clone();
        check_name(&name)?;
        {
            let state = self.state.read().expect("state lock");
            if state.collections.contains_key(&name) {
                return Err(ApiError::AlreadyExists(format!("Collection `{name}` already exists!")));
            }
            if state.aliases.contains_key(&name) {
                return Err(ApiError::AlreadyExists(format!("Alias with name `{name}` already exists!")));
            }
        }
        let c = Collection::create(&self.collections_dir.join(&name), req)?;
        self.state.write().expect("state lock").collections.insert(name, Arc::new(c));
        Ok(())
    }

    /// Applies the parts of an UpdateCollection request the server keeps:
    /// strict mode, merged field by field as Qdrant merges a diff.
    pub fn update(&self, req: grpc::UpdateCollection) -> Result<(), ApiError> {
        let c = self.get(&req.collection_name)?;
        if req.vectors_config.is_some() || req.quantization_config.is_some() || req.sparse_vectors_config.is_some() {
            return Err(ApiError::unsupported("Changing a collection's vectors"));
        }
        c.update_meta(|meta| {
            if let Some(diff) = req.strict_mode_config {
                let mut strict = meta.strict_mode_config.take().unwrap_or_default();
                strict.merge(diff.encode_to_vec().as_slice()).map_err(|e| ApiError::Internal(e.to_string()))?;
                check_strict_mode(&strict)?;
                meta.strict_mode_config = Some(strict);
            }
            if let Some(diff) = req.hnsw_config {
                let mut hnsw = meta.hnsw_config.take().unwrap_or_default();
                hnsw.merge(diff.encode_to_vec().as_slice()).map_err(|e| ApiError::Internal(e.to_string()))?;
                meta.hnsw_config = Some(hnsw);
            }
            if let Some(diff) = req.optimizers_config {
                let mut opt = meta.optimizers_config.take().unwrap_or_default();
                opt.merge(diff.encode_to_vec().as_slice()).map_err(|e| ApiError::Internal(e.to_string()))?;
                meta.optimizers_config = Some(opt);
            }
            meta.metadata.extend(req.metadata);
            Ok(())
        })
    }

    /// Deletes a collection and its aliases; false when there was none.
    pub fn delete(&self, name: &str) -> Result<bool, ApiError> {
        let _changes = self.changes.lock().expect("changes lock");
        let removed = {
            let mut state = self.state.write().expect("state lock");
            let removed = state.collections.remove(name);
            if removed.is_some() {
                state.aliases.retain(|_, c| c != name);
            }
            removed
        };
        let Some(c) = removed else { return Ok(false) };
        self.save_aliases()?;
        // Calls already running hold the collection: let them end before
        // its files go, so none writes into a directory being removed.
        let deadline = Instant::now() + DELETE_DRAIN;
        while Arc::strong_count(&c) > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let dir = c.dir.clone();
        drop(c);
        let trash = self.collections_dir.join(format!(".deleted-{}", Uuid::new_v4()));
        std::fs::rename(&dir, &trash).map_err(|e| ApiError::Internal(format!("move {} away: {e}", dir.display())))?;
        std::fs::remove_dir_all(&trash).map_err(|e| ApiError::Internal(format!("remove {}: {e}", trash.display())))?;
        Ok(true)
    }

    /// Applies alias operations in order, all or none.
    pub fn update_aliases(&self, ops: Vec<grpc::AliasOperations>) -> Result<(), ApiError> {
        use grpc::alias_operations::Action;
        let _changes = self.changes.lock().expect("changes lock");
        let mut aliases = self.state.read().expect("state lock").aliases.clone();
        for op in ops {
            match op.action {
                Some(Action::CreateAlias(a)) => {
                    check_name(&a.alias_name)?;
                    if !self.exists(&a.collection_name) {
                        return Err(ApiError::collection_not_found(&a.collection_name));
                    }
                    if self.exists(&a.alias_name) {
                        return Err(ApiError::AlreadyExists(format!("Collection `{}` already exists!", a.alias_name)));
                    }
                    aliases.insert(a.alias_name, a.collection_name);
                }
                Some(Action::RenameAlias(r)) => {
                    let target = aliases
                        .remove(&r.old_alias_name)
                        .ok_or_else(|| ApiError::NotFound(format!("Alias {} does not exists!", r.old_alias_name)))?;
                    check_name(&r.new_alias_name)?;
                    aliases.insert(r.new_alias_name, target);
                }
                Some(Action::DeleteAlias(d)) => {
                    aliases
                        .remove(&d.alias_name)
                        .ok_or_else(|| ApiError::NotFound(format!("Alias {} does not exists!", d.alias_name)))?;
                }
                None => return Err(ApiError::BadInput("Alias operation is empty".into())),
            }
        }
        self.state.write().expect("state lock").aliases = aliases;
        self.save_aliases()
    }

    /// Aliases as (alias, collection), of one collection or of all.
    pub fn aliases(&self, of: Option<&str>) -> Vec<(String, String)> {
        let state = self.state.read().expect("state lock");
        state
            .aliases
            .iter()
            .filter(|(_, c)| of.is_none_or(|of| of == c.as_str()))
            .map(|(a, c)| (a.clone(), c.clone()))
            .collect()
    }

    fn save_aliases(&self) -> Result<(), ApiError> {
        let aliases = self.state.read().expect("state lock").aliases.clone();
        let text = serde_json::to_vec_pretty(&aliases).map_err(|e| ApiError::Internal(e.to_string()))?;
        write_atomically(&self.aliases_file, &text)
    }

    /// Flushes every collection's segments, after which its WAL is
    /// truncated. What was acknowledged survives a crash without this; it
    /// bounds the WAL a restart replays.
    pub fn flush_all(&self) {
        let all: Vec<(String, Arc<Collection>)> =
            self.state.read().expect("state lock").collections.iter().map(|(n, c)| (n.clone(), c.clone())).collect();
        for (name, c) in all {
            if let Err(e) = c.shard.flush() {
                log::error!("flush collection {name}: {e}");
            }
        }
    }
}

impl Collection {
    fn create(dir: &Path, req: grpc::CreateCollection) -> Result<Self, ApiError> {
        if let Some(strict) = &req.strict_mode_config {
            check_strict_mode(strict)?;
        }
        if req.quantization_config.is_some() {
            return Err(ApiError::unsupported("Quantization"));
        }
        if req.sparse_vectors_config.as_ref().is_some_and(|s| !s.map.is_empty()) {
            return Err(ApiError::unsupported("A sparse vector"));
        }
        let sizes = vector_sizes(&req)?;
        let mut builder = EdgeConfigBuilder::new();
        for (name, params) in vector_params(&req)? {
            builder = builder.vector(name, params.build());
        }
        std::fs::create_dir_all(dir).map_err(|e| ApiError::Internal(format!("create {}: {e}", dir.display())))?;
        let made = EdgeShard::new(&dir.join(SHARD_DIR), builder.build())
            .map_err(ApiError::from)
            .and_then(|shard| write_atomically(&dir.join(META_FILE), &req.encode_to_vec()).map(|()| shard));
        match made {
            Ok(shard) => Ok(Self { dir: dir.to_path_buf(), shard, meta: Mutex::new(req), sizes }),
            Err(e) => {
                // Leave no half-made collection to stand in the way of the
                // next create of this name.
                let _ = std::fs::remove_dir_all(dir);
                Err(e)
            }
        }
    }

    fn load(dir: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(dir.join(META_FILE)).map_err(|e| e.to_string())?;
        let meta = grpc::CreateCollection::decode(bytes.as_slice()).map_err(|e| format!("{META_FILE}: {e}"))?;
        let sizes = vector_sizes(&meta).map_err(|e| e.to_string())?;
        let shard = EdgeShard::load(&dir.join(SHARD_DIR), None).map_err(|e| e.to_string())?;
        Ok(Self { dir: dir.to_path_buf(), shard, meta: Mutex::new(meta), sizes })
    }

    fn update_meta(&self, f: impl FnOnce(&mut grpc::CreateCollection) -> Result<(), ApiError>) -> Result<(), ApiError> {
        let mut meta = self.meta.lock().expect("meta lock");
        let mut next = meta.clone();
        f(&mut next)?;
        write_atomically(&self.dir.join(META_FILE), &next.encode_to_vec())?;
        *meta = next;
        Ok(())
    }

    /// What the collection was created with, updates merged in.
    pub fn meta(&self) -> grpc::CreateCollection {
        self.meta.lock().expect("meta lock").clone()
    }

    /// The vector sizes by name, "" for the unnamed vector.
    pub fn sizes(&self) -> &HashMap<String, usize> {
        &self.sizes
    }

    /// Upserts points; with a condition, an existing point is overwritten
    /// only where it matches the condition (Qdrant's conditional upsert).
    pub fn upsert(
        &self,
        points: Vec<PointStructPersisted>,
        condition: Option<Filter>,
        mode: Option<UpdateMode>,
    ) -> Result<(), ApiError> {
        self.check_upsert_limit(points.len())?;
        let points_op = PointInsertOperations::PointsList(points);
        let op = match (condition, mode) {
            (None, None | Some(UpdateMode::Upsert)) => PointOperations::UpsertPoints(points_op),
            (condition, mode) => PointOperations::UpsertPointsConditional(ConditionalInsertOperation {
                points_op,
                condition: condition.unwrap_or_default(),
                update_mode: mode,
            }),
        };
        Ok(self.shard.update(UpdateOperation::PointOperation(op))?)
    }

    /// Strict mode's `upsert_max_batchsize`, with the server's message.
    fn check_upsert_limit(&self, n: usize) -> Result<(), ApiError> {
        let meta = self.meta.lock().expect("meta lock");
        let Some(strict) = meta.strict_mode_config.as_ref().filter(|s| s.enabled == Some(true)) else { return Ok(()) };
        match strict.upsert_max_batchsize {
            Some(limit) if n as u64 > limit => Err(ApiError::BadRequest(format!(
                "Limit exceeded {n} > {limit} for \"upsert limit\". Help: Reduce the \"upsert limit\" parameter to or below {limit}."
            ))),
            _ => Ok(()),
        }
    }

    pub fn delete_ids(&self, ids: Vec<PointId>) -> Result<(), ApiError> {
        Ok(self.shard.update(UpdateOperation::PointOperation(PointOperations::DeletePoints { ids }))?)
    }

    pub fn delete_filter(&self, filter: Filter) -> Result<(), ApiError> {
        Ok(self.shard.update(UpdateOperation::PointOperation(PointOperations::DeletePointsByFilter(filter)))?)
    }

    pub fn create_index(&self, field: JsonPath, schema: Option<PayloadSchemaType>) -> Result<(), ApiError> {
        let op = FieldIndexOperations::CreateIndex(CreateIndex {
            field_name: field,
            field_schema: schema.map(PayloadFieldSchema::FieldType),
        });
        Ok(self.shard.update(UpdateOperation::FieldIndexOperation(op))?)
    }

    pub fn delete_index(&self, field: JsonPath) -> Result<(), ApiError> {
        Ok(self.shard.update(UpdateOperation::FieldIndexOperation(FieldIndexOperations::DeleteIndex(field)))?)
    }

    pub fn scroll(&self, req: ScrollRequest) -> Result<(Vec<Record>, Option<PointId>), ApiError> {
        Ok(self.shard.scroll(req)?)
    }

    pub fn retrieve(
        &self,
        ids: Vec<PointId>,
        with_payload: WithPayloadInterface,
        with_vector: WithVector,
    ) -> Result<Vec<Record>, ApiError> {
        let req = RetrieveRequest { point_ids: ids, with_payload: Some(with_payload), with_vector: Some(with_vector) };
        Ok(self.shard.retrieve(req)?)
    }

    pub fn count(&self, filter: Option<Filter>, exact: bool) -> Result<usize, ApiError> {
        Ok(self.shard.count(CountRequest { filter, exact })?)
    }

    pub fn facet(&self, req: FacetRequest) -> Result<qdrant_edge::FacetResponse, ApiError> {
        Ok(self.shard.facet(req)?)
    }

    pub fn info(&self) -> Result<qdrant_edge::ShardInfo, ApiError> {
        Ok(self.shard.info()?)
    }
}

/// Qdrant's rule for collection and alias names (no path separators or
/// characters a file system refuses), no control characters, and no
/// leading dot, which this server keeps for its own files.
fn check_name(name: &str) -> Result<(), ApiError> {
    const FORBIDDEN: &[char] = &['<', '>', ':', '"', '/', '\\', '|', '?', '*'];
    if name.is_empty() || name.len() > 255 {
        return Err(ApiError::BadInput(format!("collection name `{name}` must be 1 to 255 bytes long")));
    }
    if name.starts_with('.') || name.contains(FORBIDDEN) || name.chars().any(char::is_control) {
        return Err(ApiError::BadInput(format!(
            "collection name `{name}` cannot start with a dot or contain any of {FORBIDDEN:?}"
        )));
    }
    Ok(())
}

/// Refuses strict-mode settings this server would not enforce, rather than
/// accept a limit and silently ignore it.
fn check_strict_mode(s: &grpc::StrictModeConfig) -> Result<(), ApiError> {
    let enforced = grpc::StrictModeConfig {
        enabled: s.enabled,
        upsert_max_batchsize: s.upsert_max_batchsize,
        ..Default::default()
    };
    if *s != enforced {
        return Err(ApiError::unsupported("A strict mode setting other than enabled and upsert_max_batchsize"));
    }
    Ok(())
}

fn vector_params(req: &grpc::CreateCollection) -> Result<Vec<(String, EdgeVectorParamsBuilder)>, ApiError> {
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
            if p.size == 0 || p.size > 65536 {
                return Err(ApiError::BadInput(format!("vector size of `{name}` must be 1 to 65536, not {}", p.size)));
            }
            let distance = match grpc::Distance::try_from(p.distance) {
                Ok(grpc::Distance::Cosine) => Distance::Cosine,
                Ok(grpc::Distance::Euclid) => Distance::Euclid,
                Ok(grpc::Distance::Dot) => Distance::Dot,
                Ok(grpc::Distance::Manhattan) => Distance::Manhattan,
                _ => return Err(ApiError::BadInput(format!("Unknown distance {} of vector `{name}`", p.distance))),
            };
            Ok((name, EdgeVectorParamsBuilder::new(p.size as usize, distance)))
        })
        .collect()
}

fn vector_sizes(req: &grpc::CreateCollection) -> Result<HashMap<String, usize>, ApiError> {
    Ok(vector_params(req)?.into_iter().map(|(name, p)| (name, p.build().size)).collect())
}

/// Writes `path` through a temporary file and a rename, so a crash leaves
/// the old content or the new, never a part.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ApiError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().map_err(|e| ApiError::Internal(format!("write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(name: &str, size: u64) -> grpc::CreateCollection {
        grpc::CreateCollection {
            collection_name: name.into(),
            vectors_config: Some(grpc::VectorsConfig {
                config: Some(grpc::vectors_config::Config::Params(grpc::VectorParams {
                    size,
                    distance: grpc::Distance::Cosine as i32,
                    ..Default::default()
                })),
            }),
            ..Default::default()
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("qe-{name}-{}", Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn collections_and_aliases_survive_a_restart() {
        let dir = temp_dir("restart");
        {
            let s = Storage::open(&dir).unwrap();
            s.create(create("c1", 4)).unwrap();
            let op = grpc::AliasOperations {
                action: Some(grpc::alias_operations::Action::CreateAlias(grpc::CreateAlias {
                    collection_name: "c1".into(),
                    alias_name: "a1".into(),
                })),
            };
            s.update_aliases(vec![op]).unwrap();
        }
        let s = Storage::open(&dir).unwrap();
        assert_eq!(s.names(), vec!["c1".to_string()]);
        assert_eq!(s.aliases(None), vec![("a1".to_string(), "c1".to_string())]);
        assert_eq!(s.get("a1").unwrap().sizes()[""], 4);
        assert!(s.delete("c1").unwrap());
        assert!(s.aliases(None).is_empty(), "a deleted collection's aliases go with it");
        assert!(!s.delete("c1").unwrap());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_second_create_is_refused() {
        let dir = temp_dir("twice");
        let s = Storage::open(&dir).unwrap();
        s.create(create("c", 4)).unwrap();
        assert_eq!(s.create(create("c", 4)), Err(ApiError::AlreadyExists("Collection `c` already exists!".into())));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_unfinished_create_is_cleared_at_start() {
        let dir = temp_dir("unfinished");
        std::fs::create_dir_all(dir.join("collections/half/shard")).unwrap();
        let s = Storage::open(&dir).unwrap();
        assert!(s.names().is_empty());
        assert!(!dir.join("collections/half").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn names_that_are_paths_are_refused() {
        for name in ["", "a/b", "..", ".hidden", "a\\b", "a\0b", "a\nb"] {
            assert!(matches!(check_name(name), Err(ApiError::BadInput(_))), "{name:?} accepted");
        }
        check_name("chunks-e2e_1").unwrap();
    }

    #[test]
    fn strict_mode_limits_an_upsert() {
        let dir = temp_dir("strict");
        let s = Storage::open(&dir).unwrap();
        let mut req = create("c", 2);
        req.strict_mode_config =
            Some(grpc::StrictModeConfig { enabled: Some(true), upsert_max_batchsize: Some(1), ..Default::default() });
        s.create(req).unwrap();
        let c = s.get("c").unwrap();
        let point = |n| PointStructPersisted {
            id: PointId::NumId(n),
            vector: qdrant_edge::VectorStructPersisted::Single(vec![1.0, 0.0]),
            payload: None,
        };
        let err = c.upsert(vec![point(1), point(2)], None, None).unwrap_err();
        assert!(matches!(err, ApiError::BadRequest(ref m) if m.contains("\"upsert limit\"")), "got {err:?}");
        c.upsert(vec![point(1)], None, None).unwrap();
        let lift = grpc::UpdateCollection {
            collection_name: "c".into(),
            strict_mode_config: Some(grpc::StrictModeConfig { enabled: Some(false), ..Default::default() }),
            ..Default::default()
        };
        s.update(lift).unwrap();
        c.upsert(vec![point(1), point(2)], None, None).unwrap();
        assert_eq!(c.count(None, true).unwrap(), 2);
        assert_eq!(
            c.meta().strict_mode_config.unwrap().upsert_max_batchsize,
            Some(1),
            "a diff keeps what it does not name"
        );
        drop(c);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_conditional_upsert_overwrites_only_matching_points() {
        let dir = temp_dir("conditional");
        let s = Storage::open(&dir).unwrap();
        s.create(create("c", 2)).unwrap();
        let c = s.get("c").unwrap();
        let point = |id, v: i64| PointStructPersisted {
            id: PointId::NumId(id),
            vector: qdrant_edge::VectorStructPersisted::Single(vec![1.0, 0.0]),
            payload: Some(qdrant_edge::Payload::from(serde_json::json!({ "version": v }).as_object().unwrap().clone())),
        };
        c.upsert(vec![point(1, 5)], None, None).unwrap();
        let older_than = |v: i64| {
            crate::convert::filter(qdrant_client::qdrant::Filter {
                must: vec![qdrant_client::qdrant::Condition::range(
                    "version",
                    qdrant_client::qdrant::Range { lte: Some(v as f64), ..Default::default() },
                )],
                ..Default::default()
            })
        };
        // A late write of version 3 must not overwrite version 5; a new
        // point is inserted whatever the condition.
        c.upsert(vec![point(1, 3), point(2, 3)], Some(older_than(3).unwrap()), None).unwrap();
        // Version 7 may overwrite version 5.
        c.upsert(vec![point(1, 7)], Some(older_than(7).unwrap()), None).unwrap();
        let (records, _) = c
            .scroll(ScrollRequest { with_payload: Some(WithPayloadInterface::Bool(true)), ..Default::default() })
            .unwrap();
        let versions: Vec<(PointId, serde_json::Value)> =
            records.into_iter().map(|r| (r.id, r.payload.unwrap().0["version"].clone())).collect();
        assert_eq!(
            versions,
            vec![(PointId::NumId(1), serde_json::json!(7)), (PointId::NumId(2), serde_json::json!(3))]
        );
        drop(c);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_unenforced_strict_mode_setting_is_refused() {
        let dir = temp_dir("unenforced");
        let s = Storage::open(&dir).unwrap();
        let mut req = create("c", 2);
        req.strict_mode_config =
            Some(grpc::StrictModeConfig { enabled: Some(true), max_points_count: Some(10), ..Default::default() });
        assert!(matches!(s.create(req), Err(ApiError::Unimplemented(_))));
        assert!(s.names().is_empty());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
