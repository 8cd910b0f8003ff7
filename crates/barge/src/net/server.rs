//! The receiving server: a listener's accept loop, one thread per connection running
//! [`Receive::connection`], within a budget of connections and a share of it per address,
//! until its token is cancelled (a stop signal) or, one-shot, the first transfer that landed
//! (or a failed one no sender retried in time).

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::peers::{PeerSlot, Peers};
use super::recv::{Connection, DryRun, Failed, Receive, Received};
use crate::error::{Error, NetError, Result, TreePath};
use crate::interrupt::{keep_signals_off_this_thread, Cancel};

/// Connections taken beyond the running transfers: in their handshake, later lanes waiting
/// for their transfer's HELLO or slot, or connections waiting for a transfer to end (a
/// transfer's later lanes, once joined, count as none). The rest wait in the listen queue.
const HANDSHAKES: usize = 64;

/// Connections from one address that may be in their handshake at once: a quarter of
/// [`HANDSHAKES`], so strangers at one address leave the rest to others, and room for a
/// sender's later lanes (up to 15, opened at once). More are closed as they come.
const SHARE: usize = 16;

/// A server receiving into one DEST: `Receiver::new(listener, receive).keep(..).run(..)`.
pub struct Receiver {
    listener: TcpListener,
    receive: Receive,
    keep: bool,
    retry: Duration,
    cancel: Cancel,
}

/// How one connection ended (or was turned away at once, given no thread).
#[derive(Debug)]
pub struct Done {
    /// The sender's address.
    pub peer: SocketAddr,
    /// What it did, or how it failed.
    pub result: std::result::Result<Ended, Failed>,
    /// From its accept to its end.
    pub elapsed: Duration,
}

/// What an authenticated connection did.
#[derive(Debug)]
pub enum Ended {
    /// A transfer landed.
    Landed(Received),
    /// A sender's dry run: nothing landed.
    DryRun(DryRun),
}

/// What the loop tells its caller.
#[derive(Debug)]
pub enum Report<'a> {
    /// A connection ended, or was closed at once.
    Ended(&'a Done),
    /// Taking a connection failed (out of fds): the loop goes on.
    AcceptFailed(&'a std::io::Error),
}

impl Done {
    /// Whether it ends a one-shot receiver: a sender that had shown the key, unless it made
    /// a dry run (strangers and dry runs leave it waiting).
    pub fn ends_one_shot(&self) -> bool {
        match &self.result {
            Ok(Ended::Landed(_)) => true,
            Ok(Ended::DryRun(_)) => false,
            Err(failed) => failed.authenticated,
        }
    }

    /// Whether sending again (`send --update`) may finish it: a transfer whose connection
    /// was cut, changed on the way or fell silent after the sender showed the key; not one
    /// the receiver refused (a bad archive, a limit), which would fail again.
    pub fn retryable(&self) -> bool {
        let Err(failed) = &self.result else {
            return false;
        };
        let kind = match &failed.error {
            Error::Net { kind, .. } => *kind,
            _ => return false,
        };
        let cut = [NetError::Truncated, NetError::Tampered, NetError::Timeout].contains(&kind);
        failed.authenticated && cut
    }
}

/// What a connection's thread tells the accept loop.
enum Event {
    /// The connection joined a running transfer as a later lane (no connection of its own).
    Lane,
    /// A connection (not a later lane) ended.
    Done(Box<Done>),
}

/// The connections the loop holds a thread for, at most the transfers landing at once and
/// [`HANDSHAKES`], of which [`SHARE`] per address in their handshake.
struct Budget {
    running: usize,
    max: usize,
    handshaking: Arc<Peers>,
}

impl Budget {
    fn new(max_transfers: usize) -> Budget {
        Budget {
            running: 0,
            max: max_transfers.saturating_add(HANDSHAKES),
            handshaking: Peers::new(SHARE),
        }
    }

    /// Whether no more connection may be taken until one ends.
    fn full(&self) -> bool {
        self.running >= self.max
    }

    /// A place among the handshakes for a connection from `ip`, or why it is closed at once.
    fn admit(&self, ip: IpAddr) -> std::result::Result<PeerSlot, String> {
        (self.handshaking.take(ip))
            .ok_or_else(|| format!("{SHARE} connections from its address are in their handshake"))
    }
}

/// The accept loop's rules without a listener or threads: when it takes a connection,
/// waits for one to end or stops, and which connection ends a one-shot receiver.
struct Serving {
    budget: Budget,
    keep: bool,
    /// How long a one-shot receiver waits for a retry after a transfer cut off.
    retry: Duration,
    /// A one-shot receiver's transfer that was cut off, and until when a retry may come.
    failed: Option<(Box<Done>, Instant)>,
}

/// What the loop does next.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Looks for a connection that ended, then takes a new one.
    Take,
    /// Waits for a running connection to end (full, or stopping).
    Wait,
    /// Ends: stopping with none running.
    Stop,
    /// Ends a one-shot receiver whose transfer was cut off and not retried in time.
    GiveUp,
}

impl Serving {
    fn new(max_transfers: usize, keep: bool, retry: Duration) -> Serving {
        Serving {
            budget: Budget::new(max_transfers),
            keep,
            retry,
            failed: None,
        }
    }

    /// What the loop does next at `now`; `stopping`: its token is cancelled.
    fn next(&self, stopping: bool, now: Instant) -> Next {
        let idle = self.budget.running == 0;
        match &self.failed {
            Some((_, until)) if idle && now >= *until => Next::GiveUp,
            _ if !(self.budget.full() || stopping) => Next::Take,
            _ if idle => Next::Stop,
            _ => Next::Wait,
        }
    }

    /// A connection was given its thread.
    fn started(&mut self) {
        self.budget.running += 1;
    }

    /// A connection's thread ended at `now`: the connection, when it ends a one-shot
    /// receiver (one cut off keeps it waiting for a retry instead, see [`Done::retryable`]).
    fn ended(&mut self, event: Event, now: Instant) -> Option<Box<Done>> {
        self.budget.running -= 1;
        let Event::Done(done) = event else {
            return None;
        };
        if self.keep || !done.ends_one_shot() {
            return None;
        }
        if done.retryable() && !self.retry.is_zero() {
            self.failed = Some((done, now + self.retry));
            return None;
        }
        Some(done)
    }
}

impl Receiver {
    /// Serves `listener` (set non-blocking here) with `receive`, one-shot unless
    /// [`Receiver::keep`].
    pub fn new(listener: TcpListener, receive: Receive) -> Receiver {
        Receiver {
            listener,
            receive,
            keep: false,
            retry: Duration::ZERO,
            cancel: Cancel::new(),
        }
    }

    /// One-shot: after a transfer that was cut off ([`Done::retryable`]), keeps taking
    /// senders (a retry with `send --update`) until one lands, or none came for `wait`
    /// after the last failure (the default: none, the failure ends the loop at once).
    pub fn retry_for(mut self, wait: Duration) -> Receiver {
        self.retry = wait;
        self
    }

    /// Keeps receiving until its token is cancelled, which ends the loop once the running
    /// transfers are done; without it, the first sender that shows the key (and makes no
    /// dry run) ends it, unless its transfer was cut off (see [`Receiver::retry_for`]).
    pub fn keep(mut self, yes: bool) -> Receiver {
        self.keep = yes;
        self
    }

    /// Stops taking connections once `cancel` is cancelled (the default: a token of its
    /// own, which nothing cancels), and ends once the running ones are done. The running
    /// connections themselves stop by the token of the [`Receive`] (see
    /// [`Receive::cancel`]): the same one, unless they are to drain.
    pub fn cancel(mut self, cancel: Cancel) -> Receiver {
        self.cancel = cancel;
        self
    }

    /// Runs the loop, calling `report` with each connection as it ends. Returns the
    /// connection that ended a one-shot receiver (the last failed one when no retry came in
    /// time); `None` when a kept one stopped; a one-shot receiver whose token was cancelled
    /// fails with [`Error::Interrupted`].
    pub fn run(self, mut report: impl FnMut(Report<'_>)) -> Result<Option<Done>> {
        let shown = || TreePath(b"<listener>".to_vec());
        (self.listener.set_nonblocking(true)).map_err(|e| Error::os("listen", shown(), e))?;
        let (tx, rx) = mpsc::channel::<Event>();
        // A transfer that ends wakes the loop at once (one-shot recv ends then, not at the
        // next poll timeout).
        let wake = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)
            .map_err(|e| Error::io("eventfd", shown(), e))?;
        let wake = Arc::new(wake);
        let mut serving = Serving::new(self.receive.transfers_at_once(), self.keep, self.retry);
        loop {
            // Full, or stopping: wait for a connection to end; connections wait in the listen
            // queue meanwhile.
            let next = serving.next(self.cancel.is_cancelled(), Instant::now());
            let event = match next {
                Next::Stop => break,
                Next::GiveUp => return Ok(serving.failed.map(|(done, _)| *done)),
                Next::Wait => rx.recv_timeout(Duration::from_millis(100)).ok(),
                Next::Take => rx.try_recv().ok(),
            };
            if let Some(event) = event {
                if let Event::Done(done) = &event {
                    report(Report::Ended(done));
                }
                // Strangers still in their handshake are dropped with the process.
                if let Some(done) = serving.ended(event, Instant::now()) {
                    return Ok(Some(*done));
                }
                continue;
            }
            if next != Next::Take || !readable(&self.listener, &wake)? {
                continue;
            }
            let (stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    report(Report::AcceptFailed(&e));
                    continue;
                }
            };
            let place = match serving.budget.admit(peer.ip()) {
                Ok(place) => place,
                Err(why) => {
                    report(Report::Ended(&turned_away(peer, why)));
                    continue;
                }
            };
            let (tx, receive, wake) = (tx.clone(), self.receive.clone(), wake.clone());
            let spawned = std::thread::Builder::new().spawn(move || {
                keep_signals_off_this_thread();
                let start = Instant::now();
                // Tells the loop, and wakes it.
                let tell = |event| {
                    let _ = tx.send(event);
                    let _ = rustix::io::write(&*wake, &1u64.to_ne_bytes());
                };
                // Its place among the handshakes is given back once it showed the key.
                let authenticated = move || drop(place);
                let result = match receive.connection(stream, authenticated, || tell(Event::Lane)) {
                    Ok(Connection::Lane) => return,
                    Ok(Connection::DryRun(dry_run)) => Ok(Ended::DryRun(dry_run)),
                    Ok(Connection::Landed(received)) => Ok(Ended::Landed(received)),
                    Err(failed) => Err(failed),
                };
                let elapsed = start.elapsed();
                tell(Event::Done(Box::new(Done {
                    peer,
                    result,
                    elapsed,
                })));
            });
            // Out of threads (a task limit): this connection is closed, the others go on.
            match spawned {
                Ok(_) => serving.started(),
                Err(e) => {
                    let done = turned_away(peer, format!("cannot start a thread: {e}"));
                    report(Report::Ended(&done));
                }
            }
        }
        match self.cancel.reason() {
            Some(signal) if !self.keep => Err(Error::Interrupted { signal }),
            _ => Ok(None),
        }
    }
}

/// A connection closed at once, given no thread, reported as any connection that failed.
fn turned_away(peer: SocketAddr, why: String) -> Done {
    let failed = Failed {
        authenticated: false,
        sender: None,
        error: Error::net(NetError::Remote, format!("busy: {why}")),
    };
    Done {
        peer,
        result: Err(failed),
        elapsed: Duration::ZERO,
    }
}

/// Whether a connection waits to be accepted: waits until one does, a transfer ends (`wake`,
/// read here) or 100 ms have passed (a stop is seen then).
fn readable(listener: &TcpListener, wake: &OwnedFd) -> Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [
        PollFd::new(listener, PollFlags::IN),
        PollFd::new(wake, PollFlags::IN),
    ];
    let wait = Timespec {
        tv_sec: 0,
        tv_nsec: 100_000_000,
    };
    match poll(&mut fds, Some(&wait)) {
        Ok(_) => {
            if !fds[1].revents().is_empty() {
                let _ = rustix::io::read(wake, &mut [0u8; 8]);
            }
            Ok(!fds[0].revents().is_empty())
        }
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(Error::io("poll", TreePath(b"<listener>".to_vec()), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_budget_is_the_transfers_and_the_handshakes_with_a_share_per_address() {
        let mut budget = Budget::new(4);
        let places: Vec<_> = (0..SHARE).map(|_| budget.admit(ip("10.0.0.1"))).collect();
        assert!(places.iter().all(Result::is_ok));
        let refused = budget.admit(ip("10.0.0.1")).map(drop).unwrap_err();
        assert!(refused.starts_with("16 connections"), "{refused}");
        assert!(budget.admit(ip("10.0.0.2")).is_ok(), "another address");
        drop(places);
        assert!(budget.admit(ip("10.0.0.1")).is_ok(), "given back");
        budget.running = 4 + HANDSHAKES - 1;
        assert!(!budget.full());
        budget.running += 1;
        assert!(budget.full(), "4 transfers and 64 more");
    }

    /// A cancelled token ends the loop once no connection runs: a one-shot receiver as
    /// interrupted, a kept one as done.
    #[test]
    fn a_cancelled_token_stops_the_loop() {
        let dest = tempfile::tempdir().unwrap();
        for keep in [false, true] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let receive = Receive::new(dest.path(), crate::net::Key::generate().unwrap());
            let cancel = Cancel::new();
            cancel.cancel();
            let receiver = Receiver::new(listener, receive).keep(keep).cancel(cancel);
            let ended = receiver.run(|_| panic!("no connection came"));
            match keep {
                false => assert!(matches!(ended, Err(Error::Interrupted { signal: 0 }))),
                true => assert!(matches!(ended, Ok(None))),
            }
        }
    }

    /// A connection that ended as `result`.
    fn done(result: std::result::Result<Ended, Failed>) -> Event {
        Event::Done(Box::new(Done {
            peer: "127.0.0.1:1".parse().unwrap(),
            result,
            elapsed: Duration::ZERO,
        }))
    }

    fn landed() -> std::result::Result<Ended, Failed> {
        Ok(Ended::Landed(Received {
            landed: crate::confine::Landed {
                summary: crate::land::LandSummary::default(),
                confinement: crate::root::Confinement::Off,
            },
            sender: "s".into(),
            received_bytes: 0,
            compressed: false,
            update: false,
            deleted: 0,
        }))
    }

    #[test]
    fn a_one_shot_receiver_ends_with_the_first_transfer_that_landed() {
        let stranger = || {
            Err(Failed {
                authenticated: false,
                sender: None,
                error: Error::net(NetError::Authentication, "no key"),
            })
        };
        let now = Instant::now();
        for keep in [false, true] {
            let mut serving = Serving::new(1, keep, Duration::from_secs(30));
            assert_eq!(serving.next(false, now), Next::Take);
            // A stranger, a later lane and a transfer run; the stranger and the lane end.
            (0..3).for_each(|_| serving.started());
            assert!(serving.ended(done(stranger()), now).is_none());
            assert!(serving.ended(Event::Lane, now).is_none());
            assert_eq!(serving.next(false, now), Next::Take, "keep: {keep}");
            // The transfer lands: it ends a one-shot receiver, which takes no second one.
            let ended = serving.ended(done(landed()), now);
            assert_eq!(ended.is_some(), !keep, "keep: {keep}");
        }
    }

    /// A one-shot receiver's transfer cut off keeps it taking senders for the retry time:
    /// a retry that lands ends it, else it gives up once none runs.
    #[test]
    fn a_cut_transfer_keeps_a_one_shot_receiver_for_a_retry_until_its_time() {
        let cut = || {
            Err(Failed {
                authenticated: true,
                sender: Some("s".into()),
                error: Error::net(NetError::Truncated, "cut"),
            })
        };
        let now = Instant::now();
        let later = now + Duration::from_secs(31);
        let mut serving = Serving::new(1, false, Duration::from_secs(30));
        serving.started();
        assert!(
            serving.ended(done(cut()), now).is_none(),
            "waits for a retry"
        );
        assert_eq!(serving.next(false, now), Next::Take);
        serving.started();
        assert_eq!(serving.next(false, later), Next::Take, "a retry is running");
        assert!(
            serving.ended(done(landed()), later).is_some(),
            "the retry landed"
        );
        serving.started();
        assert!(serving.ended(done(cut()), now).is_none());
        assert_eq!(serving.next(false, later), Next::GiveUp);
        assert!(
            serving.failed.is_some(),
            "the cut transfer is what it ends with"
        );
        // Without a retry time, a cut transfer ends it at once.
        let mut serving = Serving::new(1, false, Duration::ZERO);
        serving.started();
        assert!(serving.ended(done(cut()), now).is_some());
    }

    #[test]
    fn a_full_or_stopping_loop_waits_for_its_connections_then_stops() {
        let now = Instant::now();
        let mut serving = Serving::new(2, true, Duration::ZERO);
        (0..2 + HANDSHAKES).for_each(|_| serving.started());
        assert_eq!(serving.next(false, now), Next::Wait, "full");
        serving.ended(Event::Lane, now);
        assert_eq!(serving.next(false, now), Next::Take);
        assert_eq!(
            serving.next(true, now),
            Next::Wait,
            "stopping, with some running"
        );
        (0..1 + HANDSHAKES).for_each(|_| {
            serving.ended(Event::Lane, now);
        });
        assert_eq!(serving.next(true, now), Next::Stop);
    }

    #[test]
    fn only_a_sender_that_showed_the_key_and_sent_ends_a_one_shot_receiver_and_a_cut_one_may_retry()
    {
        let done = |result| Done {
            peer: "127.0.0.1:1".parse().unwrap(),
            result,
            elapsed: Duration::ZERO,
        };
        let failed = |authenticated| Failed {
            authenticated,
            sender: None,
            error: Error::net(NetError::Remote, "x"),
        };
        assert!(done(Err(failed(true))).ends_one_shot());
        assert!(
            !done(Err(failed(true))).retryable(),
            "refused by the receiver"
        );
        let cut = Failed {
            error: Error::net(NetError::Truncated, "cut"),
            ..failed(true)
        };
        assert!(done(Err(cut)).retryable());
        let stranger_cut = Failed {
            error: Error::net(NetError::Truncated, "cut"),
            ..failed(false)
        };
        assert!(!done(Err(stranger_cut)).retryable());
        assert!(!done(Err(failed(false))).ends_one_shot(), "a stranger");
        let dry_run = DryRun {
            sender: "s".into(),
            listed: 0,
        };
        assert!(!done(Ok(Ended::DryRun(dry_run))).ends_one_shot());
        assert!(turned_away("127.0.0.1:1".parse().unwrap(), "busy".into())
            .result
            .is_err_and(|f| !f.authenticated));
    }
}
