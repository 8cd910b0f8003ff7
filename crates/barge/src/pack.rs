//! `pack`: walk a directory and encode it. Small files are read straight into the output
//! buffer (one large `write` for many files); large ones go from file to output by
//! `sendfile` of exactly their `fstat` size.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{fstat, sendfile, FileType, Stat};
use rustix::io::{read, write, Errno};

use crate::error::{Error, Result, TreePath};
use crate::format::encode::{push_dir, push_end, push_file_header, push_pop};
use crate::format::HEADER;
use crate::walk::{walk, Location, Visitor};
use crate::Progress;

/// Files up to this size are copied into the output buffer; larger ones are sent by `sendfile`.
const INLINE_MAX: u64 = 64 * 1024;
/// The output buffer is written out when it holds this much.
const FLUSH_AT: usize = 1 << 20;

/// What a pack did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackSummary {
    /// Directories packed (the root not included).
    pub dirs: u64,
    /// Regular files packed.
    pub files: u64,
    /// Bytes of file content.
    pub bytes: u64,
    /// Bytes of archive written.
    pub archive_bytes: u64,
    /// Entries skipped because they are not dirs or regular files, with their kind.
    pub skipped: Vec<(TreePath, &'static str)>,
}

/// Packs the tree below the directory `root` into `out` (a file, pipe or socket). When
/// `out` is a regular file, a file with its device and inode is skipped (the archive
/// never packs itself).
pub fn pack(root: OwnedFd, out: BorrowedFd<'_>, progress: &Progress) -> Result<PackSummary> {
    let out_stat =
        fstat(out).map_err(|e| Error::io("fstat", TreePath(b"<archive>".to_vec()), e))?;
    let mut packer = Packer {
        out,
        itself: (FileType::from_raw_mode(out_stat.st_mode) == FileType::RegularFile)
            .then_some((out_stat.st_dev, out_stat.st_ino)),
        buf: Vec::with_capacity(FLUSH_AT + INLINE_MAX as usize + 512),
        summary: PackSummary::default(),
        progress,
    };
    packer.buf.extend_from_slice(&HEADER);
    walk(root, &mut packer)?;
    let entries = packer.summary.dirs + packer.summary.files;
    push_end(&mut packer.buf, entries);
    packer.flush()?;
    Ok(packer.summary)
}

struct Packer<'a> {
    out: BorrowedFd<'a>,
    itself: Option<(u64, u64)>,
    buf: Vec<u8>,
    summary: PackSummary,
    progress: &'a Progress,
}

impl Packer<'_> {
    fn flush(&mut self) -> Result<()> {
        let mut rest = &self.buf[..];
        while !rest.is_empty() {
            match write(self.out, rest) {
                Ok(n) => rest = &rest[n..],
                Err(Errno::INTR) => {}
                Err(e) => return Err(Error::io("write archive", TreePath::default(), e)),
            }
        }
        self.summary.archive_bytes += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Appends exactly `size` bytes of `file` to the buffer, failing if the file is shorter
    /// or longer than that. Reads one byte more than expected, so that growth shows in the
    /// same `read` that normally ends the file.
    fn read_inline(
        &mut self,
        file: BorrowedFd<'_>,
        size: u64,
        path: impl Fn() -> TreePath,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let size = size as usize;
        let start = self.buf.len();
        self.buf.reserve(size + 1);
        loop {
            let wanted = size + 1 - (self.buf.len() - start);
            match read(file, &mut self.buf.spare_capacity_mut()[..wanted]) {
                Ok((filled, _)) => {
                    let n = filled.len();
                    // SAFETY: `read` initialized the first `n` spare bytes.
                    unsafe { self.buf.set_len(self.buf.len() + n) };
                    let got = self.buf.len() - start;
                    // Stop at end of file, at growth, or at a short read ending at the size.
                    if n == 0 || got > size || (got == size && n < wanted) {
                        break;
                    }
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(Error::io("read", path(), e)),
            }
        }
        let actual = (self.buf.len() - start) as u64;
        if actual == size as u64 {
            return Ok(());
        }
        Err(Error::Changed {
            path: path(),
            expected: size as u64,
            actual,
        })
    }

    /// Sends exactly `size` bytes of `file` to the output, then checks it did not grow.
    fn send(&mut self, file: BorrowedFd<'_>, size: u64, path: impl Fn() -> TreePath) -> Result<()> {
        self.flush()?;
        let mut offset = 0u64;
        while offset < size {
            let chunk = (size - offset).min(1 << 30) as usize;
            match sendfile(self.out, file, Some(&mut offset), chunk) {
                Ok(0) => {
                    return Err(Error::Changed {
                        path: path(),
                        expected: size,
                        actual: offset,
                    })
                }
                Ok(_) => {}
                Err(Errno::INTR) => {}
                Err(e) => return Err(Error::io("sendfile", path(), e)),
            }
        }
        let now = fstat(file).map_err(|e| Error::io("fstat", path(), e))?;
        if now.st_size as u64 != size {
            return Err(Error::Changed {
                path: path(),
                expected: size,
                actual: now.st_size as u64,
            });
        }
        self.summary.archive_bytes += size;
        Ok(())
    }
}

impl Visitor for Packer<'_> {
    fn enter_dir(&mut self, name: &[u8], stat: &Stat, _at: &Location) -> Result<()> {
        push_dir(&mut self.buf, name, stat.st_mode);
        self.summary.dirs += 1;
        self.progress.add_entry(0);
        Ok(())
    }

    fn leave_dir(&mut self) -> Result<()> {
        push_pop(&mut self.buf);
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    fn file(&mut self, name: &[u8], file: OwnedFd, stat: &Stat, at: &Location) -> Result<()> {
        if self.itself == Some((stat.st_dev, stat.st_ino)) {
            self.skip(at.path(name), "the archive being written");
            return Ok(());
        }
        let size = stat.st_size as u64;
        push_file_header(&mut self.buf, name, stat.st_mode, size);
        let path = || at.path(name);
        if size <= INLINE_MAX {
            self.read_inline(file.as_fd(), size, path)?;
            if self.buf.len() >= FLUSH_AT {
                self.flush()?;
            }
        } else {
            self.send(file.as_fd(), size, path)?;
        }
        self.summary.files += 1;
        self.summary.bytes += size;
        self.progress.add_entry(size);
        Ok(())
    }

    fn skip(&mut self, path: TreePath, kind: &'static str) {
        self.summary.skipped.push((path, kind));
    }
}
