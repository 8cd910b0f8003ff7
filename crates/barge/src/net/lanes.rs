//! One transfer over several connections ("lanes"). A TCP connection carries at most its
//! window per round trip, and the kernel's default buffers allow ~4 MiB in flight: half of
//! a gigabit over a 40 ms round trip. So the sender spreads the archive's DATA messages
//! over lanes, each message numbered, and the receiver puts them back in order.
//!
//! The sender ([`Striper`]) queues each chunk on a lane with room, taking turns, and never
//! waits on one lane while another can take bytes. On the receiver ([`Transfer`]) each lane
//! has its thread: whichever holds the next chunk writes it, and the held chunks that follow
//! it, into the lander; a chunk ahead of the next is held, up to [`WINDOW`] chunks ahead,
//! past which its lane waits. The lane that carries the next chunk never waits (a lane's
//! chunks come in order, so it holds no chunk after it), so the lanes cannot deadlock.
//!
//! Each lane is a channel of its own (its own handshake, keys and nonces), so a message
//! cannot move between lanes; the numbers order them across lanes, and the END on the
//! first lane counts chunks and bytes, so a lane cut short is a missing chunk, never a
//! shorter archive.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::{mpsc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use super::channel::{protocol, truncated, Channel, BATCH, MAX_PLAIN};
use super::protocol::{data_head, kind, Carried, Counted, Inbound, Outbound, SEQ};
use crate::error::{Error, NetError, Result};
use crate::interrupt::{wait_a_slice, wait_for_any, Cancel, Waited};
use crate::sys::queue::QueueWriter;

/// What a DATA message holds before its archive bytes: its type and chunk number.
const HEAD: usize = 1 + SEQ;
/// Chunks (of up to 64 KiB) a receiver holds ahead of the next one, per transfer.
const WINDOW: u64 = 256;
/// How long a sender that got its result waits for lanes still authenticating (beyond
/// three round trips), to end them cleanly: they take a round trip or two on a sound path.
pub(crate) const LANES_GRACE: Duration = Duration::from_secs(1);
/// How often a sender waiting for a lane to take bytes looks for lanes that joined (and a
/// receiver's early lane for its transfer).
pub(crate) const JOIN_POLL: Duration = Duration::from_millis(5);

/// The later lanes a sender is opening, handed over as the receiver accepts them.
pub(crate) struct Joining {
    ready: mpsc::Receiver<Channel>,
    /// Cancelled once the transfer takes no more lanes: a lane that authenticates after it
    /// only says its HELLO and closes.
    over: Cancel,
}

impl Joining {
    pub(crate) fn new(ready: mpsc::Receiver<Channel>, over: Cancel) -> Joining {
        Joining { ready, over }
    }

    /// Takes no more lanes: those that authenticate from now on say HELLO and close.
    fn stop(&self) {
        self.over.cancel();
    }

    /// Takes no more lanes and waits up to `within` for those still opening to end, closing
    /// any accepted meanwhile.
    pub(crate) fn finish(self, within: Duration) {
        self.stop();
        let deadline = Instant::now() + within;
        while let Ok(lane) =
            (self.ready).recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            lane.close();
        }
    }
}

impl Drop for Joining {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The sending end: an [`io::Write`] of the archive over the lanes (the first one given,
/// more as they join).
pub(crate) struct Striper {
    lanes: Vec<Channel>,
    /// Lanes still connecting: taken in as they arrive.
    joining: Option<Joining>,
    /// The next chunk's DATA message: its type, its number's place, then its bytes.
    chunk: Vec<u8>,
    chunks: u64,
    bytes: u64,
    /// The lane to try first for the next chunk.
    turn: usize,
    timeout: Duration,
    /// Stops its waits (the first lane's).
    stop: Cancel,
    /// The channel's error, which the writer's caller sees only as an I/O error.
    pub(crate) failed: Option<Error>,
}

impl Striper {
    pub(crate) fn new(first: Channel, joining: Option<Joining>, timeout: Duration) -> Striper {
        let mut chunk = Vec::with_capacity(MAX_PLAIN);
        chunk.resize(HEAD, 0);
        Striper {
            stop: first.stop().clone(),
            lanes: vec![first],
            joining,
            chunk,
            chunks: 0,
            bytes: 0,
            turn: 0,
            timeout,
            failed: None,
        }
    }

    /// Sends the rest, then END on every lane (the first one's, from `first`, with the
    /// bytes and chunks sent), written out; returns the lanes, the first one first, the
    /// lanes still connecting (left out: see [`Joining::finish`]) and the bytes sent.
    pub(crate) fn end(
        mut self,
        first: &mut Outbound,
    ) -> Result<(Vec<Channel>, Option<Joining>, u64)> {
        self.send_chunk()?;
        let joining = self.joining.take();
        if let Some(joining) = &joining {
            joining.stop();
        }
        for lane in &mut self.lanes[1..] {
            lane.queue(kind::END, &[])?;
        }
        let end = first.end(Counted {
            bytes: self.bytes,
            chunks: self.chunks,
        });
        self.lanes[0].queue(end.kind, &end.payload)?;
        while self.lanes.iter().any(|lane| lane.pending() > 0) {
            if !self.write_ready(self.timeout)? {
                return Err(self.took_nothing());
            }
        }
        Ok((self.lanes, joining, self.bytes))
    }

    /// Queues the chunk on a lane with room, writing that lane's queue once it holds a
    /// batch.
    fn send_chunk(&mut self) -> Result<()> {
        if self.chunk.len() == HEAD {
            return Ok(());
        }
        self.chunk[..HEAD].copy_from_slice(&data_head(self.chunks));
        let lane = self.lane_with_room()?;
        let channel = &mut self.lanes[lane];
        channel.queue_message(&self.chunk)?;
        if channel.pending() >= BATCH {
            channel.write_some()?;
        }
        self.bytes += (self.chunk.len() - HEAD) as u64;
        self.chunks += 1;
        self.chunk.truncate(HEAD);
        self.turn = lane + 1;
        Ok(())
    }

    /// A lane whose queue holds less than a batch, taking turns (lanes that joined
    /// meanwhile too); waits for one when every queue is full.
    fn lane_with_room(&mut self) -> Result<usize> {
        let start = Instant::now();
        loop {
            if let Some(joining) = &self.joining {
                loop {
                    match joining.ready.try_recv() {
                        Ok(lane) => self.lanes.push(lane),
                        Err(mpsc::TryRecvError::Empty) => break,
                        Err(mpsc::TryRecvError::Disconnected) => {
                            self.joining = None;
                            break;
                        }
                    }
                }
            }
            let n = self.lanes.len();
            let turns = (0..n).map(|i| (self.turn + i) % n);
            if let Some(lane) = turns.into_iter().find(|&i| self.lanes[i].pending() < BATCH) {
                return Ok(lane);
            }
            // While lanes are joining, look for them every few milliseconds.
            let wait = match self.joining {
                Some(_) => JOIN_POLL,
                None => self.timeout,
            };
            if !self.write_ready(wait)? && start.elapsed() >= self.timeout {
                return Err(self.took_nothing());
            }
        }
    }

    fn took_nothing(&self) -> Error {
        Error::net(
            NetError::Timeout,
            format!(
                "the receiver took nothing for {} s (see --timeout)",
                self.timeout.as_secs()
            ),
        )
    }

    /// Waits up to `wait` until a lane can take some of its queue and writes it; false when
    /// none could. Fails with what the receiver said when it sent something (it sends only
    /// to stop the transfer).
    fn write_ready(&mut self, wait: Duration) -> Result<bool> {
        let mut fds: Vec<PollFd<'_>> = (self.lanes.iter())
            .map(|lane| {
                let flags = match lane.pending() {
                    0 => PollFlags::IN,
                    _ => PollFlags::IN | PollFlags::OUT,
                };
                PollFd::from_borrowed_fd(lane.fd(), flags)
            })
            .collect();
        if wait_for_any(&mut fds, Some(wait), &self.stop, None)? != Waited::Ready {
            return Ok(false);
        }
        let ready: Vec<PollFlags> = fds.iter().map(PollFd::revents).collect();
        if let Some(lane) = ready.iter().position(|r| !(*r - PollFlags::OUT).is_empty()) {
            return Err(self.heard(lane));
        }
        for (lane, ready) in ready.into_iter().enumerate() {
            if ready.contains(PollFlags::OUT) {
                if let Err(e) = self.lanes[lane].write_some() {
                    return Err(match lane {
                        0 => e,
                        _ => self.heard(lane),
                    });
                }
            }
        }
        Ok(true)
    }

    /// The error the receiver sent on `lane`, or its connection's end. A lane after the
    /// first ends only after the receiver's result on the first, so that is the error then.
    fn heard(&mut self, lane: usize) -> Error {
        let said = lane == 0 || {
            let mut fds = [PollFd::from_borrowed_fd(self.lanes[0].fd(), PollFlags::IN)];
            let waited = wait_for_any(&mut fds, Some(self.timeout), &self.stop, None);
            matches!(waited, Ok(Waited::Ready))
        };
        self.lanes[if said { 0 } else { lane }].heard()
    }
}

impl Write for Striper {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = bytes.len().min(MAX_PLAIN - self.chunk.len());
        self.chunk.extend_from_slice(&bytes[..n]);
        if self.chunk.len() == MAX_PLAIN {
            if let Err(e) = self.send_chunk() {
                let shown = io::Error::other(e.to_string());
                self.failed = Some(e);
                return Err(shown);
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Why feeding the lander stopped early.
pub(crate) enum Stop {
    /// The lander stopped reading: its report says why.
    Lander,
    /// A lane failed.
    Channel(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Channel(e)
    }
}

/// The receiving end of one transfer: its lanes' chunks, in order, into the lander.
pub(crate) struct Transfer {
    state: Mutex<State>,
    /// Signalled when the next chunk moves, the transfer fails or ends.
    moved: Condvar,
    timeout: Duration,
    /// Stops the lanes' waits for each other.
    stop: Cancel,
    /// Lanes the sender may open besides the first.
    joins: u32,
    /// Cancelled on a failure: it ends the lanes' waits for data (which the sender, stopped
    /// by the failure, may no longer send).
    cancel: Cancel,
}

struct State {
    /// The lander's input, until the transfer ends.
    out: Option<QueueWriter>,
    next: u64,
    held: BTreeMap<u64, Vec<u8>>,
    written: u64,
    joined: u32,
    /// The first failure, until the first lane takes it.
    failure: Option<Stop>,
    failed: bool,
    /// The first lane has answered the sender: the other lanes may close.
    ended: bool,
}

impl State {
    /// Writes the next chunk into the lander.
    fn write(&mut self, bytes: &[u8]) -> std::result::Result<(), Stop> {
        let out = (self.out.as_mut()).ok_or_else(|| protocol("data after the end"))?;
        // The queue fails only when the lander has gone: its report says why.
        out.write_all(bytes).map_err(|_| Stop::Lander)?;
        self.written += bytes.len() as u64;
        self.next += 1;
        Ok(())
    }
}

impl Transfer {
    /// A transfer into `out` of up to `lanes` lanes, whose waits fail once `stop` is
    /// cancelled.
    pub(crate) fn new(out: QueueWriter, lanes: u32, timeout: Duration, stop: Cancel) -> Transfer {
        Transfer {
            state: Mutex::new(State {
                out: Some(out),
                next: 0,
                held: BTreeMap::new(),
                written: 0,
                joined: 0,
                failure: None,
                failed: false,
                ended: false,
            }),
            moved: Condvar::new(),
            timeout,
            stop,
            joins: lanes.saturating_sub(1),
            cancel: Cancel::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts in one more lane, unless the transfer has all it asked for or is over.
    pub(crate) fn join(&self) -> bool {
        let mut state = self.lock();
        let open = state.joined < self.joins && state.out.is_some() && !state.failed;
        state.joined += u32::from(open);
        open
    }

    /// Carries one lane's DATA into the lander until its END, as `inbound` reads them; returns
    /// what the END counted (on the first lane), or `None` when it failed (the transfer's
    /// failure is recorded: see [`Transfer::failure`]).
    pub(crate) fn carry(
        &self,
        channel: &mut Channel,
        inbound: &mut Inbound,
    ) -> Option<Option<Counted>> {
        channel.cancel_on(Some(self.cancel.clone()));
        let carried = self.carry_until_end(channel, inbound);
        channel.cancel_on(None);
        carried
    }

    fn carry_until_end(
        &self,
        channel: &mut Channel,
        inbound: &mut Inbound,
    ) -> Option<Option<Counted>> {
        let stop = loop {
            let carried = match channel.receive() {
                Ok((kind, payload)) => inbound.carry(kind, payload),
                Err(e) => break inbound.broken(e).map(Stop::Channel),
            };
            match carried {
                Ok(Carried::Chunk { seq, bytes }) => {
                    if let Err(stop) = self.put(seq, bytes) {
                        break stop;
                    }
                }
                Ok(Carried::End(counted)) => return Some(counted),
                Err(e) => break Some(e.into()),
            }
        };
        if let Some(stop) = stop {
            self.fail(stop);
        }
        None
    }

    /// Writes chunk `seq` (with the held ones after it) when it is the next, else holds it;
    /// waits while it is [`WINDOW`] chunks ahead or more. `Err(None)`: another lane failed.
    fn put(&self, seq: u64, bytes: &[u8]) -> std::result::Result<(), Option<Stop>> {
        let mut state = self.wait(|state| seq < state.next + WINDOW, seq)?;
        if seq < state.next || state.held.contains_key(&seq) {
            return Err(Some(protocol(format!("chunk {seq} sent twice")).into()));
        }
        if seq > state.next {
            state.held.insert(seq, bytes.to_vec());
            return Ok(());
        }
        state.write(bytes)?;
        loop {
            let next = state.next;
            let Some(bytes) = state.held.remove(&next) else {
                break;
            };
            state.write(&bytes)?;
        }
        // Only later lanes wait for the next chunk to move (a wake-up is a system call).
        if self.joins > 0 {
            self.moved.notify_all();
        }
        Ok(())
    }

    /// Waits until `ready` holds, the transfer failed (`Err(None)`) or stops, or chunks stop
    /// moving for the timeout (`awaited`: the chunk a lane waits to place).
    fn wait(
        &self,
        ready: impl Fn(&State) -> bool,
        awaited: u64,
    ) -> std::result::Result<MutexGuard<'_, State>, Option<Stop>> {
        let mut state = self.lock();
        let (mut next, mut since) = (state.next, Instant::now());
        loop {
            if state.failed {
                return Err(None);
            }
            if ready(&state) {
                return Ok(state);
            }
            if state.next != next {
                (next, since) = (state.next, Instant::now());
            } else if since.elapsed() >= self.timeout {
                return Err(Some(Stop::Channel(Error::net(
                    NetError::Timeout,
                    format!(
                        "chunk {} did not arrive for {} s, with chunk {awaited} waiting (see \
                         --timeout)",
                        state.next,
                        self.timeout.as_secs()
                    ),
                ))));
            }
            state = wait_a_slice(&self.moved, state, &self.stop).map_err(|e| Some(e.into()))?;
        }
    }

    /// Records the transfer's first failure and wakes every lane.
    pub(crate) fn fail(&self, stop: Stop) {
        let mut state = self.lock();
        if !state.failed {
            state.failed = true;
            state.failure = Some(stop);
            self.cancel.cancel();
        }
        self.moved.notify_all();
    }

    /// After the first lane's END: waits until all `chunks` are in the lander, checks the
    /// byte count, and closes the lander's input; returns the bytes, or `None` when the
    /// transfer failed (see [`Transfer::failure`]).
    pub(crate) fn finish(&self, counted: Counted) -> Option<u64> {
        let Counted { bytes, chunks } = counted;
        let finished = self
            .wait(|state| state.next >= chunks, chunks)
            .and_then(|mut state| {
                if state.next > chunks || !state.held.is_empty() {
                    return Err(Some(protocol("chunks after the counted end").into()));
                }
                if state.written != bytes {
                    let written = state.written;
                    let e = truncated(&format!("{written} of {bytes} bytes arrived"));
                    return Err(Some(e.into()));
                }
                state.out = None;
                Ok(())
            });
        match finished {
            Ok(()) => Some(bytes),
            Err(stop) => {
                if let Some(stop) = stop {
                    self.fail(stop);
                }
                None
            }
        }
    }

    /// The transfer's failure, once (the first lane reports it).
    pub(crate) fn failure(&self) -> Option<Stop> {
        self.lock().failure.take()
    }

    /// Closes the lander's input (a failed transfer's, once the lander was stopped).
    pub(crate) fn close(&self) {
        drop(self.lock().out.take());
    }

    /// The first lane answered the sender: the other lanes may close.
    pub(crate) fn end(&self) {
        self.lock().ended = true;
        self.moved.notify_all();
    }

    /// Waits (up to the timeout) until the first lane answered the sender: a later lane
    /// that closed first could make the sender report the closing, not the answer.
    pub(crate) fn linger(&self) {
        let state = self.lock();
        let _ = self
            .moved
            .wait_timeout_while(state, self.timeout, |state| !state.ended);
    }
}

#[cfg(test)]
mod tests;
