//! Qdrant's gRPC services, from the generated servers of the `qdrant-client`
//! crate, on top of [`Storage`]. Every engine call runs on the blocking pool:
//! the engine does disk and CPU work under its own locks.
//!
//! The calls a writer and its tests need are served (see README.md); search,
//! recommend, query, snapshots, payload edits and cluster calls answer
//! Unimplemented with a message that says so.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use qdrant_client::qdrant as grpc;
use qdrant_client::qdrant::collections_server::Collections;
use qdrant_client::qdrant::points_server::Points;
use qdrant_client::qdrant::qdrant_server::Qdrant;
use qdrant_edge::{
    FacetRequest, JsonPath, PayloadSchemaType, PointStructPersisted, QueryRequest, ScrollRequest, UpdateMode,
    UpdateOperation,
};
use tonic::{Request, Response, Status};

use crate::convert;
use crate::error::ApiError;
use crate::storage::{Collection, Storage};
use crate::validate::Check;

/// The Qdrant API version whose protocol this server speaks: that of the
/// `qdrant-client` crate its services are generated from.
pub const API_VERSION: &str = "1.17.0";
/// The engine behind it, as `scripts/services.sh` prints it.
pub const ENGINE: &str = "qdrant-edge 0.9.0";

/// Runs `f` on the blocking pool and answers with its error as Qdrant would.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, ApiError> + Send + 'static) -> Result<T, Status> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(Status::from),
        Err(e) => Err(Status::internal(format!("Service internal error: {e}"))),
    }
}

/// A stub for a call this server does not serve, with the signature
/// `async_trait` gives a trait method: a macro cannot expand inside the
/// attribute's input, so the stubs are written in its output form.
macro_rules! unserved {
    ($service:literal: $($name:ident($req:ty) -> $resp:ty;)*) => {
        $(
            fn $name<'life0, 'async_trait>(
                &'life0 self,
                _request: Request<$req>,
            ) -> Pin<Box<dyn Future<Output = Result<Response<$resp>, Status>> + Send + 'async_trait>>
            where
                'life0: 'async_trait,
                Self: 'async_trait,
            {
                Box::pin(async { Err(ApiError::unsupported(concat!($service, "/", stringify!($name))).into()) })
            }
        )*
    };
}

/// The Qdrant service: the health check, which needs no API key.
pub struct QdrantService;

#[tonic::async_trait]
impl Qdrant for QdrantService {
    async fn health_check(
        &self,
        _: Request<grpc::HealthCheckRequest>,
    ) -> Result<Response<grpc::HealthCheckReply>, Status> {
        Ok(Response::new(grpc::HealthCheckReply {
            title: format!("qdrant-engine - the Qdrant API on {ENGINE}"),
            version: API_VERSION.into(),
            commit: None,
        }))
    }
}

/// The Collections service.
pub struct CollectionsService {
    pub storage: Arc<Storage>,
}

#[tonic::async_trait]
impl Collections for CollectionsService {
    async fn get(
        &self,
        req: Request<grpc::GetCollectionInfoRequest>,
    ) -> Result<Response<grpc::GetCollectionInfoResponse>, Status> {
        let t = Instant::now();
        let storage = self.storage.clone();
        let name = req.into_inner().collection_name;
        Check::default().collection("collection_name", &name).done()?;
        let result = blocking(move || collection_info(&storage, &name)).await?;
        Ok(Response::new(grpc::GetCollectionInfoResponse { result: Some(result), time: secs(t) }))
    }

    async fn list(
        &self,
        _: Request<grpc::ListCollectionsRequest>,
    ) -> Result<Response<grpc::ListCollectionsResponse>, Status> {
        let t = Instant::now();
        let collections = self.storage.names().into_iter().map(|name| grpc::CollectionDescription { name }).collect();
        Ok(Response::new(grpc::ListCollectionsResponse { collections, time: secs(t) }))
    }

    async fn create(
        &self,
        req: Request<grpc::CreateCollection>,
    ) -> Result<Response<grpc::CollectionOperationResponse>, Status> {
        let req = req.into_inner();
        Check::default()
            .new_collection("collection_name", &req.collection_name)
            .vectors_config("vectors_config", req.vectors_config.as_ref())
            .at_least("shard_number", req.shard_number.map(u64::from), 1)
            .at_least("replication_factor", req.replication_factor.map(u64::from), 1)
            .at_least("write_consistency_factor", req.write_consistency_factor.map(u64::from), 1)
            .settings(req.hnsw_config.as_ref(), req.wal_config.as_ref(), req.optimizers_config.as_ref())
            .strict_mode(req.strict_mode_config.as_ref())
            .done()?;
        self.change(move |s| s.create(req).map(|()| true)).await
    }

    async fn update(
        &self,
        req: Request<grpc::UpdateCollection>,
    ) -> Result<Response<grpc::CollectionOperationResponse>, Status> {
        let req = req.into_inner();
        let params = req.params.as_ref();
        Check::default()
            .collection("collection_name", &req.collection_name)
            .at_least("params.replication_factor", params.and_then(|p| p.replication_factor).map(u64::from), 1)
            .at_least(
                "params.write_consistency_factor",
                params.and_then(|p| p.write_consistency_factor).map(u64::from),
                1,
            )
            .at_least("timeout", req.timeout, 1)
            .settings(req.hnsw_config.as_ref(), None, req.optimizers_config.as_ref())
            .strict_mode(req.strict_mode_config.as_ref())
            .done()?;
        self.change(move |s| s.update(req).map(|()| true)).await
    }

    async fn delete(
        &self,
        req: Request<grpc::DeleteCollection>,
    ) -> Result<Response<grpc::CollectionOperationResponse>, Status> {
        let req = req.into_inner();
        Check::default()
            .collection("collection_name", &req.collection_name)
            .at_least("timeout", req.timeout, 1)
            .done()?;
        let name = req.collection_name;
        self.change(move |s| s.delete(&name)).await
    }

    async fn update_aliases(
        &self,
        req: Request<grpc::ChangeAliases>,
    ) -> Result<Response<grpc::CollectionOperationResponse>, Status> {
        let req = req.into_inner();
        Check::default().at_least("timeout", req.timeout, 1).done()?;
        let ops = req.actions;
        self.change(move |s| s.update_aliases(ops).map(|()| true)).await
    }

    async fn list_collection_aliases(
        &self,
        req: Request<grpc::ListCollectionAliasesRequest>,
    ) -> Result<Response<grpc::ListAliasesResponse>, Status> {
        let t = Instant::now();
        let name = req.into_inner().collection_name;
        Check::default().collection("collection_name", &name).done()?;
        if !self.storage.exists_by_name(&name) {
            return Err(ApiError::collection_not_found(&name).into());
        }
        Ok(Response::new(aliases(self.storage.aliases(Some(&name)), t)))
    }

    async fn list_aliases(
        &self,
        _: Request<grpc::ListAliasesRequest>,
    ) -> Result<Response<grpc::ListAliasesResponse>, Status> {
        Ok(Response::new(aliases(self.storage.aliases(None), Instant::now())))
    }

    async fn collection_exists(
        &self,
        req: Request<grpc::CollectionExistsRequest>,
    ) -> Result<Response<grpc::CollectionExistsResponse>, Status> {
        let t = Instant::now();
        let name = req.into_inner().collection_name;
        Check::default().collection("collection_name", &name).done()?;
        let exists = self.storage.exists(&name);
        Ok(Response::new(grpc::CollectionExistsResponse {
            result: Some(grpc::CollectionExists { exists }),
            time: secs(t),
        }))
    }

    unserved! { "Collections":
        collection_cluster_info(grpc::CollectionClusterInfoRequest) -> grpc::CollectionClusterInfoResponse;
        update_collection_cluster_setup(grpc::UpdateCollectionClusterSetupRequest) -> grpc::UpdateCollectionClusterSetupResponse;
        create_shard_key(grpc::CreateShardKeyRequest) -> grpc::CreateShardKeyResponse;
        delete_shard_key(grpc::DeleteShardKeyRequest) -> grpc::DeleteShardKeyResponse;
        list_shard_keys(grpc::ListShardKeysRequest) -> grpc::ListShardKeysResponse;
    }
}

impl CollectionsService {
    /// Runs a change of collections or aliases on the blocking pool and
    /// answers with its result.
    async fn change(
        &self,
        f: impl FnOnce(&Storage) -> Result<bool, ApiError> + Send + 'static,
    ) -> Result<Response<grpc::CollectionOperationResponse>, Status> {
        let t = Instant::now();
        let storage = self.storage.clone();
        let result = blocking(move || f(&storage)).await?;
        Ok(Response::new(grpc::CollectionOperationResponse { result, time: secs(t) }))
    }
}

fn aliases(list: Vec<(String, String)>, t: Instant) -> grpc::ListAliasesResponse {
    grpc::ListAliasesResponse {
        aliases: list
            .into_iter()
            .map(|(alias_name, collection_name)| grpc::AliasDescription { alias_name, collection_name })
            .collect(),
        time: secs(t),
    }
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

/// A collection's info as the server reports it, with the settings it was
/// created with and the engine's counts.
fn collection_info(storage: &Storage, name: &str) -> Result<grpc::CollectionInfo, ApiError> {
    let c = storage.get(name)?;
    let info = c.info()?;
    let meta = c.meta();
    let payload_schema = info
        .payload_schema
        .into_iter()
        .map(|(field, i)| {
            let data_type = match i.data_type {
                PayloadSchemaType::Keyword => grpc::PayloadSchemaType::Keyword,
                PayloadSchemaType::Integer => grpc::PayloadSchemaType::Integer,
                PayloadSchemaType::Float => grpc::PayloadSchemaType::Float,
                PayloadSchemaType::Geo => grpc::PayloadSchemaType::Geo,
                PayloadSchemaType::Text => grpc::PayloadSchemaType::Text,
                PayloadSchemaType::Bool => grpc::PayloadSchemaType::Bool,
                PayloadSchemaType::Datetime => grpc::PayloadSchemaType::Datetime,
                PayloadSchemaType::Uuid => grpc::PayloadSchemaType::Uuid,
            };
            (
                field.to_string(),
                grpc::PayloadSchemaInfo { data_type: data_type as i32, params: None, points: Some(i.points as u64) },
            )
        })
        .collect();
    // As the server: yellow while an optimization runs, green otherwise.
    let status = if c.optimizing() { grpc::CollectionStatus::Yellow } else { grpc::CollectionStatus::Green };
    Ok(grpc::CollectionInfo {
        status: status as i32,
        optimizer_status: Some(grpc::OptimizerStatus { ok: true, error: String::new() }),
        segments_count: info.segments_count as u64,
        points_count: Some(info.points_count as u64),
        indexed_vectors_count: Some(info.indexed_vectors_count as u64),
        payload_schema,
        config: Some(grpc::CollectionConfig {
            params: Some(grpc::CollectionParams {
                shard_number: meta.shard_number.unwrap_or(1),
                on_disk_payload: meta.on_disk_payload.unwrap_or(true),
                vectors_config: meta.vectors_config,
                replication_factor: Some(meta.replication_factor.unwrap_or(1)),
                write_consistency_factor: Some(meta.write_consistency_factor.unwrap_or(1)),
                ..Default::default()
            }),
            hnsw_config: meta.hnsw_config,
            optimizer_config: meta.optimizers_config,
            wal_config: meta.wal_config,
            quantization_config: None,
            strict_mode_config: meta.strict_mode_config,
            metadata: meta.metadata,
        }),
        warnings: vec![],
        update_queue: None,
    })
}

/// The Points service.
pub struct PointsService {
    pub storage: Arc<Storage>,
}

impl PointsService {
    /// Takes an update of a collection: `f` builds it on the blocking pool
    /// from the request (where a request the server refuses fails), then it
    /// is written to the collection's intake log and queued. With `wait`
    /// the answer comes once it is applied (Completed), without once it is
    /// taken (Acknowledged), as the server answers.
    async fn update(
        &self,
        collection: &str,
        wait: Option<bool>,
        f: impl FnOnce(&Collection) -> Result<UpdateOperation, ApiError> + Send + 'static,
    ) -> Result<Response<grpc::PointsOperationResponse>, Status> {
        let t = Instant::now();
        let c = self.storage.get(collection)?;
        let wait = wait == Some(true);
        let applied = blocking(move || {
            let op = f(&c)?;
            c.submit(op, wait)
        })
        .await?;
        if let Some(applied) = applied {
            applied.await.map_err(|_| Status::internal("Service internal error: the update thread ended"))??;
        }
        let status = if wait { grpc::UpdateStatus::Completed } else { grpc::UpdateStatus::Acknowledged };
        Ok(Response::new(grpc::PointsOperationResponse {
            result: Some(grpc::UpdateResult { operation_id: None, status: status as i32 }),
            time: secs(t),
            usage: None,
        }))
    }
}

impl PointsService {
    /// The points a validated query selects, best first: Search is served
    /// as the Query it is the older spelling of.
    async fn nearest(&self, req: grpc::QueryPoints) -> Result<Vec<grpc::ScoredPoint>, Status> {
        use grpc::query::Variant;
        let c = self.storage.get(&req.collection_name)?;
        let result = blocking(move || {
            let mut q = QueryRequest::new(req.limit.unwrap_or(10) as usize);
            q.query = match req.query.and_then(|q| q.variant) {
                None => None,
                Some(Variant::Nearest(input)) => Some(convert::nearest(input, req.using)?),
                Some(_) => return Err(ApiError::unsupported("A query other than nearest")),
            };
            q.filter = convert::filter_opt(req.filter)?;
            q.params = convert::search_params(req.params)?;
            q.score_threshold = req.score_threshold;
            q.offset = req.offset.unwrap_or(0) as usize;
            q.with_payload = convert::with_payload(req.with_payload, false)?;
            q.with_vector = convert::with_vector(req.with_vectors);
            c.query(q)
        })
        .await?;
        Ok(result.into_iter().map(convert::scored_out).collect())
    }
}

fn json_path(field: &str) -> Result<JsonPath, ApiError> {
    field.parse().map_err(|()| ApiError::BadInput(format!("Invalid payload key `{field}`")))
}

#[tonic::async_trait]
impl Points for PointsService {
    async fn upsert(
        &self,
        req: Request<grpc::UpsertPoints>,
    ) -> Result<Response<grpc::PointsOperationResponse>, Status> {
        let req = req.into_inner();
        Check::default()
            .collection("collection_name", &req.collection_name)
            .filter("update_filter", req.update_filter.as_ref())
            .done()?;
        self.update(&req.collection_name.clone(), req.wait, move |c| {
            // In the server's order: the gRPC layer reads the points (an id,
            // some vectors), strict mode checks the batch, the shard checks
            // the vectors' sizes. An oversized batch with a vector of the
            // wrong size is refused for its size.
            let points = req
                .points
                .into_iter()
                .map(|p| {
                    Ok(PointStructPersisted {
                        id: convert::point_id(p.id)?,
                        vector: convert::vectors(p.vectors)?,
                        payload: Some(convert::payload(p.payload)?),
                    })
                })
                .collect::<Result<Vec<_>, ApiError>>()?;
            c.check_upsert_limit(points.len())?;
            for p in &points {
                convert::check_vectors(&p.vector, c.sizes())?;
            }
            let mode = match req.update_mode.map(grpc::UpdateMode::try_from) {
                None => None,
                Some(Ok(grpc::UpdateMode::Upsert)) => Some(UpdateMode::Upsert),
                Some(Ok(grpc::UpdateMode::InsertOnly)) => Some(UpdateMode::InsertOnly),
                Some(Ok(grpc::UpdateMode::UpdateOnly)) => Some(UpdateMode::UpdateOnly),
                Some(Err(e)) => return Err(ApiError::BadInput(format!("Unknown update mode: {e}"))),
            };
            Ok(Collection::upsert_op(points, convert::filter_opt(req.update_filter)?, mode))
        })
        .await
    }

    async fn delete(
        &self,
        req: Request<grpc::DeletePoints>,
    ) -> Result<Response<grpc::PointsOperationResponse>, Status> {
        use grpc::points_selector::PointsSelectorOneOf;
        let req = req.into_inner();
        let filter = match req.points.as_ref().and_then(|p| p.points_selector_one_of.as_ref()) {
            Some(PointsSelectorOneOf::Filter(f)) => Some(f),
            _ => None,
        };
        Check::default().collection("collection_name", &req.collection_name).filter("points.filter", filter).done()?;
        self.update(&req.collection_name.clone(), req.wait, move |_| {
            match req.points.and_then(|p| p.points_selector_one_of) {
                Some(PointsSelectorOneOf::Points(list)) => Ok(Collection::delete_ids_op(
                    list.ids.into_iter().map(|id| convert::point_id(Some(id))).collect::<Result<_, _>>()?,
                )),
                Some(PointsSelectorOneOf::Filter(f)) => Ok(Collection::delete_filter_op(convert::filter(f)?)),
                None => Err(ApiError::Invalid("Malformed PointsSelector type".into())),
            }
        })
        .await
    }

    async fn get(&self, req: Request<grpc::GetPoints>) -> Result<Response<grpc::GetResponse>, Status> {
        let t = Instant::now();
        let req = req.into_inner();
        Check::default().collection("collection_name", &req.collection_name).done()?;
        let c = self.storage.get(&req.collection_name)?;
        let result = blocking(move || {
            let ids = req.ids.into_iter().map(|id| convert::point_id(Some(id))).collect::<Result<_, _>>()?;
            let records = c.retrieve(
                ids,
                convert::with_payload(req.with_payload, true)?,
                convert::with_vector(req.with_vectors),
            )?;
            Ok(records.into_iter().map(convert::record_out).collect())
        })
        .await?;
        Ok(Response::new(grpc::GetResponse { result, time: secs(t), usage: None }))
    }

    async fn create_field_index(
        &self,
        req: Request<grpc::CreateFieldIndexCollection>,
    ) -> Result<Response<grpc::PointsOperationResponse>, Status> {
        let req = req.into_inner();
        Check::default()
            .collection("collection_name", &req.collection_name)
            .not_empty("field_name", &req.field_name)
            .done()?;
        self.update(&req.collection_name.clone(), req.wait, move |_| {
            let schema = match req.field_type.map(grpc::FieldType::try_from) {
                None => None,
                Some(Ok(grpc::FieldType::Keyword)) => Some(PayloadSchemaType::Keyword),
                Some(Ok(grpc::FieldType::Integer)) => Some(PayloadSchemaType::Integer),
                Some(Ok(grpc::FieldType::Float)) => Some(PayloadSchemaType::Float),
                Some(Ok(grpc::FieldType::Geo)) => Some(PayloadSchemaType::Geo),
                Some(Ok(grpc::FieldType::Text)) => Some(PayloadSchemaType::Text),
                Some(Ok(grpc::FieldType::Bool)) => Some(PayloadSchemaType::Bool),
                Some(Ok(grpc::FieldType::Datetime)) => Some(PayloadSchemaType::Datetime),
                Some(Ok(grpc::FieldType::Uuid)) => Some(PayloadSchemaType::Uuid),
                Some(Err(e)) => return Err(ApiError::BadInput(format!("Unknown field type: {e}"))),
            };
            if req.field_index_params.is_some() {
                return Err(ApiError::unsupported("Payload index parameters"));
            }
            let Some(schema) = schema else {
                return Err(ApiError::BadRequest(
                    "Can't auto-detect field type, please specify `field_schema` in the request".into(),
                ));
            };
            Ok(Collection::create_index_op(json_path(&req.field_name)?, schema))
        })
        .await
    }

    async fn delete_field_index(
        &self,
        req: Request<grpc::DeleteFieldIndexCollection>,
    ) -> Result<Response<grpc::PointsOperationResponse>, Status> {
        let req = req.into_inner();
        Check::default()
            .collection("collection_name", &req.collection_name)
            .not_empty("field_name", &req.field_name)
            .done()?;
        self.update(&req.collection_name.clone(), req.wait, move |_| {
            Ok(Collection::delete_index_op(json_path(&req.field_name)?))
        })
        .await
    }

    async fn scroll(&self, req: Request<grpc::ScrollPoints>) -> Result<Response<grpc::ScrollResponse>, Status> {
        let t = Instant::now();
        let req = req.into_inner();
        Check::default()
            .collection("collection_name", &req.collection_name)
            .filter("filter", req.filter.as_ref())
            .at_least("limit", req.limit.map(u64::from), 1)
            .done()?;
        let c = self.storage.get(&req.collection_name)?;
        if req.order_by.is_some() {
            return Err(ApiError::unsupported("Scrolling with order_by").into());
        }
        let (records, next) = blocking(move || {
            let offset = req.offset.map(|id| convert::point_id(Some(id))).transpose()?;
            c.scroll(ScrollRequest {
                offset,
                limit: Some(req.limit.unwrap_or(10) as usize),
                filter: convert::filter_opt(req.filter)?,
                with_payload: Some(convert::with_payload(req.with_payload, true)?),
                with_vector: convert::with_vector(req.with_vectors),
                order_by: None,
            })
        })
        .await?;
        Ok(Response::new(grpc::ScrollResponse {
            next_page_offset: next.map(convert::point_id_out),
            result: records.into_iter().map(convert::record_out).collect(),
            time: secs(t),
            usage: None,
        }))
    }

    async fn count(&self, req: Request<grpc::CountPoints>) -> Result<Response<grpc::CountResponse>, Status> {
        let t = Instant::now();
        let req = req.into_inner();
        Check::default()
            .collection("collection_name", &req.collection_name)
            .filter("filter", req.filter.as_ref())
            .done()?;
        let c = self.storage.get(&req.collection_name)?;
        let count = blocking(move || c.count(convert::filter_opt(req.filter)?, req.exact.unwrap_or(true))).await?;
        Ok(Response::new(grpc::CountResponse {
            result: Some(grpc::CountResult { count: count as u64 }),
            time: secs(t),
            usage: None,
        }))
    }

    async fn facet(&self, req: Request<grpc::FacetCounts>) -> Result<Response<grpc::FacetResponse>, Status> {
        let t = Instant::now();
        let req = req.into_inner();
        Check::default()
            .collection("collection_name", &req.collection_name)
            .not_empty("key", &req.key)
            .filter("filter", req.filter.as_ref())
            .at_least("timeout", req.timeout, 1)
            .done()?;
        let c = self.storage.get(&req.collection_name)?;
        let hits = blocking(move || {
            let mut facet = FacetRequest::new(json_path(&req.key)?);
            facet.filter = convert::filter_opt(req.filter)?;
            facet.exact = req.exact.unwrap_or(false);
            if let Some(limit) = req.limit {
                facet.limit = limit as usize;
            }
            Ok(c.facet(facet)?.hits)
        })
        .await?;
        let hits = hits
            .into_iter()
            .map(|h| grpc::FacetHit { value: Some(convert::facet_value_out(h.value)), count: h.count as u64 })
            .collect();
        Ok(Response::new(grpc::FacetResponse { hits, time: secs(t), usage: None }))
    }

    async fn search(&self, req: Request<grpc::SearchPoints>) -> Result<Response<grpc::SearchResponse>, Status> {
        let t = Instant::now();
        let req = req.into_inner();
        Check::default()
            .collection("collection_name", &req.collection_name)
            .filter("filter", req.filter.as_ref())
            .at_least("limit", Some(req.limit), 1)
            .at_least("params.hnsw_ef", req.params.as_ref().and_then(|p| p.hnsw_ef), 1)
            .at_least("timeout", req.timeout, 1)
            .done()?;
        if req.sparse_indices.is_some() {
            return Err(ApiError::unsupported("A sparse vector").into());
        }
        let query = grpc::QueryPoints {
            collection_name: req.collection_name,
            query: Some(grpc::Query {
                variant: Some(grpc::query::Variant::Nearest(grpc::VectorInput {
                    variant: Some(grpc::vector_input::Variant::Dense(grpc::DenseVector { data: req.vector })),
                })),
            }),
            using: req.vector_name,
            filter: req.filter,
            params: req.params,
            score_threshold: req.score_threshold,
            limit: Some(req.limit),
            offset: req.offset,
            with_vectors: req.with_vectors,
            with_payload: req.with_payload,
            ..Default::default()
        };
        Ok(Response::new(grpc::SearchResponse { result: self.nearest(query).await?, time: secs(t), usage: None }))
    }

    async fn query(&self, req: Request<grpc::QueryPoints>) -> Result<Response<grpc::QueryResponse>, Status> {
        let t = Instant::now();
        let req = req.into_inner();
        Check::default()
            .collection("collection_name", &req.collection_name)
            .filter("filter", req.filter.as_ref())
            .at_least("limit", req.limit, 1)
            .at_least("params.hnsw_ef", req.params.as_ref().and_then(|p| p.hnsw_ef), 1)
            .at_least("timeout", req.timeout, 1)
            .done()?;
        if !req.prefetch.is_empty() {
            return Err(ApiError::unsupported("A query with prefetch").into());
        }
        if req.lookup_from.is_some() {
            return Err(ApiError::unsupported("A query with lookup_from").into());
        }
        Ok(Response::new(grpc::QueryResponse { result: self.nearest(req).await?, time: secs(t), usage: None }))
    }

    unserved! { "Points":
        update_vectors(grpc::UpdatePointVectors) -> grpc::PointsOperationResponse;
        delete_vectors(grpc::DeletePointVectors) -> grpc::PointsOperationResponse;
        set_payload(grpc::SetPayloadPoints) -> grpc::PointsOperationResponse;
        overwrite_payload(grpc::SetPayloadPoints) -> grpc::PointsOperationResponse;
        delete_payload(grpc::DeletePayloadPoints) -> grpc::PointsOperationResponse;
        clear_payload(grpc::ClearPayloadPoints) -> grpc::PointsOperationResponse;
        search_batch(grpc::SearchBatchPoints) -> grpc::SearchBatchResponse;
        search_groups(grpc::SearchPointGroups) -> grpc::SearchGroupsResponse;
        recommend(grpc::RecommendPoints) -> grpc::RecommendResponse;
        recommend_batch(grpc::RecommendBatchPoints) -> grpc::RecommendBatchResponse;
        recommend_groups(grpc::RecommendPointGroups) -> grpc::RecommendGroupsResponse;
        discover(grpc::DiscoverPoints) -> grpc::DiscoverResponse;
        discover_batch(grpc::DiscoverBatchPoints) -> grpc::DiscoverBatchResponse;
        update_batch(grpc::UpdateBatchPoints) -> grpc::UpdateBatchResponse;
        query_batch(grpc::QueryBatchPoints) -> grpc::QueryBatchResponse;
        query_groups(grpc::QueryPointGroups) -> grpc::QueryGroupsResponse;
        search_matrix_pairs(grpc::SearchMatrixPoints) -> grpc::SearchMatrixPairsResponse;
        search_matrix_offsets(grpc::SearchMatrixPoints) -> grpc::SearchMatrixOffsetsResponse;
    }
}

/// Checks the API key of a call, as the server's auth layer does: in an
/// `api-key` header, or as `authorization: Bearer <key>`.
#[derive(Clone)]
pub struct ApiKey(pub Option<Arc<str>>);

impl tonic::service::Interceptor for ApiKey {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(want) = &self.0 else { return Ok(req) };
        let md = req.metadata();
        let given = md
            .get("api-key")
            .and_then(|v| v.to_str().ok())
            .or_else(|| md.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer ")));
        match given {
            None => Err(Status::unauthenticated("Must provide an API key or an Authorization bearer token")),
            Some(key) if constant_time_eq(key.as_bytes(), want.as_bytes()) => Ok(req),
            Some(_) => Err(Status::unauthenticated("Invalid API key or JWT")),
        }
    }
}

/// Compares without an early exit, on the length as on the bytes, so the
/// time taken tells neither how much of a guessed key was right nor how
/// long the key is: every byte of the longer is read.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let diff = (0..n).fold(0u8, |acc, i| acc | (a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0xff)));
    diff == 0 && a.len() == b.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    #[test]
    fn the_api_key_is_required_and_checked() {
        let mut key = ApiKey(Some("secret-1".into()));
        let mut req = Request::new(());
        assert_eq!(
            key.call(Request::new(())).unwrap_err().message(),
            "Must provide an API key or an Authorization bearer token"
        );
        req.metadata_mut().insert("api-key", "secret-2".parse().unwrap());
        assert_eq!(key.call(req).unwrap_err().code(), tonic::Code::Unauthenticated);
        let mut req = Request::new(());
        req.metadata_mut().insert("authorization", "Bearer secret-1".parse().unwrap());
        assert!(key.call(req).is_ok());
        assert!(ApiKey(None).call(Request::new(())).is_ok());
    }

    #[test]
    fn keys_compare_whole() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secret-1"));
        assert!(!constant_time_eq(b"secret-1", b"secret"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(!constant_time_eq(b"secreT", b"secret"));
    }
}
