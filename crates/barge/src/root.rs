//! The roots: the paths above them as the user named them (`split`, `open_parent`), and the
//! destination root and its confinement: the lander only ever works below a directory
//! fd it opened itself, and optionally (layer 3) inside a user namespace chrooted to it.
//!
//! A DEST that does not exist yet appears whole or not at all: the tree lands in a hidden
//! directory beside it (`.DEST.barge-PID-N`, mode 0o700, in the same parent), which
//! [`Destination::finish`] renames to DEST with `RENAME_NOREPLACE` once the landing
//! succeeded, and removes otherwise. When DEST's parents are missing too, the first missing
//! one is staged (with the rest inside it), so they appear with DEST or not at all. A
//! sandboxed lander cannot reach the parent from its chroot, so a **keeper** process, forked
//! before the chroot, holds the staged tree and renames or removes it when told; it also
//! removes it when the lander dies without a word (even by SIGKILL, once the keeper runs: a
//! lander killed between making the hidden directory and forking leaves it, as an
//! unsandboxed one killed at any point does).

use std::fs;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use rustix::fs::{
    fchmod, mkdirat, open, openat, renameat, renameat_with, statat, AtFlags, FileType, Mode,
    OFlags, RenameFlags, CWD,
};
use rustix::io::{read, write, Errno};
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::process::{chroot, fchdir, getgid, getuid, waitpid, Pid, WaitOptions};

use crate::error::{Error, Result, TreePath};
use crate::output::with_temp_name;
use crate::sys;
use crate::sys::dir::{dirent_buffer, remove_tree};
use crate::sys::fds::close_range;
use crate::sys::DIR_FLAGS;
use crate::tree::Kind;

/// The directory part of `path` and its last component (`.` and `..` have none).
pub(crate) fn split(path: &Path) -> Result<(&Path, &[u8])> {
    let name = path.file_name().ok_or_else(|| Error::Argument {
        arg: path.display().to_string(),
        problem: "names no entry (a copy needs a last path component)".into(),
    })?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((parent, name.as_bytes()))
}

/// Opens the directory `dir` that holds SRC or DEST (`path` in errors), following symlinks:
/// it is above the roots, as the user named it.
pub(crate) fn open_parent(dir: &Path, path: &[u8]) -> Result<OwnedFd> {
    let flags = OFlags::DIRECTORY | OFlags::CLOEXEC;
    openat(CWD, dir, flags, Mode::empty())
        .map_err(|e| Error::io("open directory", TreePath(path.to_vec()), e))
}

/// How the destination is confined.
/// In JSON: `"sandboxed"`, `{"unavailable": REASON}` or `"off"` (the CamelCase names of
/// older peers are read too).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Confinement {
    /// In a new user namespace, chrooted to the destination, with no outside fds open.
    #[serde(alias = "Sandboxed")]
    Sandboxed,
    /// The sandbox was asked for but the kernel refused it (the reason); layers 1-2 still hold.
    #[serde(alias = "Unavailable")]
    Unavailable(String),
    /// The sandbox was turned off.
    #[serde(alias = "Off")]
    Off,
}

fn path_of(dest: &Path) -> TreePath {
    TreePath(dest.as_os_str().as_encoded_bytes().to_vec())
}

/// Flags of the destination's fd: a real directory fd (its mode may be set through it),
/// never opened through a symlink.
const DEST_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// The destination of an unpack, opened once: every later system call is relative to its
/// fd (see [`Destination::root`]).
#[derive(Debug)]
pub struct Destination {
    /// The destination directory, until [`Destination::root`] hands it to a lander.
    fd: Option<OwnedFd>,
    /// How the landing is confined.
    pub confinement: Confinement,
    /// The mode a destination created by this unpack gets when landing ends; it stays 0o700
    /// until then, so no other user can rename directories inside it while they are filled.
    final_mode: Option<u32>,
    /// A new destination's tree, until [`Destination::finish`] puts it in place.
    staged: Option<Stage>,
    /// The staged tree's top is DEST itself (none of its parents was missing).
    top_is_dest: bool,
    /// The destination as given, for messages.
    path: TreePath,
}

/// Who holds a staged tree: this process, or (in the sandbox) a keeper process.
#[derive(Debug)]
enum Stage {
    Here(Staged),
    Keeper(Keeper),
}

/// Opens the destination `dest`, creating it (and missing parents) when it does not exist.
/// A `dest` that is a symlink is refused, whatever it points to: whoever could create it
/// first (a predictable path in /tmp) would otherwise choose where the tree lands.
///
/// With `sandbox`, then confines the process to that very directory: it chroots into it (an
/// unprivileged caller first enters a new user namespace in which it is root, as `unshare
/// --map-root-user` does) and closes every fd above 2 except `keep` and the destination's.
/// The process must be single-threaded then; meant for a process that does nothing but land.
///
/// A destination it creates gets `dest_mode` once landing ends.
pub(crate) fn open_dest(
    dest: &Path,
    sandbox: bool,
    keep: Option<RawFd>,
    dest_mode: u32,
) -> Result<Destination> {
    // A trailing slash would make the kernel follow a final symlink despite O_NOFOLLOW.
    let bytes = dest.as_os_str().as_bytes();
    let trimmed = match bytes.iter().rposition(|&b| b != b'/') {
        Some(last) => &bytes[..=last],
        None if bytes.is_empty() => b".",
        None => b"/",
    };
    let dest = Path::new(std::ffi::OsStr::from_bytes(trimmed));
    let path = path_of(dest);
    let (fd, staged, top_is_dest) = match missing(dest)? {
        None => match open(dest, DEST_FLAGS, Mode::empty()) {
            Ok(fd) => (fd, None, false),
            Err(e @ (Errno::LOOP | Errno::NOTDIR)) => return Err(not_a_directory(dest, e)),
            Err(e) => return Err(Error::io("open destination", path, e)),
        },
        Some((parent, names)) => {
            let (fd, staged) = Staged::create(parent, &names, &path, dest_mode)?;
            (fd, Some(staged), names.len() == 1)
        }
    };
    let final_mode = staged.is_some().then_some(dest_mode);
    let mut kept: Vec<RawFd> = keep.into_iter().collect();
    let staged = match staged {
        Some(staged) if sandbox => {
            let keeper = Keeper::spawn(staged, &path)?;
            kept.extend([keeper.tell.as_raw_fd(), keeper.answer.as_raw_fd()]);
            Some(Stage::Keeper(keeper))
        }
        other => other.map(Stage::Here),
    };
    let confinement = if !sandbox {
        Confinement::Off
    } else {
        match confine(&fd, &kept) {
            Ok(()) => Confinement::Sandboxed,
            Err(reason) => Confinement::Unavailable(reason),
        }
    };
    Ok(Destination {
        fd: Some(fd),
        confinement,
        final_mode,
        staged,
        top_is_dest,
        path,
    })
}

/// The part of a DEST that does not exist: the deepest existing directory above it, and the
/// names below that down to DEST.
type Missing<'a> = (&'a Path, Vec<&'a [u8]>);

/// The part of `dest` that does not exist, or `None` when DEST exists (as anything: a
/// symlink at DEST is refused when opened). A `..` below a missing directory is an error.
fn missing(dest: &Path) -> Result<Option<Missing<'_>>> {
    let mut names = Vec::new();
    let mut rest = dest.components();
    loop {
        let at = rest.as_path();
        if at.as_os_str().is_empty() {
            names.reverse();
            return Ok(Some((Path::new("."), names)));
        }
        // DEST itself is looked at without following; its parents are followed, as given.
        let flags = match names.is_empty() {
            true => AtFlags::SYMLINK_NOFOLLOW,
            false => AtFlags::empty(),
        };
        // ENOTDIR: a parent is not a directory (opening the deepest existing one says which).
        if !matches!(statat(CWD, at, flags), Err(Errno::NOENT | Errno::NOTDIR)) {
            names.reverse();
            return Ok((!names.is_empty()).then_some((at, names)));
        }
        match rest.next_back() {
            Some(Component::Normal(name)) => names.push(name.as_bytes()),
            _ => {
                let cause = std::io::Error::other("'..' follows a directory that does not exist");
                return Err(Error::os("create destination", path_of(dest), cause));
            }
        }
    }
}

/// The error for a destination that exists but is not a directory (or is a symlink).
fn not_a_directory(dest: &Path, errno: Errno) -> Error {
    let found = match statat(CWD, dest, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => "a symlink",
        Ok(st) => Kind::of_mode(st.st_mode).with_article(),
        Err(_) => return Error::io("open destination", path_of(dest), errno),
    };
    Error::NotADirectory {
        path: path_of(dest),
        found,
    }
}

impl Destination {
    /// The destination's fd for a lander: the one opened, or a duplicate when
    /// [`Destination::finish`] still needs it.
    pub fn root(&mut self) -> Result<OwnedFd> {
        match (&self.fd, self.final_mode) {
            (Some(fd), Some(_)) => {
                (fd.try_clone()).map_err(|e| Error::os("dup destination", TreePath::default(), e))
            }
            // Handed out already: a second lander would be a bug of the caller.
            _ => (self.fd.take())
                .ok_or_else(|| Error::io("open destination", TreePath::default(), Errno::BADF)),
        }
    }

    /// Whether DEST did not exist: it appears when [`Destination::finish`] puts it in place.
    pub fn is_new(&self) -> bool {
        self.staged.is_some()
    }

    /// Ends the landing: when it succeeded, gives a destination this unpack created its
    /// final mode (the usual `0o777 & !umask`) and renames it into place (failing if
    /// something took DEST's name meanwhile); when it failed, removes what it created.
    /// `root_mode`, the archive's root record's, replaces the usual mode.
    pub fn finish(&mut self, landed: bool, root_mode: Option<u32>) -> Result<()> {
        let fail = |(op, e)| Error::io(op, self.path.clone(), e);
        let dest_mode = self.final_mode.map(|mode| root_mode.unwrap_or(mode));
        if let (true, Some(fd), Some(mode)) = (landed, &self.fd, dest_mode) {
            fchmod(fd, Mode::from_raw_mode(mode)).map_err(|e| fail(("fchmod", e)))?;
        }
        // The top of the staged tree: DEST, or its first missing parent (the usual mode).
        let top = if self.top_is_dest {
            dest_mode
        } else {
            self.final_mode
        };
        let mode = top.unwrap_or(0o700);
        match self.staged.take() {
            None => Ok(()),
            Some(Stage::Here(staged)) if landed => staged.commit(mode).map_err(fail),
            Some(Stage::Here(staged)) => staged.remove().map_err(fail),
            Some(Stage::Keeper(keeper)) => keeper.finish(landed.then_some(mode)).map_err(fail),
        }
    }
}

impl Drop for Destination {
    /// A destination dropped before [`Destination::finish`] did not land: its staged tree
    /// goes.
    fn drop(&mut self) {
        let _ = self.finish(false, None);
    }
}

/// A new destination landing hidden in its parent (see the [module](self) documentation).
#[derive(Debug)]
struct Staged {
    /// The deepest existing directory above DEST.
    parent: OwnedFd,
    /// The hidden directory's name in `parent`.
    temp: Vec<u8>,
    /// The name it gets: DEST's, or that of DEST's first missing parent.
    name: Vec<u8>,
}

/// Longest part of a name kept in its staged directory's name, so that `.NAME.barge-PID-N`
/// stays under the 255 bytes a name may have.
const STAGED_NAME: usize = 200;

/// What a step on a staged tree failed with: the step, for messages, and the OS error.
type StepError = (&'static str, Errno);

/// The steps of [`Staged::commit`] and [`Staged::remove`], by the number a keeper reports.
const STEPS: [&str; 3] = [
    "put in place",
    "rename into place",
    "remove the unfinished tree",
];

impl Staged {
    /// Creates the hidden directory for `names` (the missing directories down to DEST) in
    /// `parent` and the rest of `names` inside it; returns the fd of the last, DEST (mode
    /// 0o700; its parents get `parents_mode`, 0o777 less the umask, as with `mkdir -p`:
    /// created under a cleared umask, they would get 0o777).
    fn create(
        parent: &Path,
        names: &[&[u8]],
        dest: &TreePath,
        parents_mode: u32,
    ) -> Result<(OwnedFd, Staged)> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let parent = match open(parent, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOTDIR) => {
                let why = not_a_directory(parent, Errno::NOTDIR).to_string();
                let cause = std::io::Error::new(std::io::ErrorKind::NotADirectory, why);
                return Err(Error::os("create destination", dest.clone(), cause));
            }
            Err(e) => {
                return Err(Error::io(
                    "open the destination's parent",
                    path_of(parent),
                    e,
                ))
            }
        };
        let first = &names[0][..names[0].len().min(STAGED_NAME)];
        let prefix = [&b"."[..], first, b".barge-"].concat();
        let private = Mode::from_raw_mode(0o700);
        let ((), temp) = with_temp_name(&prefix, b"", |temp| mkdirat(&parent, temp, private))
            .map_err(|e| Error::io("create destination", dest.clone(), e))?;
        let staged = Staged {
            parent,
            temp,
            name: names[0].to_vec(),
        };
        let inside = || {
            let mut fd = openat(&staged.parent, &staged.temp[..], DEST_FLAGS, Mode::empty())?;
            for (i, name) in names.iter().enumerate().skip(1) {
                let mode = if i + 1 == names.len() {
                    0o700
                } else {
                    parents_mode
                };
                mkdirat(&fd, *name, Mode::from_raw_mode(mode))?;
                fd = openat(&fd, *name, DEST_FLAGS, Mode::empty())?;
            }
            Ok(fd)
        };
        match inside() {
            Ok(fd) => Ok((fd, staged)),
            Err(e) => {
                let _ = staged.remove();
                Err(Error::io("create destination", dest.clone(), e))
            }
        }
    }

    /// Gives the staged directory `mode` and renames it to its name, never over anything;
    /// removes it when that fails.
    fn commit(self, mode: u32) -> std::result::Result<(), StepError> {
        let renamed = openat(&self.parent, &self.temp[..], DIR_FLAGS, Mode::empty())
            .and_then(|top| fchmod(top, Mode::from_raw_mode(mode)))
            .map_err(|e| (STEPS[0], e))
            .and_then(|()| self.rename().map_err(|e| (STEPS[1], e)));
        if renamed.is_err() {
            let _ = self.remove();
        }
        renamed
    }

    /// `renameat2(RENAME_NOREPLACE)`; where the filesystem lacks it, a plain rename, which
    /// still never replaces a file or a non-empty directory.
    fn rename(&self) -> rustix::io::Result<()> {
        let (dir, temp, name) = (&self.parent, &self.temp[..], &self.name[..]);
        match renameat_with(dir, temp, dir, name, RenameFlags::NOREPLACE) {
            Err(Errno::INVAL) => renameat(dir, temp, dir, name),
            renamed => renamed,
        }
    }

    /// Removes the staged tree.
    fn remove(&self) -> std::result::Result<(), StepError> {
        remove_tree(self.parent.as_fd(), &self.temp, &mut dirent_buffer())
            .map_err(|e| (STEPS[2], e))
    }
}

/// A process holding a [`Staged`] tree for a sandboxed lander (see the [module](self)
/// documentation), told through a pipe to put it in place or to remove it.
#[derive(Debug)]
struct Keeper {
    pid: Pid,
    /// Where the lander tells: 1 and the mode (put in place), or 0 (remove).
    tell: OwnedFd,
    /// Where the keeper answers: the errno of the step that failed (0: done) and the step.
    answer: OwnedFd,
}

impl Keeper {
    /// Forks the keeper of `staged`. The process must be single-threaded (as the sandbox
    /// requires anyway): the child goes on running Rust code.
    /// When it cannot start, the staged tree is removed.
    fn spawn(staged: Staged, dest: &TreePath) -> Result<Keeper> {
        let fail = |e| {
            let _ = staged.remove();
            Error::io(
                "fork its keeper (which removes a cut-off DEST)",
                dest.clone(),
                e,
            )
        };
        let (orders, tell) = pipe_with(PipeFlags::CLOEXEC).map_err(fail)?;
        let (answer, reply) = pipe_with(PipeFlags::CLOEXEC).map_err(fail)?;
        // The child ends by `exit_now`.
        match sys::process::fork_single_threaded().map_err(fail)? {
            None => keep(staged, orders, reply),
            Some(pid) => Ok(Keeper { pid, tell, answer }),
        }
    }

    /// Tells the keeper to put the tree in place with `mode`, or to remove it, and waits
    /// until that is done.
    fn finish(self, mode: Option<u32>) -> std::result::Result<(), StepError> {
        let order = match mode {
            Some(mode) => [1, (mode >> 8) as u8, mode as u8],
            None => [0; 3],
        };
        let mut reply = [0u8; 5];
        let told = write_all(&self.tell, &order).and_then(|()| read_all(&self.answer, &mut reply));
        let _ = waitpid(Some(self.pid), WaitOptions::empty());
        told.map_err(|e| ("talk to its keeper", e))?;
        match i32::from_le_bytes([reply[0], reply[1], reply[2], reply[3]]) {
            0 => Ok(()),
            errno => Err((
                STEPS[usize::from(reply[4]).min(2)],
                Errno::from_raw_os_error(errno),
            )),
        }
    }
}

/// The keeper's life: holds `staged` until the lander's order comes on `orders` (or the
/// pipe's end: the lander is gone), carries it out, answers on `reply` and exits.
fn keep(staged: Staged, orders: OwnedFd, reply: OwnedFd) -> ! {
    // The lander decides, not a Ctrl-C sent to the whole process group.
    sys::signal::ignore();
    // Nothing else: not the archive, and not the stdio pipes whose readers wait for their end.
    let _ = close_all_but(&[
        staged.parent.as_raw_fd(),
        orders.as_raw_fd(),
        reply.as_raw_fd(),
    ]);
    let _ = close_range(0, 2);
    let mut order = [0u8; 3];
    let result = match read_all(&orders, &mut order) {
        Ok(()) if order[0] == 1 => staged.commit(u32::from(order[1]) << 8 | u32::from(order[2])),
        _ => staged.remove(),
    };
    let mut answer = [0u8; 5];
    if let Err((step, errno)) = result {
        answer[..4].copy_from_slice(&errno.raw_os_error().to_le_bytes());
        answer[4] = STEPS.iter().position(|s| *s == step).unwrap_or(2) as u8;
    }
    let _ = write_all(&reply, &answer);
    sys::process::exit_now(0)
}

/// Writes all of `bytes` to the pipe `fd`.
fn write_all(fd: &OwnedFd, mut bytes: &[u8]) -> rustix::io::Result<()> {
    while !bytes.is_empty() {
        match write(fd, bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills `buf` from the pipe `fd`; its end comes as `EPIPE`.
fn read_all(fd: &OwnedFd, buf: &mut [u8]) -> rustix::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match read(fd, &mut buf[got..]) {
            Ok(0) => return Err(Errno::PIPE),
            Ok(n) => got += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Chroots into the directory `dest` (entering a user namespace first when not root) and
/// closes every fd above 2 but `keep` and `dest`. Returns why it could not.
fn confine(dest: &OwnedFd, keep: &[RawFd]) -> std::result::Result<(), String> {
    enter_user_namespace()?;
    fchdir(dest).map_err(|e| format!("cannot enter the destination: {e}"))?;
    chroot(".").map_err(|e| format!("cannot chroot: {e}"))?;
    let mut kept = vec![dest.as_raw_fd()];
    kept.extend_from_slice(keep);
    close_all_but(&kept).map_err(|e| {
        format!("chrooted, but cannot close the inherited fds, which may lead out: {e}")
    })
}

/// Gains the right to `chroot`: root has it already; anyone else enters a new user
/// namespace that maps only their own ids, to root. Returns why it could not.
fn enter_user_namespace() -> std::result::Result<(), String> {
    let (uid, gid) = (getuid().as_raw(), getgid().as_raw());
    if uid == 0 {
        return Ok(());
    }
    sys::process::unshare_user().map_err(|e| format!("cannot create a user namespace: {e}"))?;
    let write = |file: &str, text: String| {
        fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("0 {uid} 1"))?;
    write("/proc/self/gid_map", format!("0 {gid} 1"))
}

/// Closes every fd above stderr except those in `keep`.
fn close_all_but(keep: &[RawFd]) -> rustix::io::Result<()> {
    let mut keep = keep.to_vec();
    keep.sort_unstable();
    let mut first = 3;
    for fd in keep.into_iter().filter(|&fd| fd >= 3) {
        close_range(first, fd - 1)?;
        first = fd + 1;
    }
    close_range(first, RawFd::MAX)
}

/// The process's umask, read from `/proc/self/status` without changing it (0o022 where that
/// does not say). Read it before any sandbox: `/proc` is outside.
pub fn process_umask() -> u32 {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let line = status.lines().find_map(|line| line.strip_prefix("Umask:"));
    line.and_then(|mask| u32::from_str_radix(mask.trim(), 8).ok())
        .unwrap_or(0o022)
}

/// A directory a server lands into, prepared once at its start (see [`prepare_dest`]).
#[derive(Clone, Debug)]
pub struct Prepared {
    /// DEST as an absolute path without symlinks: the directory opened, whatever a symlink
    /// among its parents points to later.
    pub path: std::path::PathBuf,
    /// Bytes free on its filesystem for unprivileged users.
    pub free: u64,
}

/// Prepares the DEST of a server (recv, serve): created when missing as unpack creates it
/// (the missing part, parents included, staged hidden and renamed into place; a symlink at
/// DEST refused; nothing created followed), then named by the directory opened, so later
/// landings go there even when a symlink in DEST's parents changes. Unlike unpack's, a DEST
/// made here stays, so that a cut-off transfer keeps what landed. A DEST it creates gets
/// 0o777 less `umask`.
pub fn prepare_dest(dest: &Path, umask: u32) -> Result<Prepared> {
    let mut destination = open_dest(dest, false, None, 0o777 & !umask)?;
    let root = destination.root()?;
    destination.finish(true, None)?;
    let fs = rustix::fs::fstatvfs(&root).map_err(|e| Error::io("statvfs", path_of(dest), e))?;
    // The kernel's name for the fd; without /proc, the path as given, made absolute.
    let opened = fs::read_link(format!("/proc/self/fd/{}", root.as_raw_fd()));
    let path = match opened {
        Ok(path) if path.is_absolute() && fs::metadata(&path).is_ok() => path,
        _ => std::path::absolute(dest).map_err(|e| Error::os("resolve", path_of(dest), e))?,
    };
    Ok(Prepared {
        path,
        free: fs.f_bavail.saturating_mul(fs.f_frsize),
    })
}

#[cfg(test)]
mod tests;
