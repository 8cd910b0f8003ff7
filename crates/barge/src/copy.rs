//! Kernel copies: file content moved between descriptors without passing through the
//! process, with a read + write fallback where the kernel refuses the copy call.

use std::os::fd::BorrowedFd;

use rustix::fs::{copy_file_range, sendfile};
use rustix::io::{pread, write, Errno};

use crate::error::{Error, Result, TreePath};
use crate::interrupt::{retry, Cancel};

/// Most bytes one call moves: a stop request is seen between two.
const CHUNK: usize = 1 << 30;

/// Most bytes one `copy_file_range` moves: a stop request is seen between two.
const RANGE_CHUNK: u64 = 64 << 20;

/// The buffer of the read + write fallback.
const FALLBACK_BUFFER: usize = 1 << 20;

/// Sends the first `size` bytes of the regular file `from` to `to` (any fd: a file, pipe,
/// socket, device) with `sendfile`, or, where the kernel refuses it for this pair (`EINVAL`:
/// `to` was opened with `O_APPEND`, as by a shell's `>>`; `ENOSYS`), with `pread` + `write`.
/// Calls `moved` after every step with its byte count (progress, stop checks: its error
/// ends the copy). Returns the bytes sent: fewer than `size` when `from` was shorter.
/// Errors name the failed call and `path`.
pub fn send_file(
    to: BorrowedFd<'_>,
    from: BorrowedFd<'_>,
    size: u64,
    path: &TreePath,
    cancel: &Cancel,
    mut moved: impl FnMut(u64) -> Result<()>,
) -> Result<u64> {
    let mut offset = 0u64;
    while offset < size {
        let chunk = (size - offset).min(CHUNK as u64) as usize;
        match retry(cancel, || sendfile(to, from, Some(&mut offset), chunk)) {
            Ok(0) => return Ok(offset),
            Ok(n) => moved(n as u64)?,
            Err(Errno::INVAL | Errno::NOSYS) if offset == 0 => {
                return read_write(to, from, size, path, cancel, moved)
            }
            Err(e) => return Err(Error::io("sendfile", path.clone(), e)),
        }
    }
    Ok(offset)
}

/// [`send_file`]'s fallback.
fn read_write(
    to: BorrowedFd<'_>,
    from: BorrowedFd<'_>,
    size: u64,
    path: &TreePath,
    cancel: &Cancel,
    mut moved: impl FnMut(u64) -> Result<()>,
) -> Result<u64> {
    let mut buf = vec![0u8; (size as usize).min(FALLBACK_BUFFER)];
    read_chunks(from, 0, size, &mut buf, path, cancel, |chunk| {
        write_all(to, chunk, cancel, &mut moved)
    })
}

/// Reads the `len` bytes of the regular file `from` (`path` in messages) at `start` in
/// `buf`-sized `pread`s, handing each piece to `each`; returns the bytes read: fewer than
/// `len` when `from` ends before.
pub(crate) fn read_chunks(
    from: BorrowedFd<'_>,
    start: u64,
    len: u64,
    buf: &mut [u8],
    path: &TreePath,
    cancel: &Cancel,
    mut each: impl FnMut(&[u8]) -> Result<()>,
) -> Result<u64> {
    let mut read = 0u64;
    while read < len {
        let want = (len - read).min(buf.len() as u64) as usize;
        let n = retry(cancel, || pread(from, &mut buf[..want], start + read))
            .map_err(|e| Error::io("read", path.clone(), e))?;
        if n == 0 {
            break;
        }
        each(&buf[..n])?;
        read += n as u64;
    }
    Ok(read)
}

/// What [`copy_range`] did.
pub(crate) struct Ranged {
    /// Bytes copied: all asked for, or fewer where the source ended first or the kernel
    /// refused.
    pub(crate) copied: u64,
    /// The kernel copies nothing between these two files (`EXDEV`, `EINVAL`, `EOPNOTSUPP`,
    /// `ENOSYS`: other filesystems, a filesystem without it): the caller moves the rest
    /// through memory.
    pub(crate) refused: bool,
}

/// Copies `len` bytes of the regular file `from` at `at` into `to` (at `to_at`, or at its
/// file position) by `copy_file_range` in 64 MiB steps, with a check of `cancel` between
/// two, calling `moved` after each. Errors name `path`.
pub(crate) fn copy_range(
    (from, mut at): (BorrowedFd<'_>, u64),
    (to, mut to_at): (BorrowedFd<'_>, Option<u64>),
    len: u64,
    path: &dyn Fn() -> TreePath,
    cancel: &Cancel,
    mut moved: impl FnMut(u64),
) -> Result<Ranged> {
    let mut copied = 0;
    while copied < len {
        let chunk = (len - copied).min(RANGE_CHUNK) as usize;
        match retry(cancel, || {
            copy_file_range(from, Some(&mut at), to, to_at.as_mut(), chunk)
        }) {
            Ok(0) => break,
            Ok(n) => {
                copied += n as u64;
                moved(n as u64);
                if copied < len {
                    cancel.check()?;
                }
            }
            Err(Errno::XDEV | Errno::INVAL | Errno::OPNOTSUPP | Errno::NOSYS) => {
                return Ok(Ranged {
                    copied,
                    refused: true,
                })
            }
            Err(e) => return Err(Error::io("copy_file_range", path(), e)),
        }
    }
    Ok(Ranged {
        copied,
        refused: false,
    })
}

/// Writes all of `bytes` to the archive output `to`, calling `moved` after each `write`
/// with its byte count.
pub(crate) fn write_all(
    to: BorrowedFd<'_>,
    mut bytes: &[u8],
    cancel: &Cancel,
    mut moved: impl FnMut(u64) -> Result<()>,
) -> Result<()> {
    while !bytes.is_empty() {
        let n = retry(cancel, || write(to, bytes))
            .map_err(|e| Error::os("write archive", TreePath::default(), e.into()))?;
        bytes = &bytes[n..];
        moved(n as u64)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsFd;

    fn sent_to(out: &std::fs::File, size: u64) -> (u64, u64) {
        let mut from = tempfile::tempfile().unwrap();
        from.write_all(&vec![5u8; 3 << 20]).unwrap();
        let mut steps = 0;
        let sent = send_file(
            out.as_fd(),
            from.as_fd(),
            size,
            &TreePath::default(),
            &Cancel::new(),
            |_| {
                steps += 1;
                Ok(())
            },
        )
        .unwrap();
        (sent, steps)
    }

    #[test]
    fn an_append_only_output_gets_the_bytes_through_the_fallback() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        std::fs::write(&path, b"head").unwrap();
        let out = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        // sendfile refuses O_APPEND outputs; three 1 MiB writes instead.
        assert_eq!(sent_to(&out, 3 << 20), (3 << 20, 3));
        let written = std::fs::read(&path).unwrap();
        assert_eq!(written.len(), 4 + (3 << 20));
        assert!(written[4..].iter().all(|&b| b == 5));
    }

    #[test]
    fn a_short_file_sends_what_it_has() {
        let mut out = tempfile::tempfile().unwrap();
        assert_eq!(sent_to(&out, 4 << 20).0, 3 << 20);
        out.rewind().unwrap();
        let mut back = Vec::new();
        out.read_to_end(&mut back).unwrap();
        assert_eq!(back.len(), 3 << 20);
    }
}
