//! Landing one upload: the request body goes, chunk by chunk, into a confined lander child
//! landing a new directory, which it stages hidden and renames into place only when the
//! whole archive landed. A body that fails (cut off, stalled, over the limit, the server
//! stopping) cancels the child before it can see the archive's end, so nothing is kept.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use barge::confine::{ConfinedChild, ConfinedUnpack, Landed};
use barge::error::ConfinedKind;
use barge::format::{Limit, Limits};
use barge::unpack::Restore;
use barge::uploads::Reserved;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::StatusCode;
use tokio::sync::{mpsc, oneshot, watch};

use crate::report::human_bytes;

/// Why an upload was not landed: the answer's status and message (which name no server
/// path), the archive's error when the archive is at fault (its kind, code and offset go
/// into the answer), and for the log what the client is not told.
#[derive(Debug)]
pub(super) struct Refusal {
    pub(super) status: StatusCode,
    pub(super) message: String,
    pub(super) cause: Option<barge::Error>,
    pub(super) detail: Option<String>,
}

impl Refusal {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            message: message.into(),
            cause: None,
            detail: None,
        }
    }
}

/// One upload to land.
pub(super) struct Upload {
    /// The new directory.
    pub(super) target: PathBuf,
    pub(super) limits: Limits,
    /// The most bytes the body may have.
    pub(super) max_body: Option<u64>,
    /// How long the body may send nothing.
    pub(super) idle: Duration,
    /// Its name, held until the child is gone (told when it landed).
    pub(super) reserved: Reserved,
    /// Held until the child is gone: the upload's slot.
    pub(super) slot: Box<dyn Send>,
}

/// What goes to the thread feeding the child.
enum Chunk {
    Data(Bytes),
    /// The body ended: the child may see the archive's end. Without it (the sender
    /// dropped), the landing is cancelled.
    End,
}

impl Upload {
    /// Lands `body`, unless `stop` turns true first.
    pub(super) async fn land(
        self,
        body: &mut Incoming,
        mut stop: watch::Receiver<bool>,
    ) -> Result<Landed, Refusal> {
        let child = ConfinedUnpack::new(&self.target)
            .limits(self.limits)
            .restore(Restore::default().asked_only(true))
            .spawn()
            .map_err(|e| Refusal {
                detail: Some(e.to_string()),
                ..Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, CANNOT_LAND)
            })?;
        let (chunks, receiver) = mpsc::channel(8);
        let (done, result) = oneshot::channel();
        let (reserved, slot) = (self.reserved, self.slot);
        tokio::task::spawn_blocking(move || {
            let landed = feed(child, receiver);
            if landed.is_ok() {
                reserved.landed();
            }
            drop((reserved, slot));
            let _ = done.send(landed);
        });
        let mut received = 0u64;
        let failed = loop {
            let frame = tokio::select! {
                frame = tokio::time::timeout(self.idle, body.frame()) => frame,
                _ = stop.wait_for(|stop| *stop) => {
                    break Some(Refusal::new(StatusCode::SERVICE_UNAVAILABLE, STOPPING));
                }
            };
            let data = match frame {
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => data,
                    Err(_) => continue, // trailers
                },
                Ok(None) => break None,
                Ok(Some(Err(e))) => {
                    let message = format!("the upload was cut off after {received} bytes: {e}");
                    break Some(Refusal::new(StatusCode::BAD_REQUEST, message));
                }
                Err(_) => {
                    let message = format!(
                        "the upload sent nothing for {} s after {received} bytes",
                        self.idle.as_secs()
                    );
                    break Some(Refusal::new(StatusCode::REQUEST_TIMEOUT, message));
                }
            };
            received += data.len() as u64;
            if let Some(max) = self.max_body.filter(|&max| received > max) {
                break Some(Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, over_limit(max)));
            }
            // Refused: the child stopped reading, and says why.
            if chunks.send(Chunk::Data(data)).await.is_err() {
                break None;
            }
        };
        if failed.is_none() {
            let _ = chunks.send(Chunk::End).await;
        }
        drop(chunks);
        let landed = result.await.map_err(|_| {
            Refusal::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the landing thread failed",
            )
        })?;
        match failed {
            Some(refusal) => Err(refusal),
            None => landed.map_err(|e| refusal(e, self.limits)),
        }
    }
}

/// The answer for an upload over `max` bytes.
pub(super) fn over_limit(max: u64) -> String {
    format!(
        "the upload is larger than this server's limit of {} (--max-bytes)",
        human_bytes(max)
    )
}

const STOPPING: &str = "the server is stopping; nothing of this upload was kept";
const CANNOT_LAND: &str = "the server could not land this upload (its log says why)";

/// Writes what `chunks` brings into the child's input and returns its result; cancels the
/// child when `chunks` closes without [`Chunk::End`].
fn feed(mut child: ConfinedChild, mut chunks: mpsc::Receiver<Chunk>) -> barge::Result<Landed> {
    loop {
        match chunks.blocking_recv() {
            Some(Chunk::Data(data)) => {
                // The child stopped reading (a bad archive): its report says why.
                if child.input().write_all(&data).is_err() {
                    break;
                }
            }
            Some(Chunk::End) => break,
            None => return child.cancel(),
        }
    }
    drop(chunks);
    child.wait()
}

/// The answer for a landing that failed with `error`: the decoder's message for a bad
/// archive (it names the entry and the archive offset, never a server path); for anything
/// else a message without details, which go to the log.
fn refusal(error: barge::Error, limits: Limits) -> Refusal {
    let barge::Error::Confined(confined) = &error else {
        return Refusal {
            detail: Some(error.to_string()),
            ..Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, CANNOT_LAND)
        };
    };
    let too_large = |message: String| Refusal {
        detail: Some(format!("{message}: {error}")),
        ..Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    };
    let message = &confined.message;
    let refusal = match (confined.kind, confined.limit, confined.errno) {
        (_, Some(Limit::Bytes), _) => too_large(over_limit(limits.max_bytes.unwrap_or(0))),
        // Over its share of --quota, which the caller words.
        (_, Some(Limit::Space), _) => Refusal {
            detail: Some(error.to_string()),
            ..Refusal::new(StatusCode::INSUFFICIENT_STORAGE, "over the quota")
        },
        (_, Some(Limit::Entries), _) => too_large(format!(
            "the upload has more entries than this server's limit of {} (--max-entries)",
            limits.max_entries.unwrap_or(0)
        )),
        (ConfinedKind::Format | ConfinedKind::Short | ConfinedKind::StrippedLink, ..) => {
            Refusal::new(StatusCode::BAD_REQUEST, format!("bad archive: {message}"))
        }
        (ConfinedKind::Interrupted, ..) => Refusal::new(StatusCode::SERVICE_UNAVAILABLE, STOPPING),
        (.., Some(errno)) if errno == rustix::io::Errno::EXIST.raw_os_error() => Refusal {
            detail: Some(message.clone()),
            ..Refusal::new(
                StatusCode::CONFLICT,
                "the name was taken while this upload landed",
            )
        },
        _ => Refusal {
            detail: Some(message.clone()),
            ..Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, CANNOT_LAND)
        },
    };
    // The archive's fault: the client may see what the decoder said of it.
    let archive = [400, 413, 507].contains(&refusal.status.as_u16());
    Refusal {
        cause: archive.then_some(error),
        ..refusal
    }
}
