//! Collections and aliases on disk, and what is kept for each collection.
//!
//! Layout under `storage_path`:
//!
//! ```text
//! .qdrant-engine                     this server's marker: the directory is its own
//! collections/<name>/.qdrant-engine  the marker again, in every directory it creates
//! collections/<name>/               a collection (see collection.rs)
//! collections/.creating-<uuid>/      a create under way, renamed to <name> once whole
//! collections/.deleted-<uuid>/       a delete under way, removed once renamed
//! aliases.json                       alias -> collection
//! ```
//!
//! Nothing without the marker is ever removed or loaded: a directory this
//! server did not make is left as it is, and a storage that holds a Qdrant
//! server's collections (`collections/<name>/config.json`) is refused at
//! start, since both servers default to `./storage`. At start an interrupted
//! create is discarded and an interrupted delete finished; a collection that
//! cannot be loaded is named in the log and not served, and the others are.
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

pub use crate::collection::Collection;
use crate::collection::META_FILE;
use crate::error::ApiError;

const SHARD_DIR: &str = "shard";
const ALIASES_FILE: &str = "aliases.json";
/// The marker this server writes into every directory it makes, first.
const MARKER_FILE: &str = ".qdrant-engine";
const MARKER: &[u8] = b"qdrant-engine storage 1\n";
const CREATING_PREFIX: &str = ".creating-";
const DELETED_PREFIX: &str = ".deleted-";
/// How long a delete waits for calls still running on the collection;
/// past it (an optimization that runs on), the files go when the last one
/// ends.
const DELETE_DRAIN: Duration = Duration::from_secs(2);
/// How long a create waits for the files of a deleted collection of the
/// same name to go.
const PENDING_DELETE_WAIT: Duration = Duration::from_secs(120);

/// All collections of the server.
pub struct Storage {
    collections_dir: PathBuf,
    aliases_file: PathBuf,
    state: RwLock<State>,
    changes: Mutex<()>,
    /// Collections deleted whose files go when an optimization lets them go.
    pending_deletes: Arc<Mutex<std::collections::HashSet<String>>>,
}

#[derive(Default)]
struct State {
    collections: HashMap<String, Arc<Collection>>,
    /// Collections on disk that could not be loaded at start, with why:
    /// not served, their names taken, their files kept until a delete.
    unloadable: BTreeMap<String, String>,
    aliases: BTreeMap<String, String>,
}

impl Storage {
    /// Loads every collection under `root`, replaying each shard's WAL;
    /// discards interrupted creates and finishes interrupted deletes. Refuses
    /// a directory that holds a Qdrant server's storage, or files it did not
    /// write; starts without the collections it cannot load, naming them.
    pub fn open(root: &Path) -> Result<Self, String> {
        let collections_dir = root.join("collections");
        check_not_foreign(root)?;
        std::fs::create_dir_all(&collections_dir).map_err(|e| format!("create {}: {e}", collections_dir.display()))?;
        adopt_or_mark(root, &collections_dir)?;
        let mut state = State::default();
        let entries =
            std::fs::read_dir(&collections_dir).map_err(|e| format!("read {}: {e}", collections_dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("read {}: {e}", collections_dir.display()))?;
            let dir = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == MARKER_FILE {
                continue;
            }
            if !dir.is_dir() {
                log::warn!("ignoring {}: not a directory qdrant-engine made", dir.display());
                continue;
            }
            if !has_marker(&dir) {
                log::warn!(
                    "ignoring {}: it has no {MARKER_FILE} marker, so qdrant-engine did not make it",
                    dir.display()
                );
                if !name.starts_with('.') {
                    state.unloadable.insert(name, format!("{} was not made by qdrant-engine", dir.display()));
                }
                continue;
            }
            if name.starts_with(CREATING_PREFIX) || name.starts_with(DELETED_PREFIX) {
                let what = if name.starts_with(CREATING_PREFIX) {
                    "discarding an unfinished create"
                } else {
                    "finishing a delete"
                };
                log::warn!("{what}: removing {}", dir.display());
                std::fs::remove_dir_all(&dir).map_err(|e| format!("remove {}: {e}", dir.display()))?;
                continue;
            }
            if name.starts_with('.') {
                log::warn!("ignoring {}: no collection name starts with a dot", dir.display());
                continue;
            }
            let started = Instant::now();
            // The engine may panic on files it cannot read: that, too, is a
            // collection that cannot be loaded, not a server that cannot start.
            let loaded = std::panic::catch_unwind(|| Collection::load(&dir))
                .unwrap_or_else(|_| Err("the engine panicked loading it".into()));
            match loaded {
                Ok(c) => {
                    log::info!("loaded collection {name} in {:?}", started.elapsed());
                    state.collections.insert(name, c);
                }
                Err(e) => {
                    log::error!("collection {name} cannot be loaded and is not served: {e}");
                    state.unloadable.insert(name, e);
                }
            }
        }
        let aliases_file = root.join(ALIASES_FILE);
        if aliases_file.exists() {
            let text =
                std::fs::read_to_string(&aliases_file).map_err(|e| format!("read {}: {e}", aliases_file.display()))?;
            state.aliases =
                serde_json::from_str(&text).map_err(|e| format!("parse {}: {e}", aliases_file.display()))?;
            // An alias of a collection that is on disk but not loaded is
            // kept: it works again once the collection loads.
            state.aliases.retain(|_, c| state.collections.contains_key(c) || state.unloadable.contains_key(c));
        }
        Ok(Self {
            collections_dir,
            aliases_file,
            state: RwLock::new(state),
            changes: Mutex::new(()),
            pending_deletes: Arc::default(),
        })
    }

    /// The collections on disk that could not be loaded, with why.
    pub fn unloadable(&self) -> BTreeMap<String, String> {
        self.state.read().expect("state lock").unloadable.clone()
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

    /// Whether a collection of that name exists, directly or by an alias,
    /// as the server resolves it.
    pub fn exists(&self, name: &str) -> bool {
        let state = self.state.read().expect("state lock");
        state.collections.contains_key(name)
            || state.aliases.get(name).is_some_and(|c| state.collections.contains_key(c))
    }

    /// Whether a collection of exactly that name exists (an alias is not one).
    pub fn exists_by_name(&self, name: &str) -> bool {
        self.state.read().expect("state lock").collections.contains_key(name)
    }

    /// Creates a collection from a CreateCollection request.
    pub fn create(&self, req: grpc::CreateCollection) -> Result<(), ApiError> {
        let _changes = self.changes.lock().expect("changes lock");
        let name = req.collection_name.clone();
        check_name(&name)?;
        {
            let state = self.state.read().expect("state lock");
            if state.collections.contains_key(&name) || state.unloadable.contains_key(&name) {
                return Err(ApiError::AlreadyExists(format!("Collection `{name}` already exists!")));
            }
            if state.aliases.contains_key(&name) {
                return Err(ApiError::AlreadyExists(format!("Alias with name `{name}` already exists!")));
            }
        }
        // A deleted collection of the name whose optimization ran on: wait
        // for its files to go.
        let deadline = Instant::now() + PENDING_DELETE_WAIT;
        while self.pending_deletes.lock().expect("pending lock").contains(&name) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let c = create(&self.collections_dir, &name, req)?;
        self.state.write().expect("state lock").collections.insert(name, c);
        Ok(())
    }

    /// Applies an UpdateCollection request: strict mode, HNSW and optimizer
    /// settings merged field by field as Qdrant merges a diff, the params
    /// and the metadata.
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
            if let Some(p) = req.params {
                if p.read_fan_out_factor.is_some() || p.read_fan_out_delay_ms.is_some() {
                    return Err(ApiError::unsupported("read_fan_out_factor and read_fan_out_delay_ms"));
                }
                // Kept and reported as the server reports them; with one
                // replica of each shard there is nothing else to act on.
                meta.replication_factor = p.replication_factor.or(meta.replication_factor);
                meta.write_consistency_factor = p.write_consistency_factor.or(meta.write_consistency_factor);
                meta.on_disk_payload = p.on_disk_payload.or(meta.on_disk_payload);
            }
            meta.metadata.extend(req.metadata);
            Ok(())
        })
    }

    /// Deletes a collection and its aliases; false when there was none. A
    /// collection that could not be loaded at start is deleted too.
    pub fn delete(&self, name: &str) -> Result<bool, ApiError> {
        let _changes = self.changes.lock().expect("changes lock");
        let (removed, unloadable) = {
            let mut state = self.state.write().expect("state lock");
            let removed = state.collections.remove(name);
            let unloadable = state.unloadable.remove(name).is_some();
            if removed.is_some() || unloadable {
                state.aliases.retain(|_, c| c != name);
            }
            (removed, unloadable)
        };
        let dir = match removed {
            Some(c) => {
                c.close();
                // Calls already running, and the thread applying its
                // updates, hold the collection: let them end before its files
                // go, so none writes into a directory being removed.
                let deadline = Instant::now() + DELETE_DRAIN;
                while Arc::strong_count(&c) > 1 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                if Arc::strong_count(&c) > 1 {
                    // An optimization holds it, and the engine's cannot be
                    // stopped: the files go when it lets the collection go.
                    // The name stays taken until then.
                    log::info!("collection {name} deleted; its files go once its optimization ends");
                    let (collections_dir, pending, n) =
                        (self.collections_dir.clone(), self.pending_deletes.clone(), name.to_string());
                    pending.lock().expect("pending lock").insert(n.clone());
                    c.on_drop(Box::new(move |dir: &Path| {
                        if let Err(e) = remove_collection_dir(&collections_dir, dir) {
                            log::error!("collection {n} deleted, its files left: {e}");
                        }
                        pending.lock().expect("pending lock").remove(&n);
                    }));
                    self.save_aliases()?;
                    return Ok(true);
                }
                c.dir.clone()
            }
            None if unloadable => self.collections_dir.join(name),
            None => return Ok(false),
        };
        self.save_aliases()?;
        if !has_marker(&dir) {
            // Not ours (an unloadable entry can be a foreign directory):
            // forget it, keep its files.
            log::warn!("collection {name} deleted; {} left in place: qdrant-engine did not make it", dir.display());
            return Ok(true);
        }
        remove_collection_dir(&self.collections_dir, &dir)?;
        Ok(true)
    }

    /// Applies alias operations one after the other, as the server does:
    /// each is saved as it is applied, and the first that fails ends the
    /// request with those before it in place. Deleting an alias that does
    /// not exist does nothing; creating one that exists points it anew.
    pub fn update_aliases(&self, ops: Vec<grpc::AliasOperations>) -> Result<(), ApiError> {
        use grpc::alias_operations::Action;
        let _changes = self.changes.lock().expect("changes lock");
        for op in ops {
            let mut state = self.state.write().expect("state lock");
            match op.action {
                Some(Action::CreateAlias(a)) => {
                    check_name(&a.alias_name)?;
                    if !state.collections.contains_key(&a.collection_name) {
                        return Err(ApiError::collection_not_found(&a.collection_name));
                    }
                    if state.collections.contains_key(&a.alias_name) {
                        return Err(ApiError::AlreadyExists(format!("Collection `{}` already exists!", a.alias_name)));
                    }
                    state.aliases.insert(a.alias_name, a.collection_name);
                }
                Some(Action::RenameAlias(r)) => {
                    let target = state
                        .aliases
                        .remove(&r.old_alias_name)
                        .ok_or_else(|| ApiError::NotFound(format!("Alias {} does not exists!", r.old_alias_name)))?;
                    check_name(&r.new_alias_name)?;
                    state.aliases.insert(r.new_alias_name, target);
                }
                Some(Action::DeleteAlias(d)) => {
                    if state.aliases.remove(&d.alias_name).is_none() {
                        continue;
                    }
                }
                None => return Err(ApiError::Invalid("Malformed AliasOperations type".into())),
            }
            let aliases = state.aliases.clone();
            drop(state);
            save_aliases(&self.aliases_file, &aliases)?;
        }
        Ok(())
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
        save_aliases(&self.aliases_file, &aliases)
    }

    /// Runs the optimizers of every collection that had updates since they
    /// last ran; the optimizer thread calls it.
    pub fn optimize_all(&self) {
        let all: Vec<Arc<Collection>> = self.state.read().expect("state lock").collections.values().cloned().collect();
        for c in all {
            c.optimize();
        }
    }

    /// Stops taking updates and waits, up to `within`, until those taken
    /// are applied and no thread but this holds a collection: for a stop,
    /// before the last flush.
    pub fn close_all(&self, within: Duration) {
        let state = self.state.read().expect("state lock");
        let deadline = Instant::now() + within;
        for c in state.collections.values() {
            c.close();
        }
        while state.collections.values().any(|c| !c.drained() || Arc::strong_count(c) > 1) && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Flushes every collection's segments, after which its WAL is
    /// truncated. What was acknowledged survives a crash without this; it
    /// bounds the WAL a restart replays.
    pub fn flush_all(&self) {
        let all: Vec<(String, Arc<Collection>)> =
            self.state.read().expect("state lock").collections.iter().map(|(n, c)| (n.clone(), c.clone())).collect();
        for (name, c) in all {
            if let Err(e) = c.flush() {
                log::error!("flush collection {name}: {e}");
            }
        }
    }
}

impl Drop for Storage {
    /// Lets every collection go, so that its shards close (and flush).
    fn drop(&mut self) {
        self.close_all(Duration::from_secs(30));
    }
}

/// Removes a collection's directory: a rename first, so a delete killed
/// half-way leaves a .deleted- directory, which the next start removes,
/// never a collection with part of its files.
fn remove_collection_dir(collections_dir: &Path, dir: &Path) -> Result<(), ApiError> {
    let trash = collections_dir.join(format!("{DELETED_PREFIX}{}", Uuid::new_v4()));
    std::fs::rename(dir, &trash).map_err(|e| ApiError::Internal(format!("move {} away: {e}", dir.display())))?;
    sync_dir(collections_dir)?;
    std::fs::remove_dir_all(&trash).map_err(|e| ApiError::Internal(format!("remove {}: {e}", trash.display())))
}

/// Makes a collection in a `.creating-` directory and renames it to its
/// name once whole, so that a directory named as a collection is always a
/// complete one.
fn create(collections_dir: &Path, name: &str, req: grpc::CreateCollection) -> Result<Arc<Collection>, ApiError> {
    if let Some(strict) = &req.strict_mode_config {
        check_strict_mode(strict)?;
    }
    if req.quantization_config.is_some() {
        return Err(ApiError::unsupported("Quantization"));
    }
    if req.sparse_vectors_config.as_ref().is_some_and(|s| !s.map.is_empty()) {
        return Err(ApiError::unsupported("A sparse vector"));
    }
    crate::collection::vector_params(&req)?;
    let dir = collections_dir.join(name);
    if dir.exists() {
        return Err(ApiError::AlreadyExists(format!("Collection `{name}` already exists!")));
    }
    let tmp = collections_dir.join(format!("{CREATING_PREFIX}{}", Uuid::new_v4()));
    let make = || -> Result<(), ApiError> {
        std::fs::create_dir(&tmp).map_err(|e| ApiError::Internal(format!("create {}: {e}", tmp.display())))?;
        write_marker(&tmp)?;
        // The shards are closed (and flushed) before the rename: they keep
        // their paths, and are opened again where they now live.
        Collection::make(&tmp, &req)?;
        write_atomically(&tmp.join(META_FILE), &req.encode_to_vec())?;
        std::fs::rename(&tmp, &dir)
            .map_err(|e| ApiError::Internal(format!("rename {} to {}: {e}", tmp.display(), dir.display())))?;
        sync_dir(collections_dir)
    };
    if let Err(e) = make() {
        // Leave no half-made collection behind; the next start would
        // remove it anyway.
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    Collection::load(&dir).map_err(ApiError::Internal)
}

/// Qdrant's rule for alias names (no path separators or characters a file
/// system refuses, as for a collection), and no leading dot, which this
/// server keeps for its own directories. Collection names are checked by
/// the request's validation, as the server checks them.
fn check_name(name: &str) -> Result<(), ApiError> {
    const FORBIDDEN: &[char] = &['<', '>', ':', '"', '/', '\\', '|', '?', '*', '\0', '\u{1F}'];
    if name.is_empty() || name.chars().count() > 255 {
        return Err(ApiError::BadInput(format!("name `{name}` must be 1 to 255 characters long")));
    }
    if let Some(c) = FORBIDDEN.iter().find(|c| name.contains(**c)) {
        return Err(ApiError::BadInput(format!("collection name cannot contain \"{c}\" char")));
    }
    if name.starts_with('.') {
        return Err(ApiError::BadInput(format!(
            "name `{name}` starts with a dot, which qdrant-engine keeps for its own directories"
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

fn save_aliases(file: &Path, aliases: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let text = serde_json::to_vec_pretty(aliases).map_err(|e| ApiError::Internal(e.to_string()))?;
    write_atomically(file, &text)
}

/// Refuses a storage directory that holds a Qdrant server's data: its
/// collections have a `config.json`, its root a `raft_state.json` or
/// `aliases/data.json`. Both servers default to `./storage`, and this one
/// must never take the other's data for its own.
fn check_not_foreign(root: &Path) -> Result<(), String> {
    let refuse = |what: &Path| {
        Err(format!(
            "{} holds a Qdrant server's storage ({} exists); qdrant-engine does not start on it and has changed nothing: give it a storage_path of its own",
            root.display(),
            what.display()
        ))
    };
    for sign in ["raft_state.json", "aliases/data.json"] {
        if root.join(sign).exists() {
            return refuse(&root.join(sign));
        }
    }
    let Ok(entries) = std::fs::read_dir(root.join("collections")) else { return Ok(()) };
    for entry in entries.flatten() {
        let config = entry.path().join("config.json");
        if config.exists() {
            return refuse(&config);
        }
    }
    Ok(())
}

/// Marks a new storage directory as this server's. One without the marker
/// that already holds collections is taken on only when each of them is in
/// this server's earlier layout (a `collection.pb` beside a `shard`): the
/// marker is added to each; anything else there is refused.
fn adopt_or_mark(root: &Path, collections_dir: &Path) -> Result<(), String> {
    if has_marker(root) {
        return Ok(());
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(collections_dir)
        .map_err(|e| format!("read {}: {e}", collections_dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("read {}: {e}", collections_dir.display()))?;
    let earlier = |p: &PathBuf| p.join(META_FILE).is_file() && p.join(SHARD_DIR).is_dir();
    if let Some(foreign) = entries.iter().find(|p| !earlier(p)) {
        return Err(format!(
            "{} has no {MARKER_FILE} marker and holds {}, which qdrant-engine did not write; it does not start on it and has changed nothing: give it a storage_path of its own",
            root.display(),
            foreign.display()
        ));
    }
    for dir in &entries {
        log::info!("taking on {} of an earlier qdrant-engine: adding its marker", dir.display());
        write_marker(dir).map_err(|e| e.to_string())?;
    }
    write_marker(collections_dir).map_err(|e| e.to_string())?;
    write_marker(root).map_err(|e| e.to_string())
}

fn has_marker(dir: &Path) -> bool {
    std::fs::read(dir.join(MARKER_FILE)).is_ok_and(|b| b == MARKER)
}

fn write_marker(dir: &Path) -> Result<(), ApiError> {
    write_atomically(&dir.join(MARKER_FILE), MARKER)
}

fn sync_dir(dir: &Path) -> Result<(), ApiError> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| ApiError::Internal(format!("sync {}: {e}", dir.display())))
}

/// Writes `path` through a temporary file and a rename, so a crash leaves
/// the old content or the new, never a part.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ApiError> {
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
    use qdrant_edge::{PointId, PointStructPersisted, ScrollRequest, WithPayloadInterface};

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

    fn alias_op(action: grpc::alias_operations::Action) -> grpc::AliasOperations {
        grpc::AliasOperations { action: Some(action) }
    }

    #[test]
    fn alias_actions_apply_one_after_the_other_as_on_the_server() {
        use grpc::alias_operations::Action;
        let dir = temp_dir("aliases");
        let s = Storage::open(&dir).unwrap();
        s.create(create("c", 4)).unwrap();
        let make = |alias: &str| {
            alias_op(Action::CreateAlias(grpc::CreateAlias { collection_name: "c".into(), alias_name: alias.into() }))
        };
        let rename = |old: &str, new: &str| {
            alias_op(Action::RenameAlias(grpc::RenameAlias { old_alias_name: old.into(), new_alias_name: new.into() }))
        };
        let delete = |alias: &str| alias_op(Action::DeleteAlias(grpc::DeleteAlias { alias_name: alias.into() }));
        s.update_aliases(vec![make("a")]).unwrap();
        assert!(s.exists("a") && !s.exists_by_name("a"), "an alias exists as the server resolves it");
        s.update_aliases(vec![rename("a", "b"), delete("no-such-alias")]).unwrap();
        assert_eq!(s.aliases(None), vec![("b".to_string(), "c".to_string())]);
        let err = s.update_aliases(vec![make("x"), rename("missing", "y"), make("z")]).unwrap_err();
        assert_eq!(err, ApiError::NotFound("Alias missing does not exists!".into()));
        let names: Vec<String> = s.aliases(None).into_iter().map(|(a, _)| a).collect();
        assert_eq!(names, vec!["b".to_string(), "x".to_string()], "what came before the failure stays");
        drop(s);
        let s = Storage::open(&dir).unwrap();
        assert_eq!(s.aliases(None).len(), 2, "and is saved");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A delete while an optimization holds the collection (as a long HNSW
    /// build does) leaves its files to the optimization's end, and a create
    /// of the name waits for them: no files move under a running optimizer.
    #[test]
    fn a_delete_during_an_optimization_removes_the_files_after_it() {
        let dir = temp_dir("busy");
        let s = Storage::open(&dir).unwrap();
        s.create(create("c", 4)).unwrap();
        let optimizing = s.get("c").unwrap();
        assert!(s.delete("c").unwrap());
        assert!(dir.join("collections/c/shard").exists(), "kept while held");
        let (done, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(optimizing);
            done.send(()).unwrap();
        });
        s.create(create("c", 8)).unwrap();
        wait.recv().unwrap();
        assert_eq!(s.get("c").unwrap().sizes()[""], 8, "the new collection, not the old one");
        let left: Vec<_> = std::fs::read_dir(dir.join("collections"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != MARKER_FILE)
            .collect();
        assert_eq!(left, vec!["c".to_string()]);
        drop(s);
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
    fn a_qdrant_servers_storage_is_refused_and_left_as_it_is() {
        let dir = temp_dir("server");
        let users = dir.join("collections/users");
        std::fs::create_dir_all(users.join("0/segments/3a1b")).unwrap();
        std::fs::write(users.join("config.json"), "{}").unwrap();
        std::fs::write(users.join("0/segments/3a1b/segment.json"), "{}").unwrap();
        let err = Storage::open(&dir).err().expect("a server's storage is refused");
        assert!(err.contains("Qdrant server's storage") && err.contains("config.json"), "got {err}");
        assert!(users.join("0/segments/3a1b/segment.json").exists(), "nothing of it is removed");
        assert!(!dir.join(MARKER_FILE).exists(), "nothing is added to it");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn files_it_did_not_write_are_refused_and_kept() {
        let dir = temp_dir("foreign");
        std::fs::create_dir_all(dir.join("collections/half/shard")).unwrap();
        let err = Storage::open(&dir).err().expect("an unmarked storage with other files is refused");
        assert!(err.contains("did not write"), "got {err}");
        assert!(dir.join("collections/half/shard").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn interrupted_creates_and_deletes_are_cleared_and_foreign_ones_kept() {
        let dir = temp_dir("leftovers");
        Storage::open(&dir).unwrap().create(create("c", 4)).unwrap();
        let cols = dir.join("collections");
        for left in [".creating-1", ".deleted-2"] {
            std::fs::create_dir_all(cols.join(left).join("shard")).unwrap();
            write_marker(&cols.join(left)).unwrap();
        }
        std::fs::create_dir_all(cols.join(".deleted-3")).unwrap();
        std::fs::create_dir_all(cols.join("theirs")).unwrap();
        std::fs::write(cols.join("stray.txt"), "x").unwrap();
        let s = Storage::open(&dir).unwrap();
        assert!(!cols.join(".creating-1").exists(), "an unfinished create is discarded");
        assert!(!cols.join(".deleted-2").exists(), "an unfinished delete is finished");
        assert!(cols.join(".deleted-3").exists() && cols.join("theirs").exists(), "unmarked ones are kept");
        assert!(cols.join("stray.txt").exists());
        assert_eq!(s.names(), vec!["c".to_string()]);
        assert!(matches!(s.create(create("theirs", 4)), Err(ApiError::AlreadyExists(_))));
        assert!(s.delete("theirs").unwrap());
        assert!(cols.join("theirs").exists(), "a delete leaves a directory it did not make");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_collection_that_cannot_load_is_named_and_the_rest_served() {
        let dir = temp_dir("unloadable");
        {
            let s = Storage::open(&dir).unwrap();
            s.create(create("good", 4)).unwrap();
            s.create(create("bad", 4)).unwrap();
        }
        std::fs::write(dir.join("collections/bad").join(META_FILE), b"\xff\xff not a message").unwrap();
        let s = Storage::open(&dir).unwrap();
        assert_eq!(s.names(), vec!["good".to_string()]);
        let unloadable = s.unloadable();
        assert!(unloadable.get("bad").is_some_and(|why| why.contains(META_FILE)), "got {unloadable:?}");
        assert!(matches!(s.create(create("bad", 4)), Err(ApiError::AlreadyExists(_))));
        assert!(s.delete("bad").unwrap(), "a collection that cannot load can be deleted");
        assert!(!dir.join("collections/bad").exists());
        s.create(create("bad", 4)).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_earlier_qdrant_engines_storage_is_taken_on() {
        let dir = temp_dir("earlier");
        Storage::open(&dir).unwrap().create(create("c", 4)).unwrap();
        for marker in [
            dir.join(MARKER_FILE),
            dir.join("collections").join(MARKER_FILE),
            dir.join("collections/c").join(MARKER_FILE),
        ] {
            std::fs::remove_file(marker).unwrap();
        }
        let s = Storage::open(&dir).unwrap();
        assert_eq!(s.names(), vec!["c".to_string()]);
        assert!(has_marker(&dir) && has_marker(&dir.join("collections/c")));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn names_that_are_paths_are_refused() {
        for name in ["", "a/b", "..", ".hidden", "a\\b", "a\0b", "a\u{1F}b"] {
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
        let err = c.check_upsert_limit(2).unwrap_err();
        assert!(matches!(err, ApiError::BadRequest(ref m) if m.contains("\"upsert limit\"")), "got {err:?}");
        c.check_upsert_limit(1).unwrap();
        let lift = grpc::UpdateCollection {
            collection_name: "c".into(),
            strict_mode_config: Some(grpc::StrictModeConfig { enabled: Some(false), ..Default::default() }),
            ..Default::default()
        };
        s.update(lift).unwrap();
        c.apply_now(Collection::upsert_op(vec![point(1), point(2)], None, None)).unwrap();
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
        c.apply_now(Collection::upsert_op(vec![point(1, 5)], None, None)).unwrap();
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
        c.apply_now(Collection::upsert_op(vec![point(1, 3), point(2, 3)], Some(older_than(3).unwrap()), None)).unwrap();
        // Version 7 may overwrite version 5.
        c.apply_now(Collection::upsert_op(vec![point(1, 7)], Some(older_than(7).unwrap()), None)).unwrap();
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
