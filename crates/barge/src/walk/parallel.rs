//! The parallel walker: a pool of threads over the directories of a tree, each directory
//! opened relative to its parent's fd, read once with getdents64 and shown to a per-thread
//! visitor, in no particular order. Modelled on ripgrep's `ignore::WalkParallel`: a
//! [`ParallelVisitorBuilder`] makes one [`ParallelVisitor`] per thread, and visitors steer
//! the walk with [`WalkState`].
//!
//! The walker owns traversal, threads, work sharing and the fd budget: a directory's fd is
//! held only while it has unopened subdirectories, and past a budget below `RLIMIT_NOFILE`
//! fds are closed and reopened by name from the nearest open ancestor (checked by inode),
//! so any depth works within the fd limit. Each opened directory costs one `openat` and one
//! `statx` on its fd, every other entry one `statx` relative to its directory's fd (both
//! with the one `tree::STATX_MASK`): visitors get each entry with its [`Meta`] and that
//! `statx`, and stat nothing themselves. A visitor that reads every file (the copier) has
//! the walk open each regular file and state it on its fd instead, handed over open
//! ([`ParallelVisitor::opens_files`]): the lookup by name is made once. Nothing is
//! followed: directories and files are opened with `O_NOFOLLOW`, by single-component names,
//! entries stated with `AT_SYMLINK_NOFOLLOW`.
//!
//! A visitor attaches its own state to each directory it enters ([`ParallelVisitor::State`]:
//! du's subtotal slot, a copier's destination directory fd), which the directory's entries
//! and subdirectories see, on whichever thread they are visited.
//!
//! A visitor may also leave work below the directory for any thread
//! ([`ParallelVisitor::Job`]: a copier's large file, or a chunk of one): the walker shares
//! jobs as it shares directories, each holding its directory (state and fd) until it has run.
//!
//! With `WalkParallel::solo` each helper thread has its own fd table (`sys::thread::go_solo`):
//! with one shared table every `openat` and `close` takes the table's lock and every use of
//! an fd counts references on its file, which stops the walk scaling past a few cores. A
//! directory's fd then serves only the thread that opened it: another one reopens the
//! directory by name from the nearest directory it holds itself (at worst the root, whose fd
//! every thread has), checking each level's inode. A thread takes its own subdirectories
//! first, and gives the oldest half of them away only when another thread is idle, so
//! reopens are rare (one per subtree that changes threads).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::AcqRel, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::Scope;
use std::time::{Duration, Instant};

use rustix::fs::{openat, statx, AtFlags, FileType, Mode, Statx, StatxFlags};
use rustix::io::Errno;
use rustix::process::{getrlimit, Resource};

use crate::error::{Error, TreePath};
use crate::exclude::Exclude;
use crate::sys::dir::{dirent_buffer, Listing};
use crate::sys::thread::{go_solo, reap, spawn_elsewhere, Queued, ThreadFd};
use crate::sys::{reopen, DIR_FLAGS, FILE_FLAGS};
use crate::tree::STATX_MASK;
use crate::tree::{Entry, Kind, Meta};
use crate::walk::{Members, Take};

/// A directory taking longer than this plus [`SLOW_ENTRY`] per entry, its thread on the CPU
/// for less than half of that time, was not in the cache.
const SLOW_DIR: Duration = Duration::from_micros(100);
/// See [`SLOW_DIR`]; a cached entry takes one or two microseconds.
const SLOW_ENTRY: Duration = Duration::from_micros(10);

/// Helper threads start only once the walk has listed this many entries (or met a slow
/// directory): below that, starting a thread costs more than it saves (docs/BENCHMARKS.md,
/// "Design measurements").
const SPAWN_AFTER: u64 = 512;

/// The CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// What a visitor tells the walker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkState {
    /// Go on.
    Continue,
    /// Do not walk this directory (for a non-directory entry, the same as `Continue`).
    Skip,
    /// Stop the walk: no further directory is opened, and every thread stops showing
    /// entries as soon as it sees the request.
    Quit,
}

/// Makes one visitor per walking thread (on that thread, when it starts).
pub trait ParallelVisitorBuilder {
    /// The visitors it makes.
    type Visitor: ParallelVisitor;

    /// A visitor for a new thread; it is dropped when that thread's work ends.
    fn build(&mut self) -> Self::Visitor;
}

/// Sees the entries of a tree, one directory at a time per thread: [`enter_dir`], then
/// [`entry`] for each entry of it that is not a directory, then [`listed`]. Its
/// subdirectories are entered later, on any thread. Every entry comes stated, with its
/// [`Meta`] filled and the `statx` (asked with `tree::STATX_MASK`) beside it.
///
/// [`enter_dir`]: ParallelVisitor::enter_dir
/// [`entry`]: ParallelVisitor::entry
/// [`listed`]: ParallelVisitor::listed
pub trait ParallelVisitor {
    /// What the visitor keeps per directory (given for the root to [`WalkParallel::visit`]).
    type State: Send + Sync;

    /// Work an entry leaves for any thread ([`ParallelVisitor::take_jobs`]), run by
    /// [`ParallelVisitor::run`].
    type Job: Send;

    /// The directory `entry` of `parent`, opened as `fd` and stated as `stat`: its state, or
    /// `Err(Skip)` to leave it unlisted, or `Err(Quit)` to stop.
    fn enter_dir(
        &mut self,
        parent: &Dir<Self::State>,
        entry: &Entry<'_>,
        fd: BorrowedFd<'_>,
        stat: &Statx,
    ) -> Result<Self::State, WalkState>;

    /// An entry of `dir` (open as `fd`) that is not a directory, stated as `stat` (one the
    /// listing did not know the type of, or that was swapped in, and that is a directory
    /// is walked as one instead).
    fn entry(
        &mut self,
        dir: &Dir<Self::State>,
        fd: BorrowedFd<'_>,
        entry: &Entry<'_>,
        stat: &Statx,
    ) -> WalkState;

    /// Whether the walk opens each regular file (`sys::FILE_FLAGS`) and states it through
    /// that fd, handing both to [`ParallelVisitor::opened_file`]: for a visitor that opens
    /// every file anyway, a `statx` on the fd saves the lookup of one by name. By default
    /// not.
    fn opens_files(&self) -> bool {
        false
    }

    /// A regular file of `dir`, as [`ParallelVisitor::entry`] has it, opened by the walk as
    /// `file` ([`ParallelVisitor::opens_files`]; the fd is this thread's only). By default
    /// [`ParallelVisitor::entry`].
    fn opened_file(
        &mut self,
        dir: &Dir<Self::State>,
        fd: BorrowedFd<'_>,
        entry: &Entry<'_>,
        stat: &Statx,
        file: OwnedFd,
    ) -> WalkState {
        drop(file);
        self.entry(dir, fd, entry, stat)
    }

    /// The entry `name` of `dir` could not be stated (`cause`): by default nothing when it
    /// is gone since the listing, else reported to [`ParallelVisitor::error`] as `statx`.
    fn unstated(&mut self, dir: &Dir<Self::State>, name: &[u8], cause: Errno) -> WalkState {
        match cause {
            Errno::NOENT => WalkState::Continue,
            _ => self.error(Error::io("statx", dir.path(Some(name)), cause)),
        }
    }

    /// The listing of `dir` is done (its subdirectories are entered later, maybe on other
    /// threads).
    fn listed(&mut self, _dir: &Dir<Self::State>) {}

    /// The subdirectories of `dir` its listing found, each with whether everything in it is
    /// walked (else only what leads to a member), to be entered later, maybe on other
    /// threads. By default nothing.
    fn will_enter(&mut self, _dir: &Dir<Self::State>, _subdirs: &[(&[u8], bool)]) {}

    /// The subdirectory `name` of `parent` could not be opened or stated (`cause`); `stat`
    /// is its `statx` by name, where that worked. By default reported to
    /// [`ParallelVisitor::error`] as `open directory`.
    fn unopened(
        &mut self,
        parent: &Dir<Self::State>,
        name: &[u8],
        _stat: Option<&Statx>,
        cause: Errno,
    ) -> WalkState {
        self.error(Error::io("open directory", parent.path(Some(name)), cause))
    }

    /// A failure of the walker's own (a directory that could not be read or reopened), with
    /// its path.
    fn error(&mut self, error: Error) -> WalkState;

    /// A member ([`WalkParallel::members`]) the walk did not reach, and why (told after the
    /// walk, to a visitor of its own). By default reported to [`ParallelVisitor::error`].
    fn unreached(&mut self, error: Error) {
        self.error(error);
    }

    /// Moves the jobs the last [`entry`](ParallelVisitor::entry) or
    /// [`run`](ParallelVisitor::run) left into `jobs`, each with its cost in entries listed
    /// (what lets helper threads start, see `SPAWN_AFTER`). By default none.
    fn take_jobs(&mut self, _jobs: &mut Vec<(Self::Job, u64)>) {}

    /// Runs a job left in `dir` (open as `fd`), on any thread; the directory's state lives
    /// until every job left in it has run or been dropped (the walk stopped).
    fn run(&mut self, _dir: &Dir<Self::State>, _fd: BorrowedFd<'_>, _job: Self::Job) -> WalkState {
        WalkState::Continue
    }
}

/// A directory of the walk, as visitors see it: where it is, and the visitor's state for it.
#[derive(Debug)]
pub struct Dir<S> {
    parent: Option<Arc<Dir<S>>>,
    name: Box<[u8]>,
    depth: usize,
    /// Checked when the directory is reopened by name.
    ino: u64,
    /// Open while subdirectories wait to be opened from it (unless over the fd budget), by
    /// the thread that listed it.
    fd: Mutex<Option<Arc<ThreadFd>>>,
    /// Subdirectories not opened yet.
    pending: AtomicUsize,
    /// Everything in it is walked (else only what leads to a member, or is in one).
    whole: bool,
    state: S,
}

impl<S> Dir<S> {
    /// How many levels below the root it is (the root is 0).
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The visitor's state for it.
    pub fn state(&self) -> &S {
        &self.state
    }

    /// The path of `name` in this directory (or of the directory itself): the root's name
    /// joined with the names below it.
    pub fn path(&self, name: Option<&[u8]>) -> TreePath {
        TreePath(self.join(name, true))
    }

    /// The path of `name` in this directory (or of the directory itself) below the root,
    /// without the root's name (empty for the root itself).
    pub fn relative(&self, name: Option<&[u8]>) -> Vec<u8> {
        self.join(name, false)
    }

    /// The path of `name` in this directory, from the root's name when `from_root`, else
    /// from below the root.
    fn join(&self, name: Option<&[u8]>, from_root: bool) -> Vec<u8> {
        let mut names: Vec<&[u8]> = name.into_iter().collect();
        let mut dir = Some(self);
        while let Some(d) = dir {
            if d.parent.is_some() || from_root {
                names.push(&d.name);
            }
            dir = d.parent.as_deref();
        }
        let mut path = Vec::new();
        for part in names.iter().rev() {
            if !path.is_empty() && path.last() != Some(&b'/') {
                path.push(b'/');
            }
            path.extend_from_slice(part);
        }
        path
    }
}

/// A walk of the tree below an open directory.
#[derive(Debug)]
pub struct WalkParallel {
    root: OwnedFd,
    name: Vec<u8>,
    threads: usize,
    exclude: Exclude,
    one_file_system: bool,
    members: Option<Members>,
    solo: bool,
}

impl WalkParallel {
    /// A walk of the directory `root`, named `name` in paths (the path it was opened by);
    /// at most [`Work::Walk`](crate::threads::Work::Walk) threads.
    pub fn new(root: OwnedFd, name: &[u8]) -> WalkParallel {
        WalkParallel {
            root,
            name: name.to_vec(),
            threads: crate::threads::Work::Walk.threads(),
            exclude: Exclude::default(),
            one_file_system: false,
            members: None,
            solo: false,
        }
    }

    /// Gives each helper thread its own fd table (see the module's documentation): for
    /// visitors that use each fd they get only during the call they get it in, and pass no
    /// fd they open to another thread but as a [`ThreadFd`]. The calling thread keeps the
    /// process's table.
    pub(crate) fn solo(mut self, yes: bool) -> WalkParallel {
        self.solo = yes;
        self
    }

    /// Walks only `members` below the root (none: everything): each with everything below
    /// it, and the directories on the way to one, entered with only what leads to a member
    /// (as [`Root::members`](crate::walk::Root::members) for the ordered walker). Each member
    /// not reached is told to [`ParallelVisitor::unreached`] after the walk.
    pub fn members(mut self, members: Option<Members>) -> WalkParallel {
        self.members = members.filter(|m| !m.everything);
        self
    }

    /// Does not list a directory on another filesystem than the root's: visitors see it
    /// entered, and empty (a mount point is kept, its contents are not: `cp -x`).
    pub fn one_file_system(mut self, yes: bool) -> WalkParallel {
        self.one_file_system = yes;
        self
    }

    /// Leaves out what `exclude` matches below the root: visitors never see it, and an
    /// excluded directory is not opened.
    pub fn exclude(mut self, exclude: Exclude) -> WalkParallel {
        self.exclude = exclude;
        self
    }

    /// Uses at most `threads` threads (fewer when the fd limit is low). As many as there are
    /// cores run while directories are read fast; more start, one per slow directory, when
    /// the tree is not cached, to keep many reads in flight.
    pub fn threads(mut self, threads: usize) -> WalkParallel {
        self.threads = threads;
        self
    }

    /// Walks the tree with visitors from `builder`, `root` being the state of the root
    /// directory (which the caller has entered itself). Lists the root on the calling
    /// thread, then shares the rest; returns when every directory is walked or the walk
    /// was stopped.
    pub fn visit<B>(self, builder: &mut B, root: StateOf<B>)
    where
        B: ParallelVisitorBuilder + Send,
    {
        let root_dir = Arc::new(Dir {
            parent: None,
            name: self.name.into(),
            depth: 0,
            ino: 0,
            fd: Mutex::new(None),
            pending: AtomicUsize::new(0),
            whole: self.members.is_none(),
            state: root,
        });
        // A duplicate, to look for the members the walk did not reach once it is done.
        let base = match self.members {
            Some(_) => rustix::io::fcntl_dupfd_cloexec(&self.root, 0).map(Some),
            None => Ok(None),
        };
        let mut walk = Walk::new(builder, self.threads, self.exclude);
        walk.members = self.members.map(Mutex::new);
        walk.solo = self.solo;
        if self.one_file_system {
            // Unknown (a root that cannot be stated): every directory is listed.
            walk.dev = statx(&self.root, "", AtFlags::EMPTY_PATH, StatxFlags::TYPE)
                .ok()
                .map(|st| device(&st));
        }
        let mut visitor = walk.build();
        let mut scratch = Scratch::default();
        // Opened before any helper starts: each has it in its table.
        let root_fd = ThreadFd::everywhere(self.root);
        walk.list(&root_dir, root_fd, &mut visitor, &mut scratch);
        let tasks = std::mem::take(&mut scratch.children);
        std::thread::scope(|scope| {
            for _ in 1..tasks.len().min(walk.want.load(Relaxed)) {
                walk.spawn(scope);
            }
            walk.share(tasks);
            walk.work(scope, scratch, visitor);
        });
        reap();
        if std::env::var_os("BARGE_WALK_STATS").is_some() {
            let (reopened, shared) = (walk.reopened.load(Relaxed), walk.shared.load(Relaxed));
            eprintln!("walk: {shared} tasks shared, {reopened} directories reopened");
        }
        if let Some(members) = walk.members.take() {
            let members = members.into_inner().expect("no panics");
            let mut visitor = walk.build();
            let errors = match &base {
                Ok(base) => base
                    .as_ref()
                    .map_or_else(Vec::new, |fd| members.unreached_errors(fd.as_fd())),
                Err(e) => vec![Error::io("dup", root_dir.path(None), *e)],
            };
            for error in errors {
                visitor.unreached(error);
            }
        }
    }
}

/// The per-directory state of the visitors a builder makes.
pub type StateOf<B> = <<B as ParallelVisitorBuilder>::Visitor as ParallelVisitor>::State;

/// The jobs of the visitors a builder makes.
pub type JobOf<B> = <<B as ParallelVisitorBuilder>::Visitor as ParallelVisitor>::Job;

/// What a worker does next.
enum Task<S, J> {
    /// Open a directory: a name in an opened directory.
    Open {
        parent: Arc<Dir<S>>,
        name: Box<[u8]>,
        /// Everything in it is walked (see [`Dir`]'s `whole`).
        whole: bool,
    },
    /// Run a job left in the directory `dir`, open as `fd` (on the thread that left it;
    /// another reopens it).
    /// (The job is dropped first: what it does when dropped comes before its directory's.)
    Job {
        job: J,
        dir: Arc<Dir<S>>,
        fd: Arc<ThreadFd>,
    },
}

type TaskOf<B> = Task<StateOf<B>, JobOf<B>>;

/// Tasks waiting for a worker, and how many workers are not waiting.
struct Queue<S, J> {
    tasks: Vec<Task<S, J>>,
    active: usize,
}

/// A directory whose fd was reopened, and that fd.
type Reopened<S> = Option<(Arc<Dir<S>>, Arc<ThreadFd>)>;

/// One worker's reusable buffers.
struct Scratch<S, J> {
    buf: Vec<std::mem::MaybeUninit<u8>>,
    listing: Listing,
    /// The subdirectories and jobs of the last task (jobs last: the worker runs them first).
    children: Vec<Task<S, J>>,
    jobs: Vec<(J, u64)>,
    reopened: Reopened<S>,
}

impl<S, J> Default for Scratch<S, J> {
    fn default() -> Scratch<S, J> {
        Scratch {
            buf: dirent_buffer(),
            listing: Listing::default(),
            children: Vec::new(),
            jobs: Vec::new(),
            reopened: None,
        }
    }
}

/// A walk under way.
struct Walk<'b, B: ParallelVisitorBuilder> {
    builder: Mutex<&'b mut B>,
    queue: Mutex<Queue<StateOf<B>, JobOf<B>>>,
    ready: Condvar,
    waiting: AtomicUsize,
    /// Workers started.
    workers: AtomicUsize,
    /// Workers that should be running (not waiting): the cores, more once directories are slow.
    want: AtomicUsize,
    held_fds: AtomicUsize,
    fd_budget: usize,
    threads: usize,
    cores: usize,
    /// Entries listed so far.
    listed: AtomicU64,
    /// A visitor asked to stop.
    quit: AtomicBool,
    /// What is left out (`None` when nothing is).
    exclude: Option<Exclude>,
    /// The root's device, when directories on others are not listed.
    dev: Option<u64>,
    /// What is walked below the root, when not everything.
    members: Option<Mutex<Members>>,
    /// Helper threads have their own fd tables (see [`WalkParallel::solo`]).
    solo: bool,
    /// Tasks given to the queue, and directories reopened for a task (see
    /// `BARGE_WALK_STATS`).
    shared: AtomicU64,
    reopened: AtomicU64,
}

/// The device a `statx` says its entry is on.
fn device(stat: &Statx) -> u64 {
    rustix::fs::makedev(stat.stx_dev_major, stat.stx_dev_minor)
}

impl<'b, B: ParallelVisitorBuilder + Send> Walk<'b, B> {
    fn new(builder: &'b mut B, threads: usize, exclude: Exclude) -> Walk<'b, B> {
        let limit = getrlimit(Resource::Nofile).current.unwrap_or(1024) as usize;
        // Each worker holds up to 4 fds at once (a directory, a reopened chain, its cache).
        let threads = threads.clamp(1, (limit / 8).max(1));
        let cores = crate::threads::Work::Cores.threads();
        Walk {
            builder: Mutex::new(builder),
            queue: Mutex::new(Queue {
                tasks: Vec::new(),
                active: 1,
            }),
            workers: AtomicUsize::new(1),
            want: AtomicUsize::new(cores.min(threads)),
            ready: Condvar::new(),
            waiting: AtomicUsize::new(0),
            held_fds: AtomicUsize::new(0),
            fd_budget: (limit / 2).saturating_sub(8 + 4 * threads),
            threads,
            cores,
            listed: AtomicU64::new(0),
            quit: AtomicBool::new(false),
            exclude: Some(exclude).filter(|e| !e.is_empty()),
            dev: None,
            members: None,
            solo: false,
            shared: AtomicU64::new(0),
            reopened: AtomicU64::new(0),
        }
    }

    fn build(&self) -> B::Visitor {
        self.builder.lock().expect("no panics").build()
    }

    /// Takes directories from its own stack, or from the queue when that is empty, and gives
    /// half of its stack to the queue when fewer workers run than wanted and another one
    /// waits or can be started (or starts one for directories already queued). A directory
    /// that took long (the tree is not cached) raises the number of workers
    /// wanted, one at a time.
    fn work<'s>(
        &'s self,
        scope: &'s Scope<'s, '_>,
        mut scratch: Scratch<StateOf<B>, JobOf<B>>,
        mut visitor: B::Visitor,
    ) {
        let (mut stack, queued) = (Vec::new(), Queued::mine());
        while let Some(task) = stack.pop().or_else(|| self.take()) {
            reap();
            let (start, cpu, waited) = (Instant::now(), thread_cpu_time(), queued.now());
            self.visit(task, &mut visitor, &mut scratch);
            if self.quit.load(Relaxed) {
                stack.clear();
                scratch.children.clear();
                continue;
            }
            let entries = scratch.listing.len() as u32 + 1;
            let took = start.elapsed();
            // Slow, and waiting rather than working: a visitor that works hard on each entry
            // (a copier) is slow on a cached tree too, where more threads than cores only
            // take turns. Waiting for a CPU does not count: more threads would wait too (two
            // MPI ranks on 2 cores started 64 threads each; docs/BENCHMARKS.md).
            if took > SLOW_DIR + SLOW_ENTRY * entries
                && took.saturating_sub(queued.now().saturating_sub(waited))
                    > 2 * (thread_cpu_time() - cpu)
            {
                let more = |w: usize| (w < self.threads).then_some(w + 1);
                let _ = self.want.fetch_update(Relaxed, Relaxed, more);
            }
            stack.append(&mut scratch.children);
            let waiting = self.waiting.load(Relaxed);
            if self.workers.load(Relaxed) - waiting >= self.want.load(Relaxed) {
                continue;
            }
            if stack.len() > 1 && (waiting > 0 || self.spawn(scope)) {
                self.share(stack.drain(..stack.len() / 2));
            } else if waiting == 0 && !self.queue.lock().expect("no panics").tasks.is_empty() {
                self.spawn(scope);
            }
        }
    }

    /// Starts another worker unless there are as many as allowed already, or the walk is
    /// still too small to need one (see [`SPAWN_AFTER`]).
    fn spawn<'s>(&'s self, scope: &'s Scope<'s, '_>) -> bool {
        let slow = self.want.load(Relaxed) > self.cores;
        if self.listed.load(Relaxed) < SPAWN_AFTER && !slow {
            return false;
        }
        let mut queue = self.queue.lock().expect("no panics");
        if self.workers.load(Relaxed) >= self.threads {
            return false;
        }
        self.workers.fetch_add(1, Relaxed);
        queue.active += 1;
        drop(queue);
        let started = spawn_elsewhere(scope, move || {
            if self.solo {
                go_solo();
            }
            self.work(scope, Scratch::default(), self.build());
        });
        if started.is_err() {
            // No thread to be had: the walk goes on with those it has.
            let mut queue = self.queue.lock().expect("no panics");
            self.workers.fetch_sub(1, Relaxed);
            queue.active -= 1;
            return false;
        }
        true
    }

    /// Puts directories in the queue and wakes a waiting worker for each.
    fn share(&self, tasks: impl IntoIterator<Item = TaskOf<B>>) {
        let mut queue = self.queue.lock().expect("no panics");
        for task in tasks {
            queue.tasks.push(task);
            self.shared.fetch_add(1, Relaxed);
            self.ready.notify_one();
        }
    }

    /// Waits for a directory in the queue; None once every worker is idle or the walk
    /// was stopped.
    fn take(&self) -> Option<TaskOf<B>> {
        let mut queue = self.queue.lock().expect("no panics");
        queue.active -= 1;
        loop {
            if self.quit.load(Relaxed) {
                return None;
            }
            if let Some(task) = queue.tasks.pop() {
                queue.active += 1;
                return Some(task);
            }
            if queue.active == 0 {
                self.ready.notify_all();
                return None;
            }
            self.waiting.fetch_add(1, Relaxed);
            queue = self.ready.wait(queue).expect("no panics");
            self.waiting.fetch_sub(1, Relaxed);
        }
    }

    /// Stops the walk when a visitor says so.
    fn obey(&self, state: WalkState) {
        if state == WalkState::Quit {
            self.quit.store(true, Relaxed);
            // Under the queue's lock, so that no worker starts waiting after the wake-up.
            let _queue = self.queue.lock().expect("no panics");
            self.ready.notify_all();
        }
    }

    /// Opens the directory `task` from its parent, shows it to the visitor and lists it.
    fn visit(
        &self,
        task: TaskOf<B>,
        visitor: &mut B::Visitor,
        scratch: &mut Scratch<StateOf<B>, JobOf<B>>,
    ) {
        let (parent, name, whole) = match task {
            Task::Open {
                parent,
                name,
                whole,
            } => (parent, name, whole),
            Task::Job { dir, fd, job } => {
                let fd = match fd.get() {
                    Some(_) => fd,
                    None => match self.dir_fd(&dir, &mut scratch.reopened) {
                        Ok(fd) => fd,
                        Err(e) => {
                            drop(job);
                            let error = Error::io("reopen directory", dir.path(None), e);
                            return self.obey(visitor.error(error));
                        }
                    },
                };
                let state = visitor.run(&dir, fd.as_fd(), job);
                self.obey(state);
                return self.take_jobs(
                    &dir,
                    &fd,
                    visitor,
                    &mut scratch.jobs,
                    &mut scratch.children,
                );
            }
        };
        let parent_fd = match self.dir_fd(&parent, &mut scratch.reopened) {
            Ok(fd) => fd,
            Err(e) => {
                let state = visitor.error(Error::io("reopen directory", parent.path(None), e));
                self.opened_child(&parent);
                return self.obey(state);
            }
        };
        let opened = openat(parent_fd.as_fd(), &*name, DIR_FLAGS, Mode::empty())
            .and_then(|fd| Ok((statx(&fd, "", AtFlags::EMPTY_PATH, STATX_MASK)?, fd)));
        let (stat, fd) = match opened {
            Ok(opened) => opened,
            Err(cause) => {
                let stat = statx(
                    parent_fd.as_fd(),
                    &*name,
                    AtFlags::SYMLINK_NOFOLLOW,
                    STATX_MASK,
                );
                let state = visitor.unopened(&parent, &name, stat.ok().as_ref(), cause);
                drop(parent_fd);
                self.opened_child(&parent);
                return self.obey(state);
            }
        };
        drop(parent_fd);
        self.opened_child(&parent);
        let entry = Entry::dir(&name, Meta::of_statx(&stat));
        match visitor.enter_dir(&parent, &entry, fd.as_fd(), &stat) {
            Ok(state) => {
                let dir = Arc::new(Dir {
                    depth: parent.depth + 1,
                    parent: Some(parent),
                    name,
                    ino: stat.stx_ino,
                    fd: Mutex::new(None),
                    pending: AtomicUsize::new(0),
                    whole,
                    state,
                });
                match self.dev.is_some_and(|dev| dev != device(&stat)) {
                    true => visitor.listed(&dir),
                    false => self.list(&dir, ThreadFd::new(fd), visitor, scratch),
                }
            }
            Err(state) => self.obey(state),
        }
    }

    /// Shows the entries of the open directory `dir` to the visitor, and leaves its
    /// subdirectories in `scratch.children`.
    fn list(
        &self,
        dir: &Arc<Dir<StateOf<B>>>,
        fd: ThreadFd,
        visitor: &mut B::Visitor,
        scratch: &mut Scratch<StateOf<B>, JobOf<B>>,
    ) {
        let fd = Arc::new(fd);
        let mut subdirs = Vec::new();
        match scratch.listing.read(fd.as_fd(), &mut scratch.buf) {
            Err(e) => self.obey(visitor.error(Error::io("getdents64", dir.path(None), e))),
            Ok(()) => {
                self.listed.fetch_add(scratch.listing.len() as u64, Relaxed);
                let opens = visitor.opens_files();
                for i in 0..scratch.listing.len() {
                    let (name, file_type) = scratch.listing.get(i);
                    let is_dir = file_type == FileType::Directory;
                    let take = self.taken(dir, name);
                    if take == Take::No {
                        continue;
                    }
                    if let Some(exclude) = &self.exclude {
                        if exclude.excludes(name, || dir.join(Some(name), false), is_dir) {
                            continue;
                        }
                    }
                    // A directory on the way to a member holds only what leads there.
                    let whole = take == Take::Whole;
                    if is_dir {
                        subdirs.push((name, whole));
                        continue;
                    }
                    // Where that fails (gone, a symlink now, unreadable), stated by name.
                    let file = (opens && whole && file_type == FileType::RegularFile)
                        .then(|| openat(fd.as_fd(), name, FILE_FLAGS, Mode::empty()).ok())
                        .flatten();
                    let stated = match &file {
                        Some(file) => statx(file, "", AtFlags::EMPTY_PATH, STATX_MASK),
                        None => statx(fd.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK),
                    };
                    let state = match stated {
                        Err(cause) => visitor.unstated(dir, name, cause),
                        // Listed without a type, or swapped in since the listing.
                        Ok(stat) if Kind::of_mode(stat.stx_mode.into()) == Kind::Dir => {
                            subdirs.push((name, whole));
                            WalkState::Continue
                        }
                        Ok(_) if !whole => WalkState::Continue,
                        Ok(stat) => {
                            let kind = Kind::of_mode(stat.stx_mode.into());
                            let entry = Entry::new(name, kind, Meta::of_statx(&stat));
                            let state = match file {
                                Some(file) if kind == Kind::File => {
                                    visitor.opened_file(dir, fd.as_fd(), &entry, &stat, file)
                                }
                                _ => visitor.entry(dir, fd.as_fd(), &entry, &stat),
                            };
                            self.take_jobs(
                                dir,
                                &fd,
                                visitor,
                                &mut scratch.jobs,
                                &mut scratch.children,
                            );
                            state
                        }
                    };
                    self.obey(state);
                    if self.quit.load(Relaxed) {
                        break;
                    }
                }
            }
        }
        visitor.listed(dir);
        if subdirs.is_empty() || self.quit.load(Relaxed) {
            return;
        }
        visitor.will_enter(dir, &subdirs);
        dir.pending.store(subdirs.len(), Relaxed);
        // The root's fd is not counted: it is kept to the end.
        if dir.parent.is_none() || self.held_fds.fetch_add(1, Relaxed) < self.fd_budget {
            *dir.fd.lock().expect("no panics") = Some(fd);
        } else {
            self.held_fds.fetch_sub(1, Relaxed);
        }
        // Before the jobs, which the worker then runs first.
        let opens = subdirs.into_iter().map(|(name, whole)| Task::Open {
            parent: dir.clone(),
            name: name.into(),
            whole,
        });
        scratch.children.splice(0..0, opens);
    }

    /// Moves the jobs the visitor left in `dir` (open as `fd`) to `children` (through
    /// `jobs`, a buffer), and counts their cost as listed.
    fn take_jobs(
        &self,
        dir: &Arc<Dir<StateOf<B>>>,
        fd: &Arc<ThreadFd>,
        visitor: &mut B::Visitor,
        jobs: &mut Vec<(JobOf<B>, u64)>,
        children: &mut Vec<TaskOf<B>>,
    ) {
        visitor.take_jobs(jobs);
        for (job, cost) in jobs.drain(..) {
            self.listed.fetch_add(cost, Relaxed);
            children.push(Task::Job {
                dir: dir.clone(),
                fd: fd.clone(),
                job,
            });
        }
    }

    /// What the walk does with the entry `name` of `dir`: everything in a directory taken
    /// whole, else what the members say.
    fn taken(&self, dir: &Dir<StateOf<B>>, name: &[u8]) -> Take {
        match (&self.members, dir.whole) {
            (Some(members), false) => {
                let path = dir.join(Some(name), false);
                members.lock().expect("no panics").take(&path)
            }
            _ => Take::Whole,
        }
    }

    /// Notes that one subdirectory of `parent` was opened; closes the parent's fd after the
    /// last one (the root keeps its fd: reopening starts from it).
    fn opened_child(&self, parent: &Dir<StateOf<B>>) {
        if parent.pending.fetch_sub(1, AcqRel) == 1 && parent.parent.is_some() {
            let fd = parent.fd.lock().expect("no panics").take();
            if fd.is_some() {
                self.held_fds.fetch_sub(1, Relaxed);
            }
        }
    }

    /// The fd of the directory `dir`, reopened by name from its nearest ancestor open on
    /// this thread when it was closed for the fd budget or opened by another thread (see
    /// [`WalkParallel::solo`]). The worker keeps the last reopened fd in `reopened`, so a
    /// deep walk over the budget reopens one level per directory, not the whole chain, and
    /// a subtree from another thread is reopened once for all its first level.
    fn dir_fd(
        &self,
        dir: &Arc<Dir<StateOf<B>>>,
        reopened: &mut Reopened<StateOf<B>>,
    ) -> rustix::io::Result<Arc<ThreadFd>> {
        let held = |d: &Dir<StateOf<B>>| match &*reopened {
            Some((open, fd)) if std::ptr::eq(&**open, d) => Some(fd.clone()),
            _ => (d.fd.lock().expect("no panics").clone()).filter(|fd| fd.get().is_some()),
        };
        let mut chain = vec![&**dir];
        let mut fd = loop {
            let top = *chain.last().expect("not empty");
            if let Some(fd) = held(top) {
                chain.pop();
                break fd;
            }
            chain.push(top.parent.as_deref().expect("the root keeps its fd"));
        };
        if chain.is_empty() {
            return Ok(fd);
        }
        self.reopened.fetch_add(1, Relaxed);
        for d in chain.iter().rev() {
            let next = reopen(fd.as_fd(), &d.name, DIR_FLAGS, |stat| stat.stx_ino == d.ino)?;
            fd = Arc::new(ThreadFd::new(next));
        }
        *reopened = Some((dir.clone(), fd.clone()));
        Ok(fd)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::path::Path;

    use rustix::fs::{OFlags, CWD};

    use super::*;
    use crate::tree::{Content, Recorded, Recording, Sink};

    /// What every thread's [`Recorder`] saw, and how they steer the walk.
    #[derive(Default)]
    struct Record {
        /// Entries as [`Recording`] calls named by their paths: directories entered,
        /// files with the content read through their directory's fd, other entries.
        calls: Mutex<Vec<Recorded>>,
        errors: Mutex<Vec<String>>,
        /// A directory name to prune.
        prune: Option<&'static [u8]>,
        /// Quit at the first entry that is not a directory.
        quit: bool,
    }

    impl<'a> ParallelVisitorBuilder for &'a Record {
        type Visitor = Recorder<'a>;

        fn build(&mut self) -> Recorder<'a> {
            Recorder {
                record: self,
                rec: Recording::default(),
            }
        }
    }

    /// One thread's recorder; hands its calls over when its thread is done.
    struct Recorder<'a> {
        record: &'a Record,
        rec: Recording,
    }

    impl Drop for Recorder<'_> {
        fn drop(&mut self) {
            let mut calls = self.record.calls.lock().unwrap();
            calls.append(&mut self.rec.calls);
        }
    }

    impl ParallelVisitor for Recorder<'_> {
        type State = ();
        type Job = std::convert::Infallible;

        fn enter_dir(
            &mut self,
            parent: &Dir<()>,
            entry: &Entry<'_>,
            _fd: BorrowedFd<'_>,
            _stat: &Statx,
        ) -> Result<(), WalkState> {
            if self.record.prune == Some(entry.name) {
                return Err(WalkState::Skip);
            }
            let path = parent.path(Some(entry.name)).0;
            let meta = Meta::with_mode(entry.meta.mode);
            self.rec.enter_dir(&Entry::dir(&path, meta)).unwrap();
            Ok(())
        }

        fn entry(
            &mut self,
            dir: &Dir<()>,
            fd: BorrowedFd<'_>,
            entry: &Entry<'_>,
            stat: &Statx,
        ) -> WalkState {
            assert_eq!(entry.meta, Meta::of_statx(stat));
            let path = dir.path(Some(entry.name)).0;
            if entry.kind == Kind::File {
                // Read by its name in `fd`, recorded by its path and mode.
                let file = Entry::file(entry.name, Meta::with_mode(entry.meta.mode));
                self.rec.file(&file, Content::Unopened { dir: fd }).unwrap();
                if let Some(Recorded::File(name, ..)) = self.rec.calls.last_mut() {
                    *name = path;
                }
            } else {
                self.rec
                    .other(&Entry {
                        name: &path,
                        ..*entry
                    })
                    .unwrap();
            }
            if self.record.quit {
                WalkState::Quit
            } else {
                WalkState::Continue
            }
        }

        fn error(&mut self, error: Error) -> WalkState {
            self.record.errors.lock().unwrap().push(error.to_string());
            WalkState::Continue
        }
    }

    /// Builds a tree under `root` (nested directories, files, a symlink, an empty directory,
    /// and enough entries for helper threads to start) and returns what a walk of it named
    /// `top` records, in a canonical order.
    fn make_tree(root: &Path) -> Vec<Recorded> {
        let mut want = Vec::new();
        let mut dir = |path: &str| {
            fs::create_dir(root.join(path)).unwrap();
            fs::set_permissions(root.join(path), fs::Permissions::from_mode(0o755)).unwrap();
            want.push(Recorded::Enter(
                format!("top/{path}").into(),
                Meta::with_mode(0o755),
            ));
        };
        dir("a");
        dir("a/b");
        dir("empty");
        dir("wide");
        for d in 0..6 {
            dir(&format!("wide/d{d}"));
        }
        let mut file = |path: String, content: &[u8]| {
            fs::write(root.join(&path), content).unwrap();
            fs::set_permissions(root.join(&path), fs::Permissions::from_mode(0o644)).unwrap();
            want.push(Recorded::File(
                format!("top/{path}").into(),
                Meta::with_mode(0o644),
                content.to_vec(),
            ));
        };
        file("a/one".into(), b"1");
        file("a/b/two".into(), b"22");
        for d in 0..6 {
            for f in 0..100 {
                file(format!("wide/d{d}/f{f}"), format!("{d}.{f}").as_bytes());
            }
        }
        symlink("two", root.join("a/b/link")).unwrap();
        want.push(Recorded::Other(b"top/a/b/link".to_vec(), Kind::Symlink));
        canonical(want)
    }

    fn canonical(mut calls: Vec<Recorded>) -> Vec<Recorded> {
        calls.sort_by_cached_key(|call| format!("{call:?}"));
        calls
    }

    /// Walks `root` as `top` with `threads` threads.
    fn walk(root: &Path, record: &Record, threads: usize) {
        walk_solo(root, record, threads, false);
    }

    /// Walks `root` as `top` with `threads` threads, with their own fd tables when `solo`.
    fn walk_solo(root: &Path, record: &Record, threads: usize, solo: bool) {
        let fd = openat(CWD, root, DIR_FLAGS, Mode::empty()).unwrap();
        WalkParallel::new(fd, b"top")
            .threads(threads)
            .solo(solo)
            .visit(&mut &*record, ());
    }

    fn under(calls: &[Recorded], dir: &str) -> Vec<Recorded> {
        let keep = |name: &[u8]| !name.starts_with(dir.as_bytes());
        calls
            .iter()
            .filter(|call| match call {
                Recorded::Enter(name, _) | Recorded::File(name, ..) | Recorded::Other(name, _) => {
                    keep(name)
                }
                _ => true,
            })
            .cloned()
            .collect()
    }

    #[test]
    fn every_entry_is_seen_once_with_its_path_and_kind() {
        let dir = tempfile::tempdir().unwrap();
        let want = make_tree(dir.path());
        for (threads, solo) in [(1, false), (2, false), (8, false), (2, true), (8, true)] {
            let record = Record::default();
            walk_solo(dir.path(), &record, threads, solo);
            let got = canonical(record.calls.into_inner().unwrap());
            assert_eq!(got.len(), want.len(), "{threads} threads");
            assert_eq!(got, want, "{threads} threads");
            assert!(record.errors.into_inner().unwrap().is_empty());
        }
    }

    /// Makes [`Recorder`]s; each made on a helper thread first opens `marker` there and
    /// notes whether the walk's calling thread (`caller`) has that fd too.
    struct Peeking<'a> {
        record: &'a Record,
        marker: &'a Path,
        caller: rustix::thread::Pid,
        /// Per helper thread: its fd is in the caller's table.
        shared: &'a Mutex<Vec<bool>>,
    }

    impl<'a> ParallelVisitorBuilder for Peeking<'a> {
        type Visitor = Recorder<'a>;

        fn build(&mut self) -> Recorder<'a> {
            if rustix::thread::gettid() != self.caller {
                let fd = openat(CWD, self.marker, OFlags::RDONLY, Mode::empty()).unwrap();
                let number = std::os::fd::AsRawFd::as_raw_fd(&fd);
                let here = fs::read_link(format!("/proc/thread-self/fd/{number}")).unwrap();
                let caller = format!(
                    "/proc/self/task/{}/fd/{number}",
                    self.caller.as_raw_nonzero()
                );
                let shared = fs::read_link(caller).is_ok_and(|there| there == here);
                self.shared.lock().unwrap().push(shared);
            }
            (&*self.record).build()
        }
    }

    #[test]
    fn helper_threads_of_a_solo_walk_have_their_own_fd_tables() {
        let dir = tempfile::tempdir().unwrap();
        make_tree(dir.path());
        // Enough entries in the root for helpers to start at once (see `SPAWN_AFTER`).
        for f in 0..SPAWN_AFTER {
            fs::write(dir.path().join(format!("r{f}")), b"").unwrap();
        }
        let marker = tempfile::NamedTempFile::new().unwrap();
        for solo in [false, true] {
            let (record, shared) = (Record::default(), Mutex::new(Vec::new()));
            let mut builder = Peeking {
                record: &record,
                marker: marker.path(),
                caller: rustix::thread::gettid(),
                shared: &shared,
            };
            let fd = openat(CWD, dir.path(), DIR_FLAGS, Mode::empty()).unwrap();
            let walk = WalkParallel::new(fd, b"top").threads(4).solo(solo);
            walk.visit(&mut builder, ());
            let shared = shared.into_inner().unwrap();
            if crate::threads::Work::Cores.threads() >= 2 {
                assert!(!shared.is_empty(), "no helper thread started");
            }
            assert!(shared.iter().all(|&s| s != solo), "solo {solo}: {shared:?}");
        }
    }

    /// `a` below the root and `b` below it, opened on another thread with its own fd table:
    /// the root, `a` and `b` as the walk's directories, and the inode of `b`.
    fn opened_elsewhere(root: &Path) -> (Vec<Arc<Dir<()>>>, u64) {
        let root_fd = openat(CWD, root, DIR_FLAGS, Mode::empty()).unwrap();
        let (a_fd, b_fd) = std::thread::scope(|scope| {
            let solo = scope.spawn(|| {
                go_solo();
                let a = openat(&root_fd, "a", DIR_FLAGS, Mode::empty()).unwrap();
                let b = openat(&a, "b", DIR_FLAGS, Mode::empty()).unwrap();
                (ThreadFd::new(a), ThreadFd::new(b))
            });
            solo.join().unwrap()
        });
        let ino = |path: &str| {
            std::os::unix::fs::MetadataExt::ino(&fs::metadata(root.join(path)).unwrap())
        };
        let mut dirs: Vec<Arc<Dir<()>>> = Vec::new();
        for (name, ino, fd) in [
            (&b"top"[..], 0, ThreadFd::everywhere(root_fd)),
            (b"a", ino("a"), a_fd),
            (b"b", ino("a/b"), b_fd),
        ] {
            dirs.push(Arc::new(Dir {
                parent: dirs.last().cloned(),
                name: name.into(),
                depth: dirs.len(),
                ino,
                fd: Mutex::new(Some(Arc::new(fd))),
                pending: AtomicUsize::new(1),
                whole: true,
                state: (),
            }));
        }
        (dirs, ino("a/b"))
    }

    #[test]
    fn a_directory_of_another_thread_is_reopened_by_name_and_inode_never_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a/b")).unwrap();
        fs::create_dir_all(outside.path().join("b")).unwrap();
        let record = Record::default();
        let mut builder = &record;
        let walk = Walk::new(&mut builder, 2, Exclude::default());
        let (dirs, b_ino) = opened_elsewhere(dir.path());
        let b = &dirs[2];
        // Its fd is no use here: reopened from the root, the nearest directory held here.
        let fd = walk.dir_fd(b, &mut None).unwrap();
        let ino = statx(fd.as_fd(), "", AtFlags::EMPTY_PATH, StatxFlags::INO).unwrap();
        assert_eq!(ino.stx_ino, b_ino);
        assert_eq!(walk.reopened.load(Relaxed), 1);
        // What this thread opened it uses as it is.
        let own = openat(CWD, dir.path().join("a/b"), DIR_FLAGS, Mode::empty()).unwrap();
        *b.fd.lock().unwrap() = Some(Arc::new(ThreadFd::new(own)));
        walk.dir_fd(b, &mut None).unwrap();
        assert_eq!(walk.reopened.load(Relaxed), 1);
        b.fd.lock().unwrap().take();
        // `a` swapped for another directory since it was opened: stale, not the other `b`.
        fs::rename(dir.path().join("a"), dir.path().join("a.old")).unwrap();
        fs::create_dir_all(dir.path().join("a/b")).unwrap();
        assert_eq!(walk.dir_fd(b, &mut None).err(), Some(Errno::STALE));
        // For a symlink to a tree outside: not followed.
        fs::remove_dir_all(dir.path().join("a")).unwrap();
        symlink(outside.path(), dir.path().join("a")).unwrap();
        let error = walk.dir_fd(b, &mut None).err();
        assert!(
            matches!(error, Some(Errno::LOOP | Errno::NOTDIR)),
            "{error:?}"
        );
    }

    /// Each entry as `name opened` (the fd's inode checked against the stat) or `name by
    /// name`.
    #[derive(Default)]
    struct Seen(Mutex<Vec<String>>);

    struct Opening<'a>(&'a Mutex<Vec<String>>);

    impl<'a> ParallelVisitorBuilder for &'a Seen {
        type Visitor = Opening<'a>;

        fn build(&mut self) -> Opening<'a> {
            Opening(&self.0)
        }
    }

    impl ParallelVisitor for Opening<'_> {
        type State = ();
        type Job = std::convert::Infallible;

        fn enter_dir(
            &mut self,
            _: &Dir<()>,
            _: &Entry<'_>,
            _: BorrowedFd<'_>,
            _: &Statx,
        ) -> Result<(), WalkState> {
            Ok(())
        }

        fn opens_files(&self) -> bool {
            true
        }

        fn opened_file(
            &mut self,
            _: &Dir<()>,
            _: BorrowedFd<'_>,
            entry: &Entry<'_>,
            stat: &Statx,
            file: OwnedFd,
        ) -> WalkState {
            let ino = statx(&file, "", AtFlags::EMPTY_PATH, StatxFlags::INO).unwrap();
            assert_eq!(ino.stx_ino, stat.stx_ino);
            let name = String::from_utf8_lossy(entry.name);
            self.0.lock().unwrap().push(format!("{name} opened"));
            WalkState::Continue
        }

        fn entry(
            &mut self,
            _: &Dir<()>,
            _: BorrowedFd<'_>,
            entry: &Entry<'_>,
            _: &Statx,
        ) -> WalkState {
            let name = String::from_utf8_lossy(entry.name);
            self.0.lock().unwrap().push(format!("{name} by name"));
            WalkState::Continue
        }

        fn error(&mut self, error: Error) -> WalkState {
            panic!("{error}");
        }
    }

    #[test]
    fn a_visitor_that_opens_files_gets_regular_files_open_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("d")).unwrap();
        fs::write(dir.path().join("f"), b"f").unwrap();
        fs::write(dir.path().join("d/g"), b"g").unwrap();
        symlink("f", dir.path().join("l")).unwrap();
        rustix::fs::mknodat(
            CWD,
            dir.path().join("p"),
            FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        let seen = Seen::default();
        let fd = openat(CWD, dir.path(), DIR_FLAGS, Mode::empty()).unwrap();
        WalkParallel::new(fd, b"top")
            .threads(2)
            .visit(&mut &seen, ());
        let mut seen = seen.0.into_inner().unwrap();
        seen.sort();
        // Only regular files are opened: not the fifo, nor the symlink (never followed).
        assert_eq!(seen, ["f opened", "g opened", "l by name", "p by name"]);
    }

    #[test]
    fn skip_prunes_a_subtree() {
        let dir = tempfile::tempdir().unwrap();
        let want = under(&make_tree(dir.path()), "top/wide");
        let record = Record {
            prune: Some(b"wide"),
            ..Record::default()
        };
        walk(dir.path(), &record, 2);
        let got = canonical(record.calls.into_inner().unwrap());
        assert_eq!(got, want);
        assert!(got.len() > 3, "{got:?}");
    }

    #[test]
    fn quit_stops_the_walk() {
        let dir = tempfile::tempdir().unwrap();
        make_tree(dir.path());
        for threads in [1, 4] {
            let record = Record {
                quit: true,
                ..Record::default()
            };
            walk(dir.path(), &record, threads);
            let calls = record.calls.into_inner().unwrap();
            let entries = calls
                .iter()
                .filter(|call| !matches!(call, Recorded::Enter(..)))
                .count();
            // The first entry quits; each other thread sees at most one more.
            assert!((1..=threads).contains(&entries), "{threads}: {calls:?}");
        }
    }

    #[test]
    fn an_unreadable_directory_is_reported_with_its_path_and_the_rest_is_walked() {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let want = under(&make_tree(dir.path()), "top/a/b");
        let locked = dir.path().join("a/b");
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
        let record = Record::default();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                // Root passes permission checks: walk as nobody (in this thread and the
                // walker's, which inherit its credentials).
                crate::walk::become_nobody_in_this_thread();
                walk(dir.path(), &record, 2);
            });
        });
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            record.errors.into_inner().unwrap(),
            ["top/a/b: cannot open directory: Permission denied"]
        );
        assert_eq!(canonical(record.calls.into_inner().unwrap()), want);
    }
}
