//! `barge serve`: an HTTP(S) upload receiver. Each upload's body is a barge archive,
//! streamed into its own confined lander child (`barge::confine`) that lands it as a new
//! directory under DEST, which appears whole or not at all.
//!
//! The HTTP stack (tokio, hyper, rustls with the ring provider) lives here in the front
//! end; the library stays free of it. `tls.rs` makes the server's TLS configuration,
//! `token.rs` the bearer token, `crate::peers` shares the connections out by client address,
//! `http.rs` answers requests and `upload.rs` lands a body.

/// Writes one line of the server's log on stderr, in one write: the time (UTC, to the
/// second), `barge serve:` and the text.
macro_rules! serve_log {
    ($($arg:tt)*) => {
        $crate::report::to_stderr(&format!(
            "{} barge serve: {}\n",
            $crate::serve::now(),
            format_args!($($arg)*)
        ))
    };
}

mod http;
mod quota;
mod tls;
mod token;
mod upload;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use barge::interrupt::Cancel;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustix::process::Signal;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{watch, Semaphore};

use crate::report::{human_bytes, shown_path, Exit};
use crate::{parse_limit, Limit};

/// The command line of `barge serve`.
#[derive(clap::Args, Debug)]
#[command(after_help = SERVE_HELP)]
pub struct ServeArgs {
    /// The directory uploads land in, each as a new directory (created when missing).
    dest: PathBuf,
    /// The address and port to listen on; port 0 lets the system choose. By default this
    /// host only: `0.0.0.0:8443` (or `[::]:8443`) takes uploads from other hosts, and the
    /// address of each interface is printed on stderr.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8443")]
    listen: SocketAddr,
    /// The certificate chain (PEM) to serve; without it a self-signed certificate is made
    /// at start for localhost, this host's name and every address printed, written to
    /// $XDG_RUNTIME_DIR/barge/serve-PORT.pem (or $TMPDIR/barge-UID/) for `curl --cacert`
    /// until the server stops, and its path and SHA-256 fingerprint printed on stderr.
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,
    /// The private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// Serve plain HTTP, without TLS: behind a TLS proxy, or for curl on loopback (on any
    /// other address a warning says that the token and uploads cross the network in the
    /// clear). Browsers stream a request body only over HTTP/2, which they speak only over
    /// TLS: over plain HTTP the page builds the whole archive in memory (a Blob) before it
    /// uploads it.
    #[arg(long, conflicts_with_all = ["cert", "key"])]
    plain_http: bool,
    /// Read the bearer token from FILE (its first line), which only its owner may read.
    /// Without it, the token is taken from the BARGE_TOKEN environment variable, or else
    /// generated and printed once on stdout as the page's address, in the URL fragment.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// Refuse an upload of more than N bytes (the body, and so the file content), e.g. 500M
    /// or 2G (K, M, G and T count in 1024s): 413 before reading when the request says its
    /// length.
    #[arg(long, value_name = "N", default_value = "4G", value_parser = parse_limit)]
    max_bytes: Limit,
    /// Refuse an upload of more than N entries; 'none' for no limit.
    #[arg(long, value_name = "N", default_value = "1M", value_parser = parse_limit)]
    max_entries: Limit,
    /// Refuse an upload nested deeper than this many directories.
    #[arg(long, value_name = "N", default_value_t = barge::format::DEFAULT_MAX_DEPTH)]
    max_depth: usize,
    /// Let DEST take at most N bytes of disk in all, e.g. 100G, every entry charged at least a
    /// 4 KiB block (a file its content, a symlink its target, rounded up to blocks, and its
    /// xattrs): counted at start, then each upload as it lands. An upload that would pass it
    /// is refused (507) and leaves nothing. 'none' (the default) for no quota.
    #[arg(long, value_name = "N", default_value = "none", value_parser = parse_limit)]
    quota: Limit,
    /// Land at most N uploads at once; more are refused with 503.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    max_uploads: u32,
    /// Keep at most N connections open at once, with or without a token (each holds an fd
    /// and some memory); more wait in the listen queue until one closes. One client address
    /// (an IPv6 one by its /64) may hold a quarter of them (at least one): its connections
    /// beyond that are closed at once.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Give up on an upload whose body sends nothing for this many seconds (408; nothing is
    /// kept), and close a connection (HTTP/1.1 or HTTP/2) with no request in progress for as
    /// long; a TLS handshake must end within 10 s, or this when shorter.
    #[arg(long, alias = "idle-timeout", value_name = "SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    /// Allow uploads from pages of ORIGIN (its scheme, host and port, as browsers send it in
    /// their Origin header; repeatable): answer their CORS preflights and add the CORS
    /// headers for them. None by default.
    #[arg(long, value_name = "ORIGIN")]
    cors_origin: Vec<String>,
    /// Print each upload's result as one JSON line on stdout (and the page's addresses as
    /// {"url": ..., "urls": [...]} when the token is generated): the answer's body, and for
    /// a refused upload its "status" too; one whose client closed the connection before the
    /// answer gets {"status": 499, "error": ...}.
    #[arg(long)]
    json: bool,
}

/// What `barge serve --help` adds after the options.
const SERVE_HELP: &str = "\
API (every upload needs the header 'Authorization: Bearer TOKEN'):

GET /: the upload page. GET /barge-archive.js: the barge-archive package for browsers.
GET /upload: 204 when the token is right, 401 otherwise (the page asks before it packs).

POST /upload: the body (Content-Type: application/octet-stream), a barge archive, lands as a
new directory named by the server (upload-20261124T101500Z-1); PUT /upload/NAME lands it as
the new directory NAME (one path component; 409 when it exists).

Answers are JSON: {\"name\", \"entries\", \"files\", \"bytes\", \"seconds\"}, or {\"error\"} with
400 (a bad archive: the decoder's message), 401 (no or a wrong token), 404, 408 (the body
stalled), 409, 413 (over --max-bytes), 415, 503 (--max-uploads reached, or stopping), 507
(over --quota), 500. An error the archive caused (400, 413, 507 found while landing) adds
the fields of barge's JSON errors: \"kind\", the decoder's \"code\", the archive \"offset\" and
the entry's \"path\" in the upload.
An upload that fails leaves nothing under DEST.

Each upload lands in a child process confined to its new directory (a user namespace
chrooted there), as a user other than root would: no owners, setuid or setgid bits,
devices or trusted attributes, whoever runs the server.

One line per request on stderr, after the time (UTC). SIGINT or SIGTERM: stop accepting, let running uploads
finish, exit; a second one cancels them (nothing of them is kept).

Example: barge serve /srv/uploads --listen 0.0.0.0:8443 --cert cert.pem --key key.pem
then open the printed address in a browser, or: curl --cacert cert.pem -H \"Authorization: Bearer \
$TOKEN\" -H 'Content-Type: application/octet-stream' --data-binary @tree.barge https://HOST:8443/upload";

impl ServeArgs {
    /// With `--json`.
    pub fn json(&self) -> bool {
        self.json
    }
}

/// Runs the server until a stop signal.
pub fn serve(args: ServeArgs, stopped: &Cancel) -> anyhow::Result<Exit> {
    let token = match &args.token_file {
        Some(file) => Some(token::Token::from_file(file)?),
        None => token::Token::from_env()?,
    };
    let ips = reachable(args.listen.ip());
    let tls = match (args.plain_http, &args.cert, &args.key) {
        (true, ..) => None,
        (false, Some(cert), Some(key)) => Some(tls::Tls::from_files(cert, key)?),
        (false, ..) => Some(tls::Tls::generated(&ips)?),
    };
    let shown = shown_path(&args.dest);
    // A DEST created here gets 0o777 under the umask, as `mkdir -p` gives it.
    let prepared = barge::root::prepare_dest(&args.dest, barge::root::process_umask());
    let dest = prepared
        .with_context(|| format!("cannot prepare {shown}"))?
        .path;
    // Counted before serving (not on the server's threads): what DEST holds already.
    let quota = args.quota.0.map(|max| {
        let used = quota::space_below(&dest);
        serve_log!(
            "quota {}, of which DEST holds {}",
            human_bytes(max),
            human_bytes(used)
        );
        barge::uploads::Quota::new(max, used)
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the server's threads")?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let address = listener.local_addr()?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let urls: Vec<String> = ips
            .iter()
            .map(|&ip| format!("{scheme}://{}/", SocketAddr::new(ip, address.port())))
            .collect();
        let (token, generated) = match token {
            Some(token) => (token, false),
            None => (token::Token::generate(), true),
        };
        let shown_dest = shown_path(&dest);
        match &tls {
            Some(tls) => serve_log!(
                "listening on {} (TLS, HTTP/2 and HTTP/1.1; certificate SHA-256 {}), landing \
                 uploads in {shown_dest}",
                urls[0],
                tls.fingerprint,
            ),
            None => serve_log!(
                "listening on {} (plain HTTP), landing uploads in {shown_dest}",
                urls[0]
            ),
        }
        if urls.len() > 1 {
            serve_log!("also listening on {}", urls[1..].join(" "));
        }
        if tls.is_none() && !address.ip().is_loopback() {
            serve_log!(
                "warning: plain HTTP on {address}: the token and every upload cross the \
                 network unencrypted; serve TLS (without --plain-http) unless a TLS proxy on \
                 this host is the only client"
            );
        }
        // The generated certificate, for clients to trust (curl --cacert FILE).
        let cert_file = match tls.as_ref().and_then(|tls| tls.generated_pem.as_deref()) {
            Some(pem) => match tls::write_cert(pem, address.port()) {
                Ok(file) => {
                    serve_log!(
                        "the generated certificate is in {} (curl --cacert {0})",
                        shown_path(&file)
                    );
                    Some(file)
                }
                Err(e) => {
                    serve_log!("warning: cannot write the generated certificate: {e:#}");
                    None
                }
            },
            None => None,
        };
        if generated {
            token.print_urls(&urls, args.json);
        }
        let server = Arc::new(http::Server::new(&args, dest, token, quota));
        let tls = tls.map(|t| t.acceptor);
        let ran = run(listener, tls, server, args.max_connections, stopped).await;
        // It names a certificate no server holds any more.
        if let Some(file) = cert_file {
            let _ = std::fs::remove_file(file);
        }
        ran
    })?;
    Ok(Exit::Success)
}

/// The time for the log: `YYYY-MM-DDTHH:MM:SSZ`.
pub(crate) fn now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{}Z", crate::list::utc(now as i64).replace(' ', "T"))
}

/// The addresses a client may reach the server at when it listens on `listen`: that
/// address, or for the unspecified one the loopback address, then those of every interface
/// (IPv6 ones only on `[::]`, and no link-local IPv6 one, which a URL cannot name without
/// its zone): `hostname -I`'s.
fn reachable(listen: IpAddr) -> Vec<IpAddr> {
    if !listen.is_unspecified() {
        return vec![listen];
    }
    let mut ips: Vec<IpAddr> = match listen {
        IpAddr::V4(_) => vec![Ipv4Addr::LOCALHOST.into()],
        IpAddr::V6(_) => vec![Ipv6Addr::LOCALHOST.into(), Ipv4Addr::LOCALHOST.into()],
    };
    let interfaces = if_addrs::get_if_addrs().unwrap_or_else(|e| {
        serve_log!("warning: cannot list this host's addresses: {e}");
        Vec::new()
    });
    for interface in interfaces {
        let ip = interface.ip();
        let wanted = match ip {
            IpAddr::V4(_) => true,
            IpAddr::V6(v6) => listen.is_ipv6() && !v6.is_unicast_link_local(),
        };
        if wanted && !ip.is_loopback() && !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    ips
}

/// How much of an HTTP/2 upload may be on its way unread.
const STREAM_WINDOW: u32 = 4 << 20;

/// How long a client has for its TLS handshake (or the idle timeout, when shorter).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts connections, at most `max_connections` at once and a share of them per client
/// address, until SIGINT or SIGTERM, then waits for the open ones (a second signal stops
/// waiting: the uploads still running are cancelled).
async fn run(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    server: Arc<http::Server>,
    max_connections: u32,
    stopped: &Cancel,
) -> anyhow::Result<()> {
    let connections = Arc::new(Semaphore::new(max_connections as usize));
    let peers = barge::net::peers::Peers::quarter_of(max_connections);
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(20))
        // Hyper's default windows (64 KiB a stream) and its adaptive window hold an upload
        // far below HTTP/1.1's speed (docs/BENCHMARKS.md, "Design measurements").
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(4 * STREAM_WINDOW)
        .max_frame_size(1 << 20)
        .max_concurrent_streams(64);
    // Each connection holds a receiver; a change asks them to close once their requests are
    // answered. (hyper-util's GracefulShutdown cannot also close a connection on its own
    // idle timeout.)
    let (stopping, _) = watch::channel(());
    let handshake = HANDSHAKE_TIMEOUT.min(server.idle);
    let stop = loop {
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => permit.expect("never closed"),
            _ = interrupt.recv() => break Signal::INT,
            _ = terminate.recv() => break Signal::TERM,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of fds, or a connection reset before it was accepted.
                    serve_log!("warning: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = interrupt.recv() => break Signal::INT,
            _ = terminate.recv() => break Signal::TERM,
        };
        let Some(place) = peers.take(peer.ip()) else {
            serve_log!(
                "{peer}: closed: this address holds its share of connections ({})",
                peers.share
            );
            continue;
        };
        let (builder, server, tls, stop) = (
            builder.clone(),
            server.clone(),
            tls.clone(),
            stopping.subscribe(),
        );
        tokio::spawn(async move {
            let _open = (permit, place);
            let Some(tls) = tls else {
                return serve_connection(&builder, stop, stream, peer, server).await;
            };
            match tokio::time::timeout(handshake, tls.accept(stream)).await {
                Ok(Ok(stream)) => serve_connection(&builder, stop, stream, peer, server).await,
                // A client that does not trust the certificate, or speaks no TLS.
                Ok(Err(e)) => serve_log!("{peer}: TLS handshake failed: {e}"),
                Err(_) => serve_log!("{peer}: TLS handshake timed out"),
            }
        });
    };
    // main ends the process by this signal, as every barge command does.
    stopped.stop_by(stop.as_raw());
    drop(listener);
    let open = stopping.receiver_count();
    if open > 0 {
        serve_log!(
            "stopping; waiting for {open} connection(s) (send the signal again \
             to cancel running uploads)"
        );
    }
    stopping.send_replace(());
    let shutdown = stopping.closed();
    tokio::pin!(shutdown);
    tokio::select! {
        () = &mut shutdown => return Ok(()),
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    server.cancel();
    // Cancelled uploads remove what they staged, then answer (503).
    server.wait_for_uploads().await;
    let _ = tokio::time::timeout(Duration::from_secs(2), shutdown).await;
    Ok(())
}

/// Serves HTTP/1.1 or HTTP/2 (whichever the client speaks) on one connection until the
/// client closes it, `stop` changes (then once its requests are answered), or it has had no
/// request in progress for the idle timeout (then within as long again).
async fn serve_connection<I>(
    builder: &auto::Builder<TokioExecutor>,
    mut stop: watch::Receiver<()>,
    stream: I,
    peer: SocketAddr,
    server: Arc<http::Server>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let idle = server.idle;
    // hyper has no idle timeout for HTTP/2 (a client that answers its PINGs stays
    // forever), so the service counts the requests in progress.
    let (requests, mut changes) = watch::channel(0usize);
    let service = hyper::service::service_fn(move |request| {
        let (server, request_open) = (server.clone(), InProgress::new(&requests));
        async move {
            let _open = request_open;
            Ok::<_, std::convert::Infallible>(server.handle(peer, request).await)
        }
    });
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    // A client that goes away mid-request is the upload's concern (it says so); here it
    // is no news.
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = stop.changed() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
        () = idle_for(&mut changes, idle) => {
            // HTTP/2: GOAWAY, then closed once the client answers its PING.
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(idle, connection).await;
        }
    }
}

/// A request in progress, counted in its connection's `requests` until dropped.
struct InProgress(watch::Sender<usize>);

impl InProgress {
    fn new(requests: &watch::Sender<usize>) -> InProgress {
        requests.send_modify(|n| *n += 1);
        InProgress(requests.clone())
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// Returns once the count `requests` watches has stayed 0 for `idle`.
async fn idle_for(requests: &mut watch::Receiver<usize>, idle: Duration) {
    // (An error: every sender is gone, and so is the connection.)
    while requests.wait_for(|&n| n == 0).await.is_ok() {
        match tokio::time::timeout(idle, requests.changed()).await {
            Ok(Ok(())) => {} // a request came: wait for it to end
            _ => return,
        }
    }
}
