//! The receiving end: each connection authenticated, then landed by its own confined
//! lander child.

use std::collections::HashMap;
use std::net::TcpStream;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{openat, statx, AtFlags, Mode, StatxFlags};
use rustix::io::Errno;

use super::channel::{protocol, Channel};
use super::lanes::{Stop, Transfer, JOIN_POLL};
use super::protocol::{kind, read_paths, Asked, Hello, Inbound, Message, Messages};
use super::Key;
use crate::confine::{ConfinedUnpack, Landed};
use crate::error::{Error, NetError, Result, TreePath};
use crate::format::Limits;
use crate::interrupt::{wait_a_slice, Cancel};
use crate::land::restore::Policy;
use crate::listing::Listing;
use crate::sys::dir::{dirent_buffer, remove_tree};
use crate::sys::DIR_FLAGS;
use crate::threads::Work;
use crate::tree::Owner;
use crate::unpack::{Existing, Restore};
use crate::{Done, Listener};

/// How long a connection may take, at most, to show the key (the Noise handshake and the
/// HELLO, about two round trips of small messages) however often it sends a byte: a stranger
/// holds its thread no longer. Shorter when the timeout is.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

/// How connections are received into DEST: `Receive::new(dest, key).limits(..)`, then
/// [`Receive::connection`] for each accepted stream (from any thread).
#[derive(Clone, Debug)]
pub struct Receive {
    dest: PathBuf,
    key: Key,
    limits: Limits,
    restore: Restore,
    timeout: Duration,
    cancel: Cancel,
    /// The transfers running, by id, which later lanes join.
    transfers: Transfers,
    /// Transfers landing at once, at most.
    slots: Slots,
    /// Told each entry landed, by every transfer.
    listener: Option<Listener>,
}

/// A bound on the transfers landing at once: a transfer beyond it waits for one to end.
#[derive(Clone, Debug)]
struct Slots {
    taken: Arc<(Mutex<usize>, std::sync::Condvar)>,
    max: usize,
}

/// A transfer's slot, given back when dropped.
struct Slot<'s>(&'s Slots);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let (taken, freed) = &*self.0.taken;
        *taken.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        freed.notify_one();
    }
}

impl Slots {
    /// Waits up to `timeout` for a slot (failing once `stop` is cancelled).
    fn take(&self, timeout: Duration, stop: &Cancel) -> Result<Slot<'_>> {
        let (taken, freed) = &*self.taken;
        let start = std::time::Instant::now();
        let mut n = taken.lock().unwrap_or_else(|e| e.into_inner());
        while *n >= self.max {
            if start.elapsed() >= timeout {
                return Err(Error::net(
                    NetError::Remote,
                    format!("busy: {} transfers are running", self.max),
                ));
            }
            n = wait_a_slice(freed, n, stop)?;
        }
        *n += 1;
        Ok(Slot(self))
    }
}

/// The transfers over several lanes, by the id their sender named (secret: a lane joins
/// with one only after showing the key).
#[derive(Clone, Default)]
struct Transfers(Arc<Mutex<HashMap<String, Joinable>>>);

/// A transfer as its later lanes find it.
enum Joinable {
    /// Its HELLO came; it waits for a slot or its lander.
    Soon,
    Running(Arc<Transfer>),
    /// Over, since then: kept for a timeout, so that a late lane is told at once.
    Ended(Instant),
}

impl std::fmt::Debug for Transfers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Transfers")
    }
}

impl Transfers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Joinable>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records transfer `id` as coming (forgetting those ended over `keep` ago); `None`
    /// when the id is taken.
    fn announce(&self, id: &str, keep: Duration) -> Option<Announced> {
        let mut transfers = self.lock();
        transfers.retain(|_, t| !matches!(t, Joinable::Ended(at) if at.elapsed() >= keep));
        if transfers.contains_key(id) {
            return None;
        }
        transfers.insert(id.to_string(), Joinable::Soon);
        Some(Announced {
            transfers: self.clone(),
            id: id.to_string(),
        })
    }
}

/// A transfer its later lanes may join, ended when dropped.
struct Announced {
    transfers: Transfers,
    id: String,
}

impl Announced {
    /// Lets lanes join `transfer`.
    fn running(&self, transfer: Arc<Transfer>) {
        (self.transfers.lock()).insert(self.id.clone(), Joinable::Running(transfer));
    }
}

impl Drop for Announced {
    fn drop(&mut self) {
        let ended = Joinable::Ended(Instant::now());
        self.transfers.lock().insert(self.id.clone(), ended);
    }
}

/// What an authenticated connection was.
#[derive(Debug)]
pub enum Connection {
    /// A transfer, landed.
    Landed(Received),
    /// A later lane of a transfer (or one too late for it), which that transfer's
    /// connection reports.
    Lane,
    /// A sender's dry run: it was told what DEST has (with update), and sent nothing.
    DryRun(DryRun),
}

/// What a sender's dry run asked of the receiver.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DryRun {
    /// The sender's host name, as it says.
    pub sender: String,
    /// The entries of DEST it was told of (none without update).
    pub listed: u64,
}

/// What one connection landed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Received {
    /// What the confined lander landed.
    #[serde(flatten)]
    pub landed: Landed,
    /// The name the sender gave.
    pub sender: String,
    /// Archive bytes received (compressed, when `compressed`).
    pub received_bytes: u64,
    /// Whether the stream was compressed.
    pub compressed: bool,
    /// Whether the sender asked for an update (existing entries replaced).
    pub update: bool,
    /// Entries of DEST removed because the sender's trees lack them (`send --delete`), each
    /// with what was below it.
    pub deleted: u64,
}

/// How a connection failed.
#[derive(Debug)]
pub struct Failed {
    /// Whether the peer had shown the key (a stranger's failure lands nothing).
    pub authenticated: bool,
    /// The name the sender gave, once known.
    pub sender: Option<String>,
    /// What went wrong.
    pub error: Error,
}

impl Receive {
    /// Receives into `dest` (which should exist: see [`crate::root::prepare_dest`]) with
    /// `key`, with the default limits and restore rules of [`crate::unpack::Unpack`] and a
    /// 30 s timeout.
    pub fn new(dest: impl Into<PathBuf>, key: Key) -> Receive {
        Receive {
            dest: dest.into(),
            key,
            limits: Limits::default(),
            restore: Restore::default().asked_only(true),
            timeout: Duration::from_secs(30),
            cancel: Cancel::new(),
            transfers: Transfers::default(),
            slots: Slots {
                taken: Arc::default(),
                max: usize::MAX,
            },
            listener: None,
        }
    }

    /// Lands at most `n` transfers at once: another waits (up to the timeout) for one to
    /// end. Later lanes of a running transfer do not count.
    pub fn max_transfers(mut self, n: usize) -> Receive {
        self.slots.max = n.max(1);
        self
    }

    /// The transfers it lands at once, at most.
    pub(crate) fn transfers_at_once(&self) -> usize {
        self.slots.max
    }

    /// Tells `listener` each entry landed, as it lands (from a thread of each transfer), as
    /// [`crate::Progress::listing`] does.
    pub fn listing(mut self, listener: impl Fn(Done<'_>) + Send + Sync + 'static) -> Receive {
        self.listener = Some(Listener(Arc::new(listener)));
        self
    }

    /// Refuses archives beyond `limits`.
    pub fn limits(mut self, limits: Limits) -> Receive {
        self.limits = limits;
        self
    }

    /// Restores as `restore` says, root's privileges used only as asked
    /// ([`Restore::asked_only`]); an update replaces existing entries whatever it says.
    pub fn restore(mut self, restore: Restore) -> Receive {
        self.restore = restore.asked_only(true);
        self
    }

    /// Fails a connection whose sender sends nothing (or takes nothing) for that long, or
    /// has not shown the key that long after it began (at most 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Receive {
        self.timeout = timeout;
        self
    }

    /// Ends running connections once `cancel` is cancelled (the default: a token of its
    /// own, which nothing cancels: only the timeout ends them, as for a server that drains
    /// its connections on SIGTERM).
    pub fn cancel(mut self, cancel: Cancel) -> Receive {
        self.cancel = cancel;
        self
    }

    /// Authenticates the sender on `stream` and lands what it sends; a connection that
    /// fails authentication spawns and lands nothing. `on_authenticated` is called once the
    /// sender showed the key (its first message decrypted). A later lane of a running
    /// transfer calls `on_lane` once it joined, then carries its share of the transfer. A
    /// dry run is answered (with update, by the listing of DEST) and lands nothing.
    pub fn connection(
        &self,
        stream: TcpStream,
        on_authenticated: impl FnOnce(),
        on_lane: impl FnOnce(),
    ) -> std::result::Result<Connection, Failed> {
        let handshake = self.timeout.min(HANDSHAKE_DEADLINE);
        let accepted = Channel::accept(
            stream,
            &self.key,
            self.timeout,
            handshake,
            self.cancel.clone(),
        );
        let stranger = |error| Failed {
            authenticated: false,
            sender: None,
            error,
        };
        let mut channel = accepted.map_err(stranger)?;
        let mut inbound = Inbound::default();
        let asked = match channel.receive() {
            Ok((kind, payload)) => {
                on_authenticated();
                inbound.hello(kind, payload)
            }
            Err(error) => return Err(stranger(error)),
        };
        let failed = |error, sender: &Hello| Failed {
            authenticated: true,
            sender: Some(sender.name.clone()),
            error,
        };
        let hello = match asked {
            Err(refused) => {
                if let Some(reply) = &refused.reply {
                    close_with(channel, reply);
                }
                return Err(Failed {
                    authenticated: true,
                    sender: refused.sender,
                    error: refused.error,
                });
            }
            Ok(Asked::Join(id)) => {
                let transfer = self.joined(&channel, &id);
                on_lane();
                match transfer {
                    Some(transfer) => self.lane(channel, inbound, &transfer),
                    // Late: the transfer ended (or failed) while this lane connected.
                    None => {
                        let no = inbound.refuse("no running transfer takes this lane".into());
                        close_with(channel, &no);
                    }
                }
                return Ok(Connection::Lane);
            }
            Ok(Asked::DryRun(hello)) => {
                let listed = self.dry_run(channel, inbound);
                return listed
                    .map(|listed| {
                        Connection::DryRun(DryRun {
                            sender: hello.name.clone(),
                            listed,
                        })
                    })
                    .map_err(|e| failed(e, &hello));
            }
            Ok(Asked::Transfer(hello)) => hello,
        };
        let spread = hello.spread().map(|(id, _)| id);
        let announced = match spread.map(|id| self.transfers.announce(id, self.timeout)) {
            Some(None) => {
                let e = protocol("a transfer with this id is running");
                close_with(channel, &inbound.refuse(e.to_string()));
                return Err(failed(e, &hello));
            }
            Some(announced) => announced,
            None => None,
        };
        let _slot = match self.slots.take(self.timeout, &self.cancel) {
            Ok(slot) => slot,
            Err(e) => {
                close_with(channel, &inbound.refuse(e.to_string()));
                return Err(failed(e, &hello));
            }
        };
        let landed = self.land(channel, inbound, &hello, announced);
        landed
            .map(Connection::Landed)
            .map_err(|e| failed(e, &hello))
    }

    /// The running transfer `id` a later lane joins; `None` when it ended or has all its
    /// lanes. Its HELLO may come after the lane's (on a connection of its own): until then
    /// the lane waits, while its sender is there, up to the timeout.
    fn joined(&self, channel: &Channel, id: &str) -> Option<Arc<Transfer>> {
        let start = Instant::now();
        loop {
            match self.transfers.lock().get(id) {
                Some(Joinable::Running(transfer)) => {
                    return transfer.join().then(|| transfer.clone())
                }
                Some(Joinable::Ended(_)) => return None,
                Some(Joinable::Soon) | None => {}
            }
            if start.elapsed() >= self.timeout || channel.spoke_within(JOIN_POLL) {
                return None;
            }
        }
    }

    /// Carries a later lane's share of `transfer`: its DATA until its END, or the
    /// transfer's end.
    fn lane(&self, mut channel: Channel, mut inbound: Inbound, transfer: &Transfer) {
        if let Some(accept) = inbound.accept().accept {
            let _ = send(&mut channel, &accept);
        }
        transfer.carry(&mut channel, &mut inbound);
        transfer.linger();
        channel.close();
    }

    /// Answers a dry run: ACCEPT, with update the listing of DEST; returns the entries
    /// listed. Nothing is spawned or landed.
    fn dry_run(&self, mut channel: Channel, mut inbound: Inbound) -> Result<u64> {
        let listed = self.answer(&mut channel, &mut inbound)?;
        channel.flush()?;
        channel.close();
        Ok(listed)
    }

    /// Takes on the HELLO: sends the ACCEPT and the listing of DEST it asks for (none for a
    /// plain transfer); returns the entries listed.
    fn answer(&self, channel: &mut Channel, inbound: &mut Inbound) -> Result<u64> {
        let answer = inbound.accept();
        if let Some(accept) = &answer.accept {
            send(channel, accept)?;
        }
        match answer.list {
            true => self.send_listing(channel),
            false => Ok(0),
        }
    }

    /// Sends the listing of DEST (what `--update` leaves out when unchanged), as LIST
    /// messages and LIST_END; returns the entries listed.
    fn send_listing(&self, channel: &mut Channel) -> Result<u64> {
        let shown = || TreePath(self.dest.as_os_str().as_encoded_bytes().to_vec());
        let root = self.open_dest()?;
        // Owners are compared where this receiver restores them (whatever the umask).
        let owners = Policy::new(self.restore, Owner::of_process(), 0).owners();
        let listing = Listing::of_dir(root, Work::Listing.threads(), owners);
        let mut out = Messages::new(kind::LIST, |kind, payload| channel.send(kind, payload));
        let written = listing.write_to(&mut out);
        if let Some(e) = out.failed.take() {
            return Err(e);
        }
        written.map_err(|e| Error::os("list", shown(), e))?;
        out.end(kind::LIST_END)?;
        channel.flush()?;
        Ok(listing.len())
    }

    /// DEST's directory, opened without following a symlink.
    fn open_dest(&self) -> Result<OwnedFd> {
        let shown = || TreePath(self.dest.as_os_str().as_encoded_bytes().to_vec());
        rustix::fs::open(&self.dest, DIR_FLAGS, Mode::empty())
            .map_err(|e| Error::io("open destination", shown(), e))
    }

    /// Reads the paths the sender's DELETE messages name (up to DELETE_END, within a
    /// listing's byte limit) and removes each from DEST with what is below it, one name at
    /// a time relative to directory fds, never following a symlink; a path already gone
    /// is no error. Returns the entries removed.
    fn remove_missing(&self, channel: &mut Channel, inbound: &mut Inbound) -> Result<u64> {
        if !inbound.deletes() {
            return Ok(0);
        }
        let bytes = loop {
            let (kind, payload) = channel.receive()?;
            if let Some(bytes) = inbound.delete(kind, payload)? {
                break bytes;
            }
        };
        let root = self.open_dest()?;
        let mut buf = dirent_buffer();
        let mut removed = 0;
        for path in read_paths(&bytes)? {
            let shown = || TreePath::join([self.dest.as_os_str().as_encoded_bytes()], path);
            removed += u64::from(
                remove_below(&root, path, &mut buf).map_err(|(op, e)| Error::io(op, shown(), e))?,
            );
        }
        Ok(removed)
    }

    /// Spawns the confined lander, feeds it the transfer (which its later lanes join once
    /// `announced` says it runs) and tells the sender how it ended.
    fn land(
        &self,
        mut channel: Channel,
        mut inbound: Inbound,
        hello: &Hello,
        announced: Option<Announced>,
    ) -> Result<Received> {
        let mut restore = self.restore;
        if hello.update {
            restore = restore.existing(Existing::Overwrite);
        }
        let mut landing = ConfinedUnpack::new(&self.dest)
            .limits(self.limits)
            .restore(restore)
            .compressed(hello.compress);
        if let Some(listener) = &self.listener {
            landing = landing.listener(listener.clone());
        }
        let mut child = match landing.spawn() {
            Ok(child) => child,
            Err(e) => {
                close_with(
                    channel,
                    &inbound.refuse(format!("cannot start the lander: {e}")),
                );
                return Err(e);
            }
        };
        let out = child.take_input();
        let lanes = hello.spread().map_or(1, |(_, lanes)| lanes);
        let transfer = Transfer::new(out, lanes, self.timeout, self.cancel.clone());
        let transfer = Arc::new(transfer);
        // Later lanes may carry data at once; with delete, once what it removes is gone.
        let run = |announced: &Option<Announced>| {
            if let Some(announced) = announced {
                announced.running(transfer.clone());
            }
        };
        if !hello.delete {
            run(&announced);
        }
        let answered = self.answer(&mut channel, &mut inbound);
        let deleted = answered.and_then(|_| self.remove_missing(&mut channel, &mut inbound));
        if hello.delete && deleted.is_ok() {
            run(&announced);
        }
        let fed = deleted
            .map_err(Stop::from)
            .and_then(|deleted| Ok((self.feed(&mut channel, &mut inbound, &transfer)?, deleted)));
        drop(announced);
        let result = match fed {
            Ok((received_bytes, deleted)) => child.wait().map(|landed| Received {
                landed,
                sender: hello.name.clone(),
                received_bytes,
                compressed: hello.compress,
                update: hello.update,
                deleted,
            }),
            Err(Stop::Lander) => {
                transfer.close();
                Err(child.wait().err().unwrap_or_else(|| {
                    protocol("the lander stopped reading, then reported success")
                }))
            }
            Err(Stop::Channel(e @ Error::Interrupted { .. })) => {
                // Stopped cleanly, the child removes the file it was writing.
                let _ = child.cancel();
                transfer.close();
                Err(e)
            }
            Err(Stop::Channel(e)) => {
                // Each message that arrived was the sender's (authenticated): the lander
                // lands them all, then fails at the archive's cut-off end, removing the
                // entry it cut short, so a rerun with update has less to send.
                transfer.close();
                let _ = child.wait();
                Err(e)
            }
        };
        // The sender hears how it ended (unless the connection itself failed).
        let told = match inbound.result(result.as_ref().map(|r| &r.landed)) {
            Some(outcome) => send(&mut channel, &outcome).is_ok(),
            None => false,
        };
        transfer.end();
        if told {
            channel.close();
        }
        result
    }

    /// Carries the DATA of a transfer (this lane's, and the others') into the lander until
    /// END; returns the archive bytes received.
    fn feed(
        &self,
        channel: &mut Channel,
        inbound: &mut Inbound,
        transfer: &Transfer,
    ) -> std::result::Result<u64, Stop> {
        // The first lane's END counts (`Inbound::carry`).
        let counted = transfer.carry(channel, inbound).flatten();
        let finished = counted.and_then(|counted| transfer.finish(counted));
        finished.ok_or_else(|| transfer.failure().unwrap_or(Stop::Lander))
    }
}

/// Removes the entry at `path` (checked names joined by `/`) below the directory `root`
/// with everything below it, one name at a time relative to directory fds, never following
/// a symlink (one in its way ends the path there: nothing is removed); `buf` is a getdents
/// buffer. Whether there was an entry to remove; the call that failed.
fn remove_below(
    root: &OwnedFd,
    path: &[u8],
    buf: &mut [std::mem::MaybeUninit<u8>],
) -> std::result::Result<bool, (&'static str, Errno)> {
    let (dir, name) = match path.iter().rposition(|&b| b == b'/') {
        Some(slash) => (&path[..slash], &path[slash + 1..]),
        None => (&path[..0], path),
    };
    let Some(at) = open_below(root, dir).map_err(|e| ("open directory", e))? else {
        return Ok(false);
    };
    match statx(&at, name, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::TYPE) {
        Err(Errno::NOENT) => return Ok(false),
        Err(e) => return Err(("statx", e)),
        Ok(_) => {}
    }
    remove_tree(at.as_fd(), name, buf).map_err(|e| ("remove", e))?;
    Ok(true)
}

/// The directory `path` below `root`, opened one name at a time without following a
/// symlink; `None` where it is gone or no directory.
fn open_below(root: &OwnedFd, path: &[u8]) -> rustix::io::Result<Option<OwnedFd>> {
    let mut at = openat(root, c".", DIR_FLAGS, Mode::empty())?;
    for step in path.split(|&b| b == b'/').filter(|n| !n.is_empty()) {
        at = match openat(&at, step, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(None),
            Err(e) => return Err(e),
        };
    }
    Ok(Some(at))
}

/// Queues `message` on `channel`.
fn send(channel: &mut Channel, message: &Message) -> Result<()> {
    channel.send(message.kind, &message.payload)
}

/// Tells the sender `message` (its refusal), and closes.
fn close_with(mut channel: Channel, message: &Message) {
    let _ = send(&mut channel, message);
    channel.close();
}

#[cfg(test)]
mod tests;
