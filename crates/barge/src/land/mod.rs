//! Landing: turning decoded events into a tree under a root directory fd. `Feed` passes
//! decoder events to any [`Sink`] (the held-directory policy), the `Driver` runs it over an
//! in-memory archive or a stream; `Land` is what the landers add to `Sink`; [`sync`] is the
//! plain system-call lander, [`uring`] the batched one, [`parallel`] the threaded engine.

pub mod parallel;
pub mod restore;
pub mod select;
pub mod sync;
pub mod uring;

use std::sync::Arc;

use crate::error::TreePath;
use crate::error::{Error, Result};
use crate::format::index::Index;
use crate::format::{decode_each, Event, FormatError, Limits};
use crate::interrupt::Cancel;
use crate::owners::Owners;
use crate::source::{read_events, ByteStream};
use crate::tree::{Content, DirPath, Entry, Kind, Meta, Sink, Xattrs};
use crate::{Listener, Progress};
use select::{Decision, Select};

/// A sink that creates a tree below a root directory, with what only landing needs.
pub(crate) trait Land: Sink<Error = Error> {
    /// [`Sink::enter_dir`], answering true when it created the directory and false when it
    /// merged into one that was there (whose mode it then leaves alone).
    fn enter(&mut self, dir: &Entry<'_>) -> Result<bool>;
    /// Notes that the file `name` in the current directory, which this unpack created with
    /// link id `id` (on another thread), is where hard links to `id` go.
    fn link_here(&mut self, id: u64, name: &[u8]);
    /// What it landed so far.
    fn summary(&self) -> LandSummary;
    /// The sync lander it is or wraps, in the directory it is in: it lands the files that
    /// several landers share (`sync::SharedFile`).
    fn sync_lander(&mut self) -> &mut sync::SyncLander;
    /// Whether it holds back work it was given (creations queued for one batch of calls),
    /// whose failure a later call reports.
    fn holds_back(&self) -> bool {
        false
    }
}

/// What an unpack created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LandSummary {
    /// Directories created (or merged into when they already existed).
    pub dirs: u64,
    /// Files created.
    pub files: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// Symlinks created.
    pub symlinks: u64,
    /// Hard links made.
    pub hard_links: u64,
    /// Fifos and devices created.
    pub specials: u64,
    /// Entries skipped because their name existed ([`restore::Existing::Skip`]).
    pub kept: u64,
    /// What the process could not restore.
    pub not_restored: restore::NotRestored,
    /// The mode the archive's root record gives a destination this unpack created.
    pub root_mode: Option<u32>,
}

impl LandSummary {
    /// Adds what `other` landed, except its directories.
    pub(crate) fn add_entries(&mut self, other: &LandSummary) {
        self.files += other.files;
        self.bytes += other.bytes;
        self.symlinks += other.symlinks;
        self.hard_links += other.hard_links;
        self.specials += other.specials;
        self.kept += other.kept;
        self.not_restored.add(&other.not_restored);
    }

    /// Adds what `other` landed, its directories too; a root's mode, where this has none.
    pub(crate) fn add(&mut self, other: &LandSummary) {
        self.add_entries(other);
        self.dirs += other.dirs;
        self.root_mode = self.root_mode.or(other.root_mode);
    }
}

/// The content of a file of `size` bytes whose message came with `data`: all of it, or the
/// start of a stream.
fn content(size: u64, data: &[u8]) -> Content<'_> {
    if data.len() as u64 == size {
        Content::Bytes(data)
    } else {
        Content::Stream { size, first: data }
    }
}

/// The one policy between decoded events and a sink: each `DIR` is held back until the next
/// event shows whether the directory stays empty (then it is [`Sink::empty_dir`], never
/// entered), entries within the first `strip` path components are dropped
/// (`--strip-components`), and a stop request ends the feeding. The [`Driver`] and the
/// threaded engine's batch planner (`parallel`) both feed through it.
#[derive(Default)]
pub(crate) struct Feed {
    /// The metadata of the directory held back; its name and extended attributes are in
    /// `held_name` and `held_xattrs`.
    held: Option<Meta>,
    held_name: Vec<u8>,
    held_xattrs: Vec<u8>,
    /// Leading path components to drop.
    strip: usize,
    /// The archive depth of the entries to come (the root is 0), when stripping.
    depth: usize,
    /// The archive path of the current directory, when stripping.
    path: DirPath,
    /// The data coming belongs to a dropped file.
    dropping: bool,
    /// Archive paths of the dropped files that hard links may name, by link id.
    dropped_links: Vec<(u64, TreePath)>,
    /// Ends the feeding once cancelled.
    cancel: Cancel,
    /// Which entries to take (PATHs, `--exclude`), and which PATHs matched one.
    select: Select,
    matched: Vec<bool>,
    /// The depth of the directory left out whole, or taken whole, that the feed is in.
    leaving: Option<usize>,
    taking: Option<usize>,
    /// The sparse file being passed on, as [`Sink::data`] and [`Sink::hole`]s.
    sparse: Sparse,
    /// Owners are given by the names they were recorded with (see [`by_name`]).
    owners: Option<Arc<Owners>>,
    /// Told each entry passed on (`-v`), by its path as it lands (`told`).
    listener: Option<Listener>,
    told: DirPath,
}

/// Where a sparse file (version 2) is: what is left of its size, extents and current
/// extent's data, and where the last extent ended.
#[derive(Default)]
struct Sparse {
    size: u64,
    extents: u32,
    data_left: u64,
    end: u64,
}

impl Sparse {
    /// `len` bytes of data came: at the end of the last extent, the hole after it.
    fn data<S: Sink>(&mut self, len: u64, sink: &mut S) -> std::result::Result<(), S::Error> {
        self.data_left -= len;
        if self.data_left == 0 && self.extents == 0 && self.size > self.end {
            let tail = self.size - self.end;
            self.size = 0;
            return sink.hole(tail);
        }
        Ok(())
    }
}

impl Feed {
    /// A feed that drops the first `strip` components of every path (tar's
    /// `--strip-components`): entries with no more components than that are skipped.
    /// Stops once `cancel` is cancelled.
    pub(crate) fn new(strip: usize, cancel: Cancel) -> Feed {
        Feed {
            strip,
            cancel,
            ..Feed::default()
        }
    }

    /// Takes only the entries `select` takes (see [`Select`]).
    pub(crate) fn select(mut self, select: Select) -> Feed {
        self.matched = vec![false; select.len()];
        self.select = select;
        self
    }

    /// Gives entries the ids their owner names have in `owners` (see [`by_name`]).
    pub(crate) fn owners(mut self, owners: Option<Arc<Owners>>) -> Feed {
        self.owners = owners;
        self
    }

    /// Tells `listener` each entry passed on.
    pub(crate) fn listener(mut self, listener: Option<Listener>) -> Feed {
        self.listener = listener;
        self
    }

    /// Tells the listener, if any, of the entry `name` of `kind` passed on.
    fn tell(&self, name: &[u8], kind: Kind) {
        if let Some(listener) = &self.listener {
            listener.tell(self.told.as_bytes(), name, kind);
        }
    }

    /// Whether some entries may be left out.
    fn filtering(&self) -> bool {
        self.strip > 0 || !self.select.is_all()
    }

    /// The archive ended: a PATH that matched nothing is an error.
    pub(crate) fn ended(&self) -> Result<()> {
        match self.select.unmatched(&self.matched) {
            Some(path) => Err(Error::NotInArchive { path }),
            None => Ok(()),
        }
    }

    /// Whether a directory is held back (decoded, not passed on yet).
    pub(crate) fn holding(&self) -> bool {
        self.held.is_some()
    }

    /// The held directory, with `meta`.
    fn held_entry(&self, meta: Meta) -> Entry<'_> {
        Entry {
            xattrs: Xattrs(&self.held_xattrs),
            ..Entry::dir(&self.held_name, meta)
        }
    }

    pub(crate) fn enter_held<S: Sink>(
        &mut self,
        sink: &mut S,
    ) -> std::result::Result<(), S::Error> {
        let Some(meta) = self.held.take() else {
            return Ok(());
        };
        sink.enter_dir(&self.held_entry(meta))?;
        if self.listener.is_some() {
            self.tell(&self.held_name, Kind::Dir);
            self.told.enter(&self.held_name);
        }
        Ok(())
    }

    /// Passes `event`, whose owner was recorded with the user and group `names`, on to
    /// `sink` (unless a stop was requested).
    pub(crate) fn event<S: Sink>(
        &mut self,
        event: Event<'_>,
        names: (&[u8], &[u8]),
        sink: &mut S,
    ) -> std::result::Result<(), S::Error> {
        self.cancel.check()?;
        let event = match &self.owners {
            Some(owners) => by_name(event, names, owners),
            None => event,
        };
        if self.filtering() && self.dropped(&event)? {
            return Ok(());
        }
        match event {
            Event::Dir(dir) => {
                self.enter_held(sink)?;
                self.held_name.clear();
                self.held_name.extend_from_slice(dir.name);
                self.held_xattrs.clear();
                self.held_xattrs.extend_from_slice(dir.xattrs.0);
                self.held = Some(dir.meta);
                Ok(())
            }
            Event::Pop => match self.held.take() {
                Some(meta) => {
                    sink.empty_dir(&self.held_entry(meta))?;
                    self.tell(&self.held_name, Kind::Dir);
                    Ok(())
                }
                None => {
                    sink.leave_dir()?;
                    if self.listener.is_some() {
                        self.told.leave();
                    }
                    Ok(())
                }
            },
            Event::File { entry, size, data } => {
                self.enter_held(sink)?;
                sink.file(&entry, content(size, data))?;
                self.tell(entry.name, Kind::File);
                Ok(())
            }
            Event::Data(data) => {
                sink.data(data)?;
                if self.sparse.data_left > 0 {
                    self.sparse.data(data.len() as u64, sink)?;
                }
                Ok(())
            }
            Event::SparseFile {
                entry,
                size,
                extents,
            } => {
                self.enter_held(sink)?;
                sink.file(&entry, Content::Stream { size, first: &[] })?;
                self.tell(entry.name, Kind::File);
                self.sparse = Sparse {
                    size,
                    extents,
                    data_left: 0,
                    end: 0,
                };
                if extents == 0 && size > 0 {
                    sink.hole(size)?;
                }
                Ok(())
            }
            Event::Extent { at, len, data } => {
                let sparse = &mut self.sparse;
                let gap = at - sparse.end;
                (sparse.extents, sparse.data_left, sparse.end) =
                    (sparse.extents - 1, len, at + len);
                if gap > 0 {
                    sink.hole(gap)?;
                }
                sink.data(data)?;
                self.sparse.data(data.len() as u64, sink)
            }
            Event::Symlink { entry, target } => {
                self.enter_held(sink)?;
                sink.symlink(&entry, target)?;
                self.tell(entry.name, Kind::Symlink);
                Ok(())
            }
            Event::HardLink { entry, target } => {
                self.enter_held(sink)?;
                sink.hard_link(&entry, target)?;
                self.tell(entry.name, Kind::File);
                Ok(())
            }
            Event::Special { entry, device } => {
                self.enter_held(sink)?;
                sink.special(&entry, device)?;
                self.tell(entry.name, entry.kind);
                Ok(())
            }
            // With leading components stripped, the archive's root is not DEST.
            Event::Root { meta, xattrs } if self.strip == 0 => sink.root(&meta, xattrs),
            Event::Root { .. } => Ok(()),
            Event::End { .. } | Event::Padding | Event::Segment | Event::Index(_) => Ok(()),
        }
    }

    /// Whether stripping or the selection drops `event`, keeping track of the archive depth
    /// and path; a hard link to a dropped file is an error.
    fn dropped(&mut self, event: &Event<'_>) -> Result<bool> {
        let entry = match event {
            Event::Data(_) | Event::Extent { .. } => return Ok(self.dropping),
            Event::End { .. }
            | Event::Padding
            | Event::Root { .. }
            | Event::Segment
            | Event::Index(_) => return Ok(false),
            Event::Pop => {
                self.depth -= 1;
                self.path.leave();
                let left_out = self.leaving.is_some_and(|at| self.depth >= at);
                if self.leaving == Some(self.depth) {
                    self.leaving = None;
                }
                if self.taking == Some(self.depth) {
                    self.taking = None;
                }
                return Ok(self.depth < self.strip || left_out);
            }
            Event::Dir(entry)
            | Event::File { entry, .. }
            | Event::SparseFile { entry, .. }
            | Event::Symlink { entry, .. }
            | Event::HardLink { entry, .. }
            | Event::Special { entry, .. } => entry,
        };
        let dir = matches!(event, Event::Dir(_));
        let mut dropped = self.depth < self.strip || self.leaving.is_some();
        if !dropped && !self.select.is_all() {
            let path = self.path.join(entry.name);
            let within = self.taking.is_some();
            match self.select.decide(&path.0, dir, within, &mut self.matched) {
                Decision::Leave => {
                    dropped = true;
                    if dir {
                        self.leaving = Some(self.depth);
                    }
                }
                Decision::Take if dir && !within => self.taking = Some(self.depth),
                Decision::Take | Decision::Enter => {}
            }
        }
        self.dropping = dropped && matches!(event, Event::File { .. } | Event::SparseFile { .. });
        match event {
            Event::Dir(_) => {
                self.depth += 1;
                self.path.enter(entry.name);
            }
            Event::File { .. } | Event::SparseFile { .. } if dropped => {
                if let Some(id) = entry.link_id {
                    self.dropped_links.push((id, self.path.join(entry.name)));
                }
            }
            Event::HardLink { target, .. } if !dropped => {
                let at = self
                    .dropped_links
                    .binary_search_by_key(target, |(id, _)| *id);
                if let Ok(i) = at {
                    return Err(Error::StrippedLink {
                        path: self.path.join(entry.name),
                        target: self.dropped_links[i].1.clone(),
                    });
                }
            }
            _ => {}
        }
        Ok(dropped)
    }
}

/// `event` with the owner of its entry (or root) given the uid of its user name and the gid
/// of its group name where `owners` has them, else keeping the recorded ids (tar's rule).
fn by_name<'a>(mut event: Event<'a>, (user, group): (&[u8], &[u8]), owners: &Owners) -> Event<'a> {
    let meta = match &mut event {
        Event::Dir(entry)
        | Event::File { entry, .. }
        | Event::SparseFile { entry, .. }
        | Event::Symlink { entry, .. }
        | Event::Special { entry, .. } => &mut entry.meta,
        Event::Root { meta, .. } => meta,
        _ => return event,
    };
    if let Some(owner) = &mut meta.owner {
        if !user.is_empty() {
            owner.uid = owners.uid(user, owner.uid);
        }
        if !group.is_empty() {
            owner.gid = owners.gid(group, owner.gid);
        }
    }
    event
}

/// Feeds the events of an archive in memory or a stream to a [`Sink`] through a [`Feed`],
/// counting progress as they are decoded.
pub(crate) struct Driver<'p, S: Sink> {
    sink: S,
    feed: Feed,
    progress: &'p Progress,
}

impl<'p, S: Sink> Driver<'p, S> {
    /// Wraps `sink`, reporting to `progress`.
    pub(crate) fn new(sink: S, progress: &'p Progress) -> Self {
        Driver {
            sink,
            feed: Feed::default().listener(progress.listener()),
            progress,
        }
    }

    /// Drops the first `strip` components of every path (see [`Feed::new`]) and takes only
    /// what `select` takes.
    pub(crate) fn filter(mut self, strip: usize, select: Select) -> Self {
        let feed = std::mem::take(&mut self.feed);
        self.feed = Feed { strip, ..feed }.select(select);
        self
    }

    /// Stops once `cancel` is cancelled.
    pub(crate) fn cancel(mut self, cancel: Cancel) -> Self {
        self.feed.cancel = cancel;
        self
    }

    /// Gives owners by name (see [`Feed::owners`]).
    pub(crate) fn owners(mut self, owners: Option<Arc<Owners>>) -> Self {
        self.feed.owners = owners;
        self
    }

    /// Counts and passes on one event, whose owner has the user and group `names`.
    fn event(
        &mut self,
        event: Event<'_>,
        names: (&[u8], &[u8]),
    ) -> std::result::Result<(), S::Error> {
        count(self.progress, &event);
        self.feed.event(event, names, &mut self.sink)
    }

    /// Drives the sink with a complete archive held in memory.
    pub(crate) fn run_bytes(
        mut self,
        input: &[u8],
        limits: Limits,
    ) -> std::result::Result<(), S::Error> {
        let result = decode_each(input, limits, |decoder, event| {
            self.event(event, decoder.owner_names())
        });
        self.close(result)
    }

    /// Drives the sink with the entries of a version 2 archive as its index tells of them
    /// ([`Index::events`]).
    pub(crate) fn run_index(mut self, index: &Index) -> std::result::Result<(), S::Error> {
        let result = index.events(|event| self.event(event, (&[], &[])));
        self.close(result.map(|()| index.entries()))
    }

    /// Drives the sink with an archive read from `input` (a pipe, socket or file), holding
    /// at most one buffer of it in memory.
    pub(crate) fn run_stream(
        mut self,
        input: ByteStream<'_>,
        limits: Limits,
    ) -> std::result::Result<(), S::Error> {
        let result = read_events(input, limits, |decoder, event| {
            self.event(event, decoder.owner_names())
        });
        self.close(result)
    }

    fn close(
        mut self,
        result: std::result::Result<u64, S::Error>,
    ) -> std::result::Result<(), S::Error> {
        match result.and_then(|_| Ok(self.feed.ended()?)) {
            Ok(()) => self.sink.finish(),
            Err(e) => Err(self.sink.abort(e)),
        }
    }
}

/// Counts `event` in `progress`: an entry, or bytes of data.
pub(crate) fn count(progress: &Progress, event: &Event<'_>) {
    match event {
        Event::File { data, .. } => progress.add_entry(data.len() as u64),
        Event::Data(data) | Event::Extent { data, .. } => progress.add_bytes(data.len() as u64),
        Event::Dir(_)
        | Event::SparseFile { .. }
        | Event::Symlink { .. }
        | Event::HardLink { .. }
        | Event::Special { .. } => progress.add_entry(0),
        Event::Pop
        | Event::End { .. }
        | Event::Padding
        | Event::Root { .. }
        | Event::Segment
        | Event::Index(_) => {}
    }
}

/// The offset of the message the input ended in, when `error` means the input ended early.
pub fn truncation_offset(error: &Error) -> Option<u64> {
    match error {
        Error::Format {
            kind: FormatError::Truncated,
            offset,
            ..
        } => Some(*offset),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsFd;

    use super::*;
    use crate::format::Encoder;
    use crate::tree::{Device, Kind, Recorded, Recording};

    /// More than a pipe holds, so a streamed file of this size arrives in pieces.
    const BIG: usize = 200_000;

    fn big() -> Vec<u8> {
        (0..BIG).map(|i| (i % 251) as u8).collect()
    }

    /// `a/` holding `b/` (with a big file), an empty `e/` and `f`; an empty `z/`; an empty
    /// file `top`.
    fn archive() -> Vec<u8> {
        let mut encoder = Encoder::new(Vec::new());
        encoder.dir(b"a", 0o755).unwrap();
        encoder.dir(b"b", 0o750).unwrap();
        encoder.file(b"big", 0o600, &big()).unwrap();
        encoder.pop().unwrap();
        encoder.dir(b"e", 0o700).unwrap();
        encoder.pop().unwrap();
        encoder.file(b"f", 0o644, b"hello").unwrap();
        encoder.pop().unwrap();
        encoder.dir(b"z", 0o755).unwrap();
        encoder.pop().unwrap();
        encoder.file(b"top", 0o644, b"").unwrap();
        encoder.finish().unwrap()
    }

    /// What a sink driven with [`archive`] receives.
    fn calls() -> Vec<Recorded> {
        let mode = Meta::with_mode;
        vec![
            Recorded::Enter(b"a".to_vec(), mode(0o755)),
            Recorded::Enter(b"b".to_vec(), mode(0o750)),
            Recorded::File(b"big".to_vec(), mode(0o600), big()),
            Recorded::Leave,
            Recorded::Empty(b"e".to_vec(), mode(0o700)),
            Recorded::File(b"f".to_vec(), mode(0o644), b"hello".to_vec()),
            Recorded::Leave,
            Recorded::Empty(b"z".to_vec(), mode(0o755)),
            Recorded::File(b"top".to_vec(), mode(0o644), Vec::new()),
            Recorded::Finish,
        ]
    }

    /// A [`Recording`] that also counts [`Sink::data`] calls.
    #[derive(Default)]
    struct Pieces {
        recording: Recording,
        data: usize,
    }

    impl Sink for Pieces {
        type Error = Error;

        fn enter_dir(&mut self, entry: &Entry<'_>) -> Result<()> {
            self.recording.enter_dir(entry)
        }
        fn leave_dir(&mut self) -> Result<()> {
            self.recording.leave_dir()
        }
        fn empty_dir(&mut self, entry: &Entry<'_>) -> Result<()> {
            self.recording.empty_dir(entry)
        }
        fn file(&mut self, entry: &Entry<'_>, content: Content<'_>) -> Result<()> {
            self.recording.file(entry, content)
        }
        fn data(&mut self, data: &[u8]) -> Result<()> {
            self.data += 1;
            self.recording.data(data)
        }
        fn symlink(&mut self, entry: &Entry<'_>, target: &[u8]) -> Result<()> {
            self.recording.symlink(entry, target)
        }
        fn finish(&mut self) -> Result<()> {
            self.recording.finish()
        }
    }

    /// Drives a [`Pieces`] with `bytes` written into a pipe 1000 bytes at a time.
    fn drive_piped(bytes: Vec<u8>) -> (Pieces, Result<()>, Progress) {
        let (reader, writer) = rustix::pipe::pipe().unwrap();
        let writing = std::thread::spawn(move || {
            let mut writer = std::fs::File::from(writer);
            for piece in bytes.chunks(1000) {
                writer.write_all(piece).unwrap();
            }
        });
        let (mut sink, progress) = (Pieces::default(), Progress::default());
        let input = ByteStream::new(reader.as_fd());
        let result = Driver::new(&mut sink, &progress).run_stream(input, Limits::default());
        writing.join().unwrap();
        (sink, result, progress)
    }

    #[test]
    fn an_archive_in_memory_drives_a_sink_with_held_dirs_and_empty_ones() {
        let (mut sink, progress) = (Recording::default(), Progress::default());
        let driver = Driver::new(&mut sink, &progress);
        driver.run_bytes(&archive(), Limits::default()).unwrap();
        assert_eq!(sink.calls, calls());
        assert_eq!((progress.entries(), progress.bytes()), (7, BIG as u64 + 5));
    }

    #[test]
    fn a_stream_in_small_pieces_drives_the_same_calls_with_the_data_reassembled() {
        let (sink, result, progress) = drive_piped(archive());
        result.unwrap();
        assert_eq!(sink.recording.calls, calls());
        assert!(sink.data > 0, "the big file came in one piece");
        assert_eq!((progress.entries(), progress.bytes()), (7, BIG as u64 + 5));
    }

    #[test]
    fn a_cut_stream_aborts_inside_the_file_and_never_finishes() {
        let mut bytes = archive();
        let cut = bytes.len() / 2;
        bytes.truncate(cut);
        let (sink, result, _) = drive_piped(bytes);
        let error = result.unwrap_err();
        assert!(truncation_offset(&error).is_some(), "{error}");
        let landed = &sink.recording.calls;
        assert_eq!(landed[..2], calls()[..2]);
        match &landed[2..] {
            [Recorded::File(name, _, data)] => {
                assert_eq!(name, b"big");
                assert!(
                    data.len() < BIG && big().starts_with(data),
                    "{}",
                    data.len()
                );
            }
            other => panic!("after a/b/: {other:?}"),
        }
    }

    /// An extended archive: `top/` (with an xattr) holding `a/` (holding only a symlink),
    /// a linked file `f`, and `hold/` holding only a hard link to it; a fifo `p` at the root.
    fn extended() -> Vec<u8> {
        let mut xattrs = Vec::new();
        Xattrs::push(&mut xattrs, b"user.x", b"1");
        let mut top = Entry::dir(b"top", Meta::with_mode(0o750));
        top.xattrs = Xattrs(&xattrs);
        let mut f = Entry::file(b"f", Meta::with_mode(0o644));
        f.link_id = Some(3);
        let mut encoder = Encoder::extended(Vec::new());
        encoder.dir_with(&top).unwrap();
        encoder.dir(b"a", 0o755).unwrap();
        let link = Entry::new(b"l", Kind::Symlink, Meta::default());
        encoder.symlink(&link, b"../f").unwrap();
        encoder.pop().unwrap();
        encoder.file_with(&f, b"data").unwrap();
        encoder.dir(b"hold", 0o755).unwrap();
        encoder.hard_link(b"h", 3).unwrap();
        encoder.pop().unwrap();
        encoder.pop().unwrap();
        let fifo = Entry::new(b"p", Kind::Fifo, Meta::with_mode(0o600));
        encoder.special(&fifo, Device::default()).unwrap();
        encoder.finish().unwrap()
    }

    fn drive_stripped(archive: &[u8], strip: usize) -> (Recording, Result<()>) {
        let (mut sink, progress) = (Recording::default(), Progress::default());
        let driver = Driver::new(&mut sink, &progress).filter(strip, Select::default());
        let result = driver.run_bytes(archive, Limits::default());
        (sink, result)
    }

    /// Symlinks, hard links and special files reach the sink, each after the directory
    /// held back for it is entered (with its extended attributes); stripping one component
    /// drops the root's entries and lands `top`'s contents in its place.
    #[test]
    fn new_kinds_enter_held_dirs_and_strip_components_drops_leading_ones() {
        let (sink, result) = drive_stripped(&extended(), 0);
        result.unwrap();
        let (mode, dir) = (Meta::with_mode, |name: &[u8]| {
            Recorded::Enter(name.to_vec(), Meta::with_mode(0o755))
        });
        let symlink = Recorded::Symlink(b"l".to_vec(), mode(0o777), b"../f".to_vec());
        let file = Recorded::File(b"f".to_vec(), mode(0o644), b"data".to_vec());
        let (hard_link, fifo) = (
            Recorded::HardLink(b"h".to_vec(), 3),
            Recorded::Special(b"p".to_vec(), Kind::Fifo, mode(0o600), Device::default()),
        );
        let inner = [
            dir(b"a"),
            symlink,
            Recorded::Leave,
            Recorded::LinkId(3),
            file,
            dir(b"hold"),
            hard_link,
            Recorded::Leave,
        ];
        let mut whole = vec![
            Recorded::Xattrs(b"\x08\x06user.x\x01\x00\x00\x001".to_vec()),
            Recorded::Enter(b"top".to_vec(), mode(0o750)),
        ];
        whole.extend(inner.iter().cloned());
        whole.extend([Recorded::Leave, fifo, Recorded::Finish]);
        assert_eq!(sink.calls, whole);

        let (sink, result) = drive_stripped(&extended(), 1);
        result.unwrap();
        let mut stripped = inner.to_vec();
        stripped.push(Recorded::Finish);
        assert_eq!(sink.calls, stripped);

        // Two: `top/a/l` and `top/hold/h` are kept, but `h`'s file `top/f` is not.
        let (sink, result) = drive_stripped(&extended(), 2);
        assert!(
            matches!(result, Err(Error::StrippedLink { .. })),
            "{result:?}"
        );
        let symlink = Recorded::Symlink(b"l".to_vec(), mode(0o777), b"../f".to_vec());
        assert_eq!(sink.calls, [symlink]);
    }

    /// A hard link whose file was stripped is an error naming both, before anything
    /// lands for it.
    #[test]
    fn a_hard_link_to_a_stripped_file_names_both() {
        let mut encoder = Encoder::extended(Vec::new());
        encoder.dir(b"top", 0o755).unwrap();
        let mut f = Entry::file(b"f", Meta::with_mode(0o644));
        f.link_id = Some(1);
        encoder.file_with(&f, b"x").unwrap();
        encoder.dir(b"d", 0o755).unwrap();
        encoder.hard_link(b"h", 1).unwrap();
        let (sink, result) = drive_stripped(&encoder.finish().unwrap(), 2);
        match result {
            Err(Error::StrippedLink { path, target }) => {
                assert_eq!((path.0, target.0), (b"top/d/h".to_vec(), b"top/f".to_vec()));
            }
            other => panic!("{other:?}"),
        }
        assert!(sink.calls.is_empty(), "{:?}", sink.calls);
    }

    /// The data of a stripped file streamed in pieces is dropped with it.
    #[test]
    fn a_stripped_file_streamed_in_pieces_is_dropped_whole() {
        let mut encoder = Encoder::new(Vec::new());
        encoder.file(b"big", 0o644, &big()).unwrap();
        encoder.dir(b"d", 0o755).unwrap();
        encoder.file(b"kept", 0o600, b"k").unwrap();
        let (reader, writer) = rustix::pipe::pipe().unwrap();
        let archive = encoder.finish().unwrap();
        let writing = std::thread::spawn(move || std::fs::File::from(writer).write_all(&archive));
        let (mut sink, progress) = (Recording::default(), Progress::default());
        let input = ByteStream::new(reader.as_fd());
        let driver = Driver::new(&mut sink, &progress).filter(1, Select::default());
        driver.run_stream(input, Limits::default()).unwrap();
        writing.join().unwrap().unwrap();
        let kept = Recorded::File(b"kept".to_vec(), Meta::with_mode(0o600), b"k".to_vec());
        assert_eq!(sink.calls, [kept, Recorded::Finish]);
        assert_eq!(progress.entries(), 3, "progress counts what was decoded");
    }

    /// The largest group there is (a symlink with a 255-byte name, a 4095-byte target and
    /// extended attributes of the full 262,144 bytes) streamed in small pieces arrives whole.
    #[test]
    fn the_largest_group_streams_through_the_buffer() {
        let mut xattrs = Vec::new();
        for (i, size) in [65_536, 65_536, 65_536, 65_488].into_iter().enumerate() {
            Xattrs::push(
                &mut xattrs,
                format!("user.{i}").as_bytes(),
                &vec![i as u8; size],
            );
        }
        assert_eq!(xattrs.len(), crate::format::MAX_XATTRS);
        let name = [b'n'; 255];
        let mut link = Entry::new(&name, Kind::Symlink, Meta::default());
        link.meta.mtime = Some(crate::tree::Timestamp { sec: 1, nsec: 2 });
        link.meta.owner = Some(crate::tree::Owner { uid: 3, gid: 4 });
        link.xattrs = Xattrs(&xattrs);
        let mut encoder = Encoder::extended(Vec::new());
        encoder.symlink(&link, &[b't'; 4095]).unwrap();
        let archive = encoder.finish().unwrap();
        assert_eq!(archive.len(), 8 + 266_520 + 9, "the group is the largest");
        let (sink, result, _) = drive_piped(archive);
        result.unwrap();
        let meta = Meta {
            mode: 0o777,
            ..link.meta
        };
        let symlink = Recorded::Symlink(name.to_vec(), meta, vec![b't'; 4095]);
        let want = [Recorded::Xattrs(xattrs), symlink, Recorded::Finish];
        // Not assert_eq: the values are too long to print.
        assert!(
            sink.recording.calls == want,
            "{} calls",
            sink.recording.calls.len()
        );
    }
}
