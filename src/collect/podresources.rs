//! The kubelet's PodResources API (v1) over its unix socket: the messages of
//! `proto/podresources.proto` as prost types, the client partop's collector uses
//! (`collect::kubelet`) and the server the simulator's kubelet twin serves, both through tonic.
//! Written by hand from the proto rather than generated: no protoc on the build machine, and no
//! code generator (protox, tonic-build) to compile on every clean build; the test
//! `tests/k8s_podresources.rs` holds the field numbers here to the proto file's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The kubelet's socket.
pub const KUBELET_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";

/// The service's name on the wire.
pub const SERVICE: &str = "v1.PodResourcesLister";

/// The largest answer read (a kubelet with hundreds of pods answers in tens of KiB).
pub const MAX_ANSWER_BYTES: usize = 4 << 20;

/// `ListPodResourcesRequest`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ListPodResourcesRequest {}

/// `ListPodResourcesResponse`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ListPodResourcesResponse {
    /// Every pod of the node.
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// `PodResources`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct PodResources {
    /// Pod name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Namespace.
    #[prost(string, tag = "2")]
    pub namespace: String,
    /// Its containers.
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// `ContainerResources`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ContainerResources {
    /// Container name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Device-plugin devices.
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    /// Exclusive CPUs.
    #[prost(int64, repeated, tag = "3")]
    pub cpu_ids: Vec<i64>,
    /// Memory the memory manager pinned.
    #[prost(message, repeated, tag = "4")]
    pub memory: Vec<ContainerMemory>,
    /// DRA devices.
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

/// `ContainerMemory`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ContainerMemory {
    /// `memory`, `hugepages-1Gi`.
    #[prost(string, tag = "1")]
    pub memory_type: String,
    /// Bytes.
    #[prost(uint64, tag = "2")]
    pub size: u64,
    /// NUMA nodes.
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// `ContainerDevices`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ContainerDevices {
    /// Extended resource (`amd.com/gpu`).
    #[prost(string, tag = "1")]
    pub resource_name: String,
    /// The plugin's device ids.
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
    /// NUMA nodes.
    #[prost(message, optional, tag = "3")]
    pub topology: Option<TopologyInfo>,
}

/// `TopologyInfo`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct TopologyInfo {
    /// NUMA nodes.
    #[prost(message, repeated, tag = "1")]
    pub nodes: Vec<NumaNode>,
}

/// `NUMANode`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct NumaNode {
    /// Its id (`ID` in the proto).
    #[prost(int64, tag = "1")]
    pub id: i64,
}

/// `DynamicResource` (field 1 is reserved: the removed class name).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct DynamicResource {
    /// Resource claim.
    #[prost(string, tag = "2")]
    pub claim_name: String,
    /// Its namespace.
    #[prost(string, tag = "3")]
    pub claim_namespace: String,
    /// Devices of the claim.
    #[prost(message, repeated, tag = "4")]
    pub claim_resources: Vec<ClaimResource>,
}

/// `ClaimResource`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ClaimResource {
    /// CDI devices injected.
    #[prost(message, repeated, tag = "1")]
    pub cdi_devices: Vec<CdiDevice>,
    /// DRA driver (`gpu.amd.com`).
    #[prost(string, tag = "2")]
    pub driver_name: String,
    /// ResourceSlice pool.
    #[prost(string, tag = "3")]
    pub pool_name: String,
    /// Device in the pool (`gpu-1-129`).
    #[prost(string, tag = "4")]
    pub device_name: String,
}

/// `CDIDevice`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct CdiDevice {
    /// Fully qualified CDI name.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `AllocatableResourcesRequest`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct AllocatableResourcesRequest {}

/// `AllocatableResourcesResponse`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct AllocatableResourcesResponse {
    /// Every device the kubelet can allocate.
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<ContainerDevices>,
    /// CPUs.
    #[prost(int64, repeated, tag = "2")]
    pub cpu_ids: Vec<i64>,
    /// Memory.
    #[prost(message, repeated, tag = "3")]
    pub memory: Vec<ContainerMemory>,
}

/// `GetPodResourcesRequest`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct GetPodResourcesRequest {
    /// Pod name.
    #[prost(string, tag = "1")]
    pub pod_name: String,
    /// Namespace.
    #[prost(string, tag = "2")]
    pub pod_namespace: String,
}

/// `GetPodResourcesResponse`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct GetPodResourcesResponse {
    /// The pod.
    #[prost(message, optional, tag = "1")]
    pub pod_resources: Option<PodResources>,
}

/// The three methods' paths.
const LIST: &str = "/v1.PodResourcesLister/List";
const ALLOCATABLE: &str = "/v1.PodResourcesLister/GetAllocatableResources";
const GET: &str = "/v1.PodResourcesLister/Get";

/// Why a call failed, in words that name the socket.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Nothing listens there: not a Kubernetes node (or the kubelet is down).
    #[error("no kubelet socket at {0}")]
    Absent(PathBuf),
    /// The socket is there but this user may not connect (it is root's).
    #[error("{0}: permission denied (the kubelet's socket is root's: run partop as root)")]
    Denied(PathBuf),
    /// No answer within the limit.
    #[error("{0}: no answer within {1:?}")]
    Timeout(PathBuf, Duration),
    /// The kubelet answered with an error or something that is not the API.
    #[error("{0}: {1}")]
    Bad(PathBuf, String),
}

/// A PodResources client on one socket: connects for each call, each bounded by `limit`.
#[derive(Debug, Clone)]
pub struct Client {
    /// The socket.
    pub socket: PathBuf,
    /// Connect plus answer, per call.
    pub limit: Duration,
}

impl Client {
    /// A client of the socket at `socket`.
    pub fn new(socket: impl Into<PathBuf>, limit: Duration) -> Self {
        Self {
            socket: socket.into(),
            limit,
        }
    }

    /// `List`.
    pub async fn list(&self) -> Result<ListPodResourcesResponse, CallError> {
        self.call(LIST, ListPodResourcesRequest {}).await
    }

    /// `GetAllocatableResources`.
    pub async fn allocatable(&self) -> Result<AllocatableResourcesResponse, CallError> {
        self.call(ALLOCATABLE, AllocatableResourcesRequest {}).await
    }

    /// `Get`.
    pub async fn get(
        &self,
        namespace: &str,
        pod: &str,
    ) -> Result<GetPodResourcesResponse, CallError> {
        let req = GetPodResourcesRequest {
            pod_name: pod.to_string(),
            pod_namespace: namespace.to_string(),
        };
        self.call(GET, req).await
    }

    async fn call<Q, A>(&self, method: &'static str, req: Q) -> Result<A, CallError>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        match tokio::time::timeout(self.limit, self.call_unbounded(method, req)).await {
            Ok(r) => r,
            Err(_) => Err(CallError::Timeout(self.socket.clone(), self.limit)),
        }
    }

    async fn call_unbounded<Q, A>(&self, method: &'static str, req: Q) -> Result<A, CallError>
    where
        Q: prost::Message + Send + Sync + 'static,
        A: prost::Message + Default + Send + Sync + 'static,
    {
        // The socket is checked first so that a node without a kubelet costs one stat and the
        // reason is the file's, not a transport error's.
        let stream = connect(&self.socket).await?;
        let bad = |e: &dyn std::fmt::Display| CallError::Bad(self.socket.clone(), e.to_string());
        let mut stream = Some(stream);
        let channel = tonic::transport::Endpoint::from_static("http://kubelet.invalid")
            .connect_with_connector(tower::service_fn(move |_: http::Uri| {
                let s = stream.take();
                async move {
                    s.map(hyper_util::rt::TokioIo::new)
                        .ok_or_else(|| std::io::Error::other("one connection per call"))
                }
            }))
            .await
            .map_err(|e| bad(&e))?;
        let mut grpc =
            tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_ANSWER_BYTES);
        grpc.ready().await.map_err(|e| bad(&e))?;
        let codec = tonic_prost::ProstCodec::<Q, A>::default();
        grpc.unary(
            tonic::Request::new(req),
            http::uri::PathAndQuery::from_static(method),
            codec,
        )
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| bad(&format_args!("{:?}: {}", s.code(), s.message())))
    }
}

/// Connects to the socket, naming why not.
async fn connect(socket: &Path) -> Result<tokio::net::UnixStream, CallError> {
    tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                CallError::Absent(socket.to_path_buf())
            }
            std::io::ErrorKind::PermissionDenied => CallError::Denied(socket.to_path_buf()),
            _ => CallError::Bad(socket.to_path_buf(), e.to_string()),
        })
}

/// What a PodResources server answers (the simulator's kubelet twin).
pub trait Lister: Send + Sync + 'static {
    /// `List`.
    fn list(&self) -> ListPodResourcesResponse;
    /// `GetAllocatableResources`.
    fn allocatable(&self) -> AllocatableResourcesResponse;
    /// `Get`: None is NotFound.
    fn get(&self, namespace: &str, pod: &str) -> Option<PodResources>;
}

/// The PodResources service over a [`Lister`], for tonic's server.
#[derive(Debug)]
pub struct Server<T> {
    inner: Arc<T>,
}

impl<T> Clone for Server<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T: Lister> Server<T> {
    /// The service over `lister`.
    pub fn new(lister: T) -> Self {
        Self {
            inner: Arc::new(lister),
        }
    }
}

impl<T> tonic::server::NamedService for Server<T> {
    const NAME: &'static str = SERVICE;
}

type BoxFuture<R> = std::pin::Pin<Box<dyn std::future::Future<Output = R> + Send>>;

/// One method as a unary service: the request in, the lister's answer out.
fn unary<Q, A>(
    answer: impl Fn(Q) -> Result<A, tonic::Status> + Send + Clone + 'static,
) -> impl tonic::server::UnaryService<
    Q,
    Response = A,
    Future = std::future::Ready<Result<tonic::Response<A>, tonic::Status>>,
> + Send
+ 'static
where
    Q: Send + 'static,
    A: Send + 'static,
{
    tower::service_fn(move |req: tonic::Request<Q>| {
        std::future::ready(answer(req.into_inner()).map(tonic::Response::new))
    })
}

impl<T: Lister> tower::Service<http::Request<tonic::body::Body>> for Server<T> {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let lister = Arc::clone(&self.inner);
        match req.uri().path() {
            LIST => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
                    .max_decoding_message_size(MAX_ANSWER_BYTES);
                let svc = unary(move |_: ListPodResourcesRequest| Ok(lister.list()));
                Ok(grpc.unary(svc, req).await)
            }),
            ALLOCATABLE => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
                    .max_decoding_message_size(MAX_ANSWER_BYTES);
                let svc = unary(move |_: AllocatableResourcesRequest| Ok(lister.allocatable()));
                Ok(grpc.unary(svc, req).await)
            }),
            GET => Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default())
                    .max_decoding_message_size(MAX_ANSWER_BYTES);
                let svc = unary(move |q: GetPodResourcesRequest| {
                    lister
                        .get(&q.pod_namespace, &q.pod_name)
                        .map(|p| GetPodResourcesResponse {
                            pod_resources: Some(p),
                        })
                        .ok_or_else(|| {
                            tonic::Status::not_found(format!(
                                "pod {}/{} not found",
                                q.pod_namespace, q.pod_name
                            ))
                        })
                });
                Ok(grpc.unary(svc, req).await)
            }),
            other => {
                let status = tonic::Status::unimplemented(format!("no method {other}"));
                Box::pin(std::future::ready(Ok(status.into_http())))
            }
        }
    }
}

/// Serves `lister` on the unix socket at `socket` until `stop` resolves.
pub async fn serve<T: Lister>(
    lister: T,
    socket: &Path,
    stop: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    serve_on(lister, tokio::net::UnixListener::bind(socket)?, stop).await
}

/// Serves `lister` on a bound unix listener until `stop` resolves.
pub async fn serve_on<T: Lister>(
    lister: T,
    listener: tokio::net::UnixListener,
    stop: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
    // One service on the socket: no router (and no axum) needed.
    tonic::transport::Server::builder()
        .serve_with_incoming_shutdown(Server::new(lister), incoming, stop)
        .await
        .map_err(std::io::Error::other)
}
