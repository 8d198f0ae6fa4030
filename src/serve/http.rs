//! The HTTP side of `partop serve`: `/metrics`, `/snapshot`, `/events` (server-sent events),
//! `/-/healthy`, `/-/ready`. Every request is answered from the last published sample (a
//! watch channel the sampling loop fills), so a slow or hung source never blocks a scrape.
//! Read only: no endpoint changes anything; only GET and HEAD are accepted.
//!
//! Bounds, because an exporter is reachable by whatever can reach its port: a fixed number of
//! connections (past it, a small reserve answers the health endpoints only, the rest get 503 at
//! once), 16 KiB of request head, no request body, 5 s to send the head, 10 s for a whole
//! exchange (event streams excepted), one request per connection. Every connection's socket is
//! watched: a write the peer has not taken for the stall limit (30 s) cuts the connection, so a
//! client that stops reading an event stream gives its slot back; an idle stream sends a comment
//! line every half of that limit, so a peer that vanished is found the same way. hyper (HTTP/1.1
//! on tokio, the runtime partop already uses) does the protocol.

use super::metrics::{Exported, render, to_prometheus_text};
use crate::domain::findings::Finding;
use crate::domain::snapshot::Snapshot;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

/// One published sample and what was derived from it.
#[derive(Debug, Default)]
pub struct Published {
    /// The sample (None until the first).
    pub snap: Option<Arc<Snapshot>>,
    /// The findings tracker's view after it.
    pub findings: Vec<Finding>,
    /// A repartition unfinished on this node: fingerprint, step index, step key.
    pub apply: Option<(String, usize, String)>,
    /// `cluster_name` on the DME series (config.toml).
    pub cluster: String,
}

/// How the server is bounded and guarded.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Bytes of request head.
    pub max_head: usize,
    /// Time to receive the request head.
    pub head_timeout: Duration,
    /// Time for a whole exchange (not event streams).
    pub exchange_timeout: Duration,
    /// A connection whose peer takes none of what is written to it for this long is cut (an
    /// event stream whose reader stopped reading; idle streams send a comment every half).
    pub stream_stall: Duration,
    /// Connections past `max_connections` that are still read, to answer `/-/healthy` and
    /// `/-/ready` (anything else gets 503): a full server stays observable.
    pub health_reserve: usize,
    /// Bearer token every data endpoint requires (the health endpoints do not).
    pub token: Option<String>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 64,
            max_head: 16 * 1024,
            head_timeout: Duration::from_secs(5),
            exchange_timeout: Duration::from_secs(10),
            stream_stall: Duration::from_secs(30),
            health_reserve: 16,
            token: None,
        }
    }
}

/// Counters of the server itself, exported with the scrape.
#[derive(Debug, Default)]
pub struct Stats {
    /// CPU time of the last `/metrics` render, ns (the thread's own).
    pub last_render_cpu_ns: AtomicU64,
    /// The most a render took, ns.
    pub max_render_cpu_ns: AtomicU64,
    /// Series in the last scrape.
    pub last_series: AtomicU64,
    /// Connections past the limit (answered 503, or only a health probe served).
    pub refused: AtomicU64,
    /// Connections cut because their peer stopped taking what was written.
    pub stalled: AtomicU64,
}

type Body = BoxBody<Bytes, Infallible>;

fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.into())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The thread's own CPU time, ns (a render runs without awaiting, on one thread).
fn thread_cpu_ns() -> u64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD).map_or(0, |u| {
        let t = |tv: nix::sys::time::TimeVal| {
            u64::try_from(tv.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(tv.tv_usec()).unwrap_or(0) * 1000
        };
        t(u.user_time()) + t(u.system_time())
    })
}

/// Constant-time comparison (the token is a secret).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The snapshot document of docs/json.md with the findings, the sample's age and the node's
/// unfinished apply (`{fingerprint, step, key}` or null), on one line.
pub fn snapshot_json(p: &Published, now_ms: u64) -> Option<String> {
    let snap = p.snap.as_ref()?;
    let mut doc = crate::report::snapshot_document(snap, &p.findings, now_ms);
    if let Some(o) = doc.as_object_mut() {
        o.insert(
            "apply".into(),
            p.apply.as_ref().map_or(
                serde_json::Value::Null,
                |(f, i, k)| serde_json::json!({"fingerprint": f, "step": i, "key": k}),
            ),
        );
    }
    serde_json::to_string(&doc).ok()
}

struct Ctx {
    rx: watch::Receiver<Arc<Published>>,
    limits: Limits,
    stats: Arc<Stats>,
    version: &'static str,
}

fn metrics(ctx: &Ctx, req: &Request<Incoming>) -> Response<Body> {
    let p = Arc::clone(&ctx.rx.borrow());
    let now = crate::collect::clock::now_ms();
    let t0 = thread_cpu_ns();
    let (om, n) = render(&Exported {
        snap: p.snap.as_deref(),
        findings: &p.findings,
        apply: p.apply.clone(),
        now_ms: now,
        version: ctx.version,
        cluster: &p.cluster,
    });
    let open_metrics = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("application/openmetrics-text"));
    let mut body = if open_metrics {
        om
    } else {
        to_prometheus_text(&om)
    };
    let took = thread_cpu_ns().saturating_sub(t0);
    ctx.stats.last_render_cpu_ns.store(took, Ordering::Relaxed);
    ctx.stats
        .max_render_cpu_ns
        .fetch_max(took, Ordering::Relaxed);
    ctx.stats.last_series.store(n as u64, Ordering::Relaxed);
    // The server's own figures (from the previous render: this one is being measured), with
    // `hostname` as every series has.
    let host = super::metrics::escape(p.snap.as_ref().map_or("", |s| s.host.as_str()));
    let own = format!(
        "# HELP partop_scrape_render_cpu_seconds CPU time the last /metrics render took.\n# TYPE partop_scrape_render_cpu_seconds gauge\npartop_scrape_render_cpu_seconds{{hostname=\"{host}\"}} {}\n# HELP partop_scrape_series Series in the last scrape.\n# TYPE partop_scrape_series gauge\npartop_scrape_series{{hostname=\"{host}\"}} {n}\n# HELP partop_serve_refused_connections Connections past the connection limit since start (answered 503; health probes still served).\n# TYPE partop_serve_refused_connections gauge\npartop_serve_refused_connections{{hostname=\"{host}\"}} {}\n# HELP partop_serve_stalled_connections Connections cut since start because their peer stopped taking what was written.\n# TYPE partop_serve_stalled_connections gauge\npartop_serve_stalled_connections{{hostname=\"{host}\"}} {}\n",
        took as f64 / 1e9,
        ctx.stats.refused.load(Ordering::Relaxed),
        ctx.stats.stalled.load(Ordering::Relaxed)
    );
    if open_metrics {
        // Before the closing `# EOF`.
        let at = body.rfind("# EOF").unwrap_or(body.len());
        body.insert_str(at, &own);
    } else {
        body.push_str(&own);
    }
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(if open_metrics {
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        } else {
            "text/plain; version=0.0.4; charset=utf-8"
        }),
    );
    r
}

fn snapshot(ctx: &Ctx) -> Response<Body> {
    let p = Arc::clone(&ctx.rx.borrow());
    match snapshot_json(&p, crate::collect::clock::now_ms()) {
        Some(j) => {
            let mut r = Response::new(Full::new(Bytes::from(j)).boxed());
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        None => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "no sample yet: the first one is on its way\n",
        ),
    }
}

/// `/events`: the current sample at once, then one `snapshot` event per new sample; with no
/// sample for half the stall limit, a comment line (`: idle`). A reader that stops taking them
/// is cut by the connection's write watch ([`Watched`]), not here.
fn events(ctx: &Ctx, summary: bool) -> Response<Body> {
    let mut rx = ctx.rx.clone();
    let idle = (ctx.limits.stream_stall / 2).max(Duration::from_millis(100));
    let (tx, out) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(2);
    tokio::spawn(async move {
        let mut first = true;
        loop {
            if !first {
                match tokio::time::timeout(idle, rx.changed()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return,
                    Err(_) => {
                        // Written so a vanished peer is found by the write watch as a
                        // stalled one is; readers skip comment lines (SSE).
                        if tx
                            .send(Ok(Frame::data(Bytes::from_static(b": idle\n\n"))))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        continue;
                    }
                }
            }
            first = false;
            let p = Arc::clone(&rx.borrow_and_update());
            let j = if summary {
                p.snap
                    .as_ref()
                    .and_then(|s| serde_json::to_string(&super::summary(s, &p)).ok())
            } else {
                snapshot_json(&p, crate::collect::clock::now_ms())
            };
            let Some(j) = j else {
                continue;
            };
            let id = p.snap.as_ref().map_or(0, |s| s.generation);
            let frame = Frame::data(Bytes::from(format!(
                "event: snapshot\nid: {id}\ndata: {j}\n\n"
            )));
            // Gone when the connection is: cut for a stalled reader, or closed by the peer.
            if tx.send(Ok(frame)).await.is_err() {
                return;
            }
        }
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(Recv(out))));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// An mpsc receiver as a stream (one adapter; not worth another crate).
struct Recv<T>(tokio::sync::mpsc::Receiver<T>);

impl<T> futures_core::Stream for Recv<T> {
    type Item = T;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<T>> {
        self.0.poll_recv(cx)
    }
}

/// A connection's socket with a write watch: when did a write start waiting for the peer to take
/// bytes (ms on the watch's own clock, 0 when none waits). A peer that stops reading fills the
/// kernel's buffers, hyper's writes then wait, and the connection is cut once that wait passes
/// the stall limit, whatever the response is (an event stream, a large body).
struct Watched {
    io: tokio::net::TcpStream,
    watch: Arc<WriteWatch>,
}

/// Shared between the socket (which marks) and the connection's task (which judges).
struct WriteWatch {
    epoch: std::time::Instant,
    blocked_since_ms: AtomicU64,
}

impl WriteWatch {
    fn new() -> Self {
        Self {
            epoch: std::time::Instant::now(),
            blocked_since_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        // +1: 0 means "no write waits".
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX) + 1
    }

    /// Marks a write's outcome: waiting (kept from its first wait) or done.
    fn mark<T>(&self, p: &std::task::Poll<T>) {
        if p.is_pending() {
            let _ = self.blocked_since_ms.compare_exchange(
                0,
                self.now_ms(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        } else {
            self.blocked_since_ms.store(0, Ordering::Relaxed);
        }
    }

    /// How long the current write has waited for the peer.
    fn blocked_for(&self) -> Duration {
        match self.blocked_since_ms.load(Ordering::Relaxed) {
            0 => Duration::ZERO,
            t => Duration::from_millis(self.now_ms().saturating_sub(t)),
        }
    }
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let p = std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch.mark(&p);
        p
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let p = std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch.mark(&p);
        p
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let p = std::pin::Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch.mark(&p);
        p
    }
}

/// The bearer token of an `Authorization` value: the scheme compared without regard to case
/// (RFC 7235 §2.1), the token after one or more spaces.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// Which requests a connection may make: all, or (past the connection limit) the health
/// endpoints only.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lane {
    Full,
    HealthOnly,
}

fn route(ctx: &Ctx, req: &Request<Incoming>, streaming: &AtomicBool, lane: Lane) -> Response<Body> {
    let path = req.uri().path();
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "partop serve is read only: GET or HEAD\n",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    // No request body is read, ever: a request that announces one is refused unread.
    let has_body = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() != "0")
        || req.headers().contains_key(header::TRANSFER_ENCODING);
    if has_body {
        return text(
            StatusCode::PAYLOAD_TOO_LARGE,
            "partop serve takes no request body\n",
        );
    }
    match path {
        "/-/healthy" => return text(StatusCode::OK, "partop serve is healthy\n"),
        "/-/ready" => {
            return if ctx.rx.borrow().snap.is_some() {
                text(StatusCode::OK, "partop serve is ready\n")
            } else {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not ready: waiting for the first sample with the GPUs' identity\n",
                )
            };
        }
        _ => {}
    }
    if lane == Lane::HealthOnly {
        return text(StatusCode::SERVICE_UNAVAILABLE, TOO_MANY);
    }
    if let Some(tok) = &ctx.limits.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .unwrap_or("");
        if !same(given.trim().as_bytes(), tok.as_bytes()) {
            let mut r = text(
                StatusCode::UNAUTHORIZED,
                "a bearer token is required (Authorization: Bearer …)\n",
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"partop\""),
            );
            return r;
        }
    }
    match path {
        "/metrics" => metrics(ctx, req),
        "/snapshot" => snapshot(ctx),
        "/events" => {
            streaming.store(true, Ordering::Relaxed);
            // `?summary=1`: one fleet row per sample instead of the whole document.
            let summary = req
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|kv| kv == "summary=1"));
            events(ctx, summary)
        }
        "/" => text(
            StatusCode::OK,
            "partop serve: /metrics (Prometheus; OpenMetrics when asked), /snapshot (JSON with findings), /events (server-sent events), /-/healthy, /-/ready\n",
        ),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// What a request past the connection limit is told.
const TOO_MANY: &str = "too many connections to partop serve; retry\n";

/// Serves on `listener` until `stop` resolves; in-flight exchanges get a moment to finish.
pub async fn serve(
    listener: TcpListener,
    rx: watch::Receiver<Arc<Published>>,
    limits: Limits,
    stats: Arc<Stats>,
    version: &'static str,
    stop: impl std::future::Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let reserve = Arc::new(Semaphore::new(limits.health_reserve));
    let ctx = Arc::new(Ctx {
        rx,
        limits,
        stats,
        version,
    });
    tokio::pin!(stop);
    loop {
        let (mut stream, peer) = tokio::select! {
            () = &mut stop => break,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: say so, wait, go on.
                    log::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (permit, lane) = match Arc::clone(&permits).try_acquire_owned() {
            Ok(p) => (p, Lane::Full),
            Err(_) => {
                ctx.stats.refused.fetch_add(1, Ordering::Relaxed);
                // Past the limit: a health probe is still answered from the reserve.
                if let Ok(p) = Arc::clone(&reserve).try_acquire_owned() {
                    (p, Lane::HealthOnly)
                } else {
                    tokio::spawn(async move {
                        let head = format!(
                            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{TOO_MANY}",
                            TOO_MANY.len()
                        );
                        let _ = tokio::time::timeout(
                            Duration::from_secs(1),
                            stream.write_all(head.as_bytes()),
                        )
                        .await;
                    });
                    continue;
                }
            }
        };
        let ctx = Arc::clone(&ctx);
        tokio::spawn(connection(stream, peer, ctx, permit, lane));
    }
}

/// One connection: one exchange within the head and exchange limits (an event stream
/// excepted), cut at any time when its peer stops taking what is written ([`Watched`]).
async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    ctx: Arc<Ctx>,
    _permit: tokio::sync::OwnedSemaphorePermit,
    lane: Lane,
) {
    let streaming = Arc::new(AtomicBool::new(false));
    let svc_ctx = Arc::clone(&ctx);
    let flag = Arc::clone(&streaming);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let r = route(&svc_ctx, &req, &flag, lane);
        async move { Ok::<_, Infallible>(r) }
    });
    // A reserve connection holds a slot meant for probes: it gets little time.
    let (head_timeout, exchange_timeout) = match lane {
        Lane::Full => (ctx.limits.head_timeout, ctx.limits.exchange_timeout),
        Lane::HealthOnly => (
            ctx.limits.head_timeout.min(Duration::from_secs(2)),
            ctx.limits.exchange_timeout.min(Duration::from_secs(2)),
        ),
    };
    let watch = Arc::new(WriteWatch::new());
    let io = Watched {
        io: stream,
        watch: Arc::clone(&watch),
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(head_timeout)
        .max_buf_size(ctx.limits.max_head.max(8192))
        .keep_alive(false)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::pin!(conn);
    let limit = tokio::time::sleep(exchange_timeout);
    tokio::pin!(limit);
    let stall = ctx.limits.stream_stall;
    let mut check =
        tokio::time::interval((stall / 4).clamp(Duration::from_millis(50), Duration::from_secs(1)));
    let mut timed = true;
    loop {
        tokio::select! {
            r = &mut conn => {
                if let Err(e) = r {
                    log::debug!("{peer}: {e}");
                }
                return;
            }
            () = &mut limit, if timed => {
                // An event stream is exempt: the write watch bounds its reader instead.
                if !streaming.load(Ordering::Relaxed) {
                    log::debug!("{peer}: exchange over its time limit, closed");
                    return;
                }
                timed = false;
            }
            _ = check.tick() => {
                let waited = watch.blocked_for();
                if waited >= stall {
                    ctx.stats.stalled.fetch_add(1, Ordering::Relaxed);
                    log::info!(
                        "{peer}: took nothing written to it for {}s: connection cut",
                        waited.as_secs()
                    );
                    return;
                }
            }
        }
    }
}
