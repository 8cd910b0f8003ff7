//! Answering requests: the page, the browser bundle, uploads, CORS, and the log line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use barge::uploads::{one_component, Quota, Refused, Uploads};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::sync::{watch, Semaphore};

use super::quota;
use super::token::Token;
use super::upload::{over_limit, Refusal, Upload};
use super::ServeArgs;
use crate::report::{error_fields, human_bytes, log_line};

/// The upload page.
const PAGE: &str = include_str!("page.html");

/// The barge-archive package's browser API as one ES module, which the page imports. It is
/// generated from js/src by `node js/tools/bundle.mjs` and committed, so that `cargo build`
/// needs no node; a JS test fails when it is stale.
const BUNDLE: &str = include_str!("barge-archive.js");

/// The server's state, shared by every connection.
pub(super) struct Server {
    /// The names of uploads under DEST.
    uploads: Uploads,
    token: Token,
    limits: barge::format::Limits,
    max_body: Option<u64>,
    /// `--idle-timeout`.
    pub(super) idle: Duration,
    cors: Vec<String>,
    json: bool,
    /// One permit per upload that may land at once.
    slots: Arc<Semaphore>,
    max_uploads: u32,
    /// `--quota`: what DEST may still take.
    quota: Option<Arc<Quota>>,
    /// Turns true to cancel the uploads still running.
    stop: watch::Sender<bool>,
}

/// An answer, and what the log line says of it.
struct Reply {
    response: Response<Full<Bytes>>,
    note: String,
}

impl Server {
    pub(super) fn new(
        args: &ServeArgs,
        dest: PathBuf,
        token: Token,
        quota: Option<Arc<Quota>>,
    ) -> Server {
        Server {
            uploads: Uploads::new(dest),
            token,
            limits: barge::format::Limits {
                max_depth: args.max_depth,
                max_entries: args.max_entries.0,
                max_bytes: args.max_bytes.0,
                max_space: None,
                zero_padding: false,
            },
            max_body: args.max_bytes.0,
            idle: Duration::from_secs(args.idle_timeout),
            cors: args.cors_origin.clone(),
            json: args.json,
            slots: Arc::new(Semaphore::new(args.max_uploads as usize)),
            max_uploads: args.max_uploads,
            quota,
            stop: watch::Sender::new(false),
        }
    }

    /// Cancels the uploads still running (nothing of them is kept).
    pub(super) fn cancel(&self) {
        self.stop.send_replace(true);
    }

    /// Returns once no upload is landing, and none can start.
    pub(super) async fn wait_for_uploads(&self) {
        let _all = self.slots.acquire_many(self.max_uploads).await;
    }

    /// Answers `request` from `peer`, and logs it.
    pub(super) async fn handle(
        &self,
        peer: SocketAddr,
        request: Request<Incoming>,
    ) -> Response<Full<Bytes>> {
        let start = Instant::now();
        let (request, mut body) = request.into_parts();
        let path = request.uri.path();
        let mut log = LogLine {
            line: format!("barge serve: {peer} {} {path}", request.method),
            start,
            done: false,
            json: self.json && upload_of(&request.method, path).is_some(),
        };
        let Reply { mut response, note } = self.route(&request, &mut body, start).await;
        // Whatever the answer, the client may still be sending.
        drain(body);
        let origin = request.headers.get(header::ORIGIN).filter(|origin| {
            self.cors
                .iter()
                .any(|allowed| allowed.as_bytes() == origin.as_bytes())
        });
        if let Some(origin) = origin {
            let headers = response.headers_mut();
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
            headers.insert(header::VARY, HeaderValue::from_static("origin"));
        }
        log.done(response.status().as_str(), &note);
        response
    }

    async fn route(&self, request: &Parts, body: &mut Incoming, start: Instant) -> Reply {
        let path = request.uri.path();
        if let Some(name) = upload_of(&request.method, path) {
            return self.upload(request, body, name, start).await;
        }
        match (&request.method, path) {
            (&Method::OPTIONS, _) => self.preflight(request),
            (&Method::GET, "/") => file(PAGE, "text/html; charset=utf-8"),
            (&Method::GET, "/barge-archive.js") => file(BUNDLE, "text/javascript; charset=utf-8"),
            _ if path == "/upload" || path.starts_with("/upload/") => {
                let mut reply = error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "use POST /upload or PUT /upload/NAME",
                );
                let allow = HeaderValue::from_static("POST, PUT, OPTIONS");
                reply.response.headers_mut().insert(header::ALLOW, allow);
                reply
            }
            _ => error(
                StatusCode::NOT_FOUND,
                "no such page: the API is POST /upload and PUT /upload/NAME",
            ),
        }
    }

    /// A CORS preflight: allowed for the `--cors-origin` origins only.
    fn preflight(&self, request: &Parts) -> Reply {
        let allowed = request
            .headers
            .get(header::ORIGIN)
            .is_some_and(|origin| self.cors.iter().any(|o| o.as_bytes() == origin.as_bytes()));
        if !allowed {
            return error(
                StatusCode::FORBIDDEN,
                "this origin may not upload here (see barge serve --cors-origin)",
            );
        }
        let mut response = Response::new(Full::default());
        *response.status_mut() = StatusCode::NO_CONTENT;
        let headers = response.headers_mut();
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("POST, PUT"),
        );
        headers.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type"),
        );
        headers.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        Reply {
            response,
            note: "preflight allowed".into(),
        }
    }

    /// An upload: checks, in this order, the token, the type, the name, the length and a
    /// free slot, then lands the body.
    async fn upload(
        &self,
        request: &Parts,
        body: &mut Incoming,
        name: Option<&str>,
        start: Instant,
    ) -> Reply {
        let landed = self.land(&request.headers, body, name, start).await;
        match landed {
            Ok(reply) => reply,
            Err(refusal) => {
                let fields = error_fields(&refusal.message, refusal.cause.as_ref());
                let mut reply = json_reply(refusal.status, &Value::Object(fields.clone()));
                reply.note = refusal.message.clone();
                if let Some(detail) = refusal.detail {
                    reply.note = detail;
                }
                if refusal.status == StatusCode::UNAUTHORIZED {
                    let challenge = HeaderValue::from_static("Bearer");
                    reply
                        .response
                        .headers_mut()
                        .insert(header::WWW_AUTHENTICATE, challenge);
                }
                if self.json {
                    let mut line = fields;
                    line.insert("status".into(), json!(refusal.status.as_u16()));
                    println!("{}", Value::Object(line));
                }
                reply
            }
        }
    }

    async fn land(
        &self,
        headers: &hyper::HeaderMap,
        body: &mut Incoming,
        name: Option<&str>,
        start: Instant,
    ) -> Result<Reply, Refusal> {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| bearer(value.as_bytes()));
        if !presented.is_some_and(|token| self.token.matches(token)) {
            return Err(Refusal::new(
                StatusCode::UNAUTHORIZED,
                "a missing or wrong token: send the header 'Authorization: Bearer TOKEN'",
            ));
        }
        let media = headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .map(|media| media.trim().to_ascii_lowercase());
        if !matches!(
            media.as_deref(),
            Some("application/octet-stream" | "application/x-barge")
        ) {
            return Err(Refusal::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "the body must be a barge archive sent as Content-Type: application/octet-stream",
            ));
        }
        let name = name.map(decode_name).transpose()?;
        if let (Some(max), Some(length)) = (self.max_body, body.size_hint().exact()) {
            if length > max {
                return Err(Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, over_limit(max)));
            }
        }
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            return Err(Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the server is busy landing {} uploads (or stopping); try again later",
                    self.max_uploads
                ),
            ));
        };
        // What the quota lets this upload take: no more than a body of its length (or of
        // --max-bytes) can be charged, and its own directory.
        let mut limits = self.limits;
        let mut share = match &self.quota {
            None => None,
            Some(quota) => {
                let length = body.size_hint().exact().or(self.max_body);
                let Some(share) = quota.share(length) else {
                    return Err(Refusal::new(
                        StatusCode::INSUFFICIENT_STORAGE,
                        quota_full(quota),
                    ));
                };
                limits.max_space = Some(share.max_space());
                Some(share)
            }
        };
        let reserved = self.uploads.reserve(name, &stamp()).map_err(refused)?;
        let name = String::from_utf8_lossy(&reserved.name).into_owned();
        // The client's bytes: the log shows them escaped, as every name in a message.
        let shown = barge::error::escape_bytes(&reserved.name);
        let upload = Upload {
            target: reserved.target.clone(),
            limits,
            max_body: self.max_body,
            idle: self.idle,
            held: Box::new((slot, reserved)),
        };
        let target = upload.target.clone();
        let landed = match (upload.land(body, self.stop.subscribe()).await, &self.quota) {
            // Over the share the quota left it: say how much is left once it is back.
            (Err(refused), Some(quota)) if refused.status == StatusCode::INSUFFICIENT_STORAGE => {
                drop(share.take());
                return Err(Refusal {
                    message: quota_full(quota),
                    ..refused
                });
            }
            (landed, _) => landed?,
        };
        if let Some(mut share) = share {
            // What it takes, counted as a restart would count it.
            let space = tokio::task::spawn_blocking(move || quota::space_below(&target));
            share.keep(space.await.unwrap_or(share.bytes));
        }
        let summary = landed.summary;
        let entries =
            summary.dirs + summary.files + summary.symlinks + summary.hard_links + summary.specials;
        let seconds = start.elapsed().as_secs_f64();
        let result = json!({
            "name": name, "entries": entries, "files": summary.files, "bytes": summary.bytes,
            "seconds": seconds,
        });
        if self.json {
            println!("{result}");
        }
        let mut reply = json_reply(StatusCode::OK, &result);
        reply.note = format!("{shown}: {entries} entries, {}", human_bytes(summary.bytes));
        Ok(reply)
    }
}

/// The time for a name the server chooses: `YYYYMMDDTHHMMSS` (UTC).
fn stamp() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    crate::list::utc(now as i64)
        .chars()
        .filter_map(|c| match c {
            '-' | ':' => None,
            ' ' => Some('T'),
            c => Some(c),
        })
        .collect()
}

/// The answer for a name the upload policy refused.
fn refused(refused: Refused) -> Refusal {
    match refused {
        Refused::BadName(problem) => Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("the upload's name {problem}: it must be one path component"),
        ),
        Refused::Taken => Refusal::new(
            StatusCode::CONFLICT,
            "an upload of that name exists (or is landing now)",
        ),
    }
}

/// The upload `method` on `path` asks for: `Some(None)` for POST /upload (the server names
/// it), `Some(Some(NAME))` for PUT /upload/NAME; `None` for any other request.
fn upload_of<'p>(method: &Method, path: &'p str) -> Option<Option<&'p str>> {
    match *method {
        Method::POST if path == "/upload" => Some(None),
        Method::PUT => path.strip_prefix("/upload/").map(Some),
        _ => None,
    }
}

/// The answer for an upload that does not fit in what is left of `quota`.
fn quota_full(quota: &Quota) -> String {
    format!(
        "the upload does not fit in what is left of this server's quota of {} (--quota): \
         {} left besides the uploads landing now",
        human_bytes(quota.max),
        human_bytes(quota.left())
    )
}

/// The log line of a request, written when it is answered, or when the connection closed
/// before (hyper then drops the request's task; an upload's landing is cancelled).
struct LogLine {
    line: String,
    start: Instant,
    done: bool,
    /// An upload with `--json`: a closed connection gets its JSON line here too.
    json: bool,
}

impl LogLine {
    fn done(&mut self, status: &str, note: &str) {
        let seconds = self.start.elapsed().as_secs_f64();
        log_line!("{} {status} ({note}) {seconds:.3} s", self.line);
        self.done = true;
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        if !self.done {
            let why = "the client went away before the answer; nothing was kept";
            self.done("closed", why);
            if self.json {
                // 499: how web servers log a request its client closed.
                println!("{}", json!({"status": 499, "error": why}));
            }
        }
    }
}

/// Reads and drops what is left of a refused upload's body (up to [`DRAIN`] bytes, while it
/// keeps coming) after the answer went, so that a client still sending reads the answer
/// instead of a reset stream or connection.
fn drain(mut body: Incoming) {
    tokio::spawn(async move {
        let mut left = DRAIN;
        while let Ok(Some(Ok(frame))) =
            tokio::time::timeout(Duration::from_secs(5), body.frame()).await
        {
            left = left.saturating_sub(frame.data_ref().map_or(0, |data| data.len() as u64));
            if left == 0 {
                break;
            }
        }
    });
}

/// At most this much of a refused body is read.
const DRAIN: u64 = 64 << 20;

/// The token of an `Authorization: Bearer TOKEN` header (the scheme in any case).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(token)
}

/// The directory name of `PUT /upload/NAME`, percent-decoded: one path component.
fn decode_name(encoded: &str) -> Result<Vec<u8>, Refusal> {
    let name: Vec<u8> = percent_encoding::percent_decode_str(encoded).collect();
    one_component(&name).map_err(refused)?;
    Ok(name)
}

/// A file the binary holds.
fn file(text: &'static str, content_type: &'static str) -> Reply {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Everything the page loads comes from this server.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; \
             frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
        ),
    );
    Reply {
        response,
        note: format!("{} bytes", text.len()),
    }
}

/// A JSON error answer.
fn error(status: StatusCode, message: &str) -> Reply {
    let mut reply = json_reply(status, &json!({ "error": message }));
    reply.note = message.into();
    reply
}

fn json_reply(status: StatusCode, value: &Value) -> Reply {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Reply {
        response,
        note: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_component() {
        assert_eq!(decode_name("a%20b").unwrap(), b"a b");
        assert_eq!(decode_name("%C3%A9t%C3%A9").unwrap(), "été".as_bytes());
        assert_eq!(decode_name("%FF").unwrap(), b"\xff");
        for bad in ["", ".", "..", "%2E%2E", "a%2Fb", "a%00", &"n".repeat(256)] {
            assert_eq!(
                decode_name(bad).unwrap_err().status,
                StatusCode::BAD_REQUEST,
                "{bad}"
            );
        }
        assert!(decode_name(&"n".repeat(255)).is_ok());
    }

    #[test]
    fn bearer_takes_the_scheme_in_any_case() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bEARER abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bear"), None);
    }
}
