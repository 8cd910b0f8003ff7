//! Directory listings: getdents64 on a directory fd into one reusable buffer.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{fchmod, openat, unlinkat, AtFlags, FileType, Mode, RawDir};
use rustix::io::Errno;

use super::DIR_FLAGS;

/// Size of the getdents64 buffer.
const DIRENT_BUFFER: usize = 64 * 1024;

/// The entries of one directory: names in one buffer, with their getdents64 types.
#[derive(Default, Debug)]
pub struct Listing {
    names: Vec<u8>,
    entries: Vec<(u32, u8, FileType)>,
}

impl Listing {
    /// Replaces the contents with the entries of the directory `dir` (without `.` and `..`).
    pub fn read(
        &mut self,
        dir: BorrowedFd<'_>,
        buf: &mut [MaybeUninit<u8>],
    ) -> rustix::io::Result<()> {
        self.names.clear();
        self.entries.clear();
        let mut raw = RawDir::new(dir, buf);
        while let Some(entry) = raw.next() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            self.entries
                .push((self.names.len() as u32, name.len() as u8, entry.file_type()));
            self.names.extend_from_slice(name);
        }
        Ok(())
    }

    /// Sorts the entries by name bytes.
    pub fn sort(&mut self) {
        let names = &self.names;
        self.entries.sort_unstable_by(|a, b| {
            let name = |(start, len, _): &(u32, u8, FileType)| {
                &names[*start as usize..*start as usize + *len as usize]
            };
            name(a).cmp(name(b))
        });
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the directory has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The name and type of entry `i`.
    pub fn get(&self, i: usize) -> (&[u8], FileType) {
        let (start, len, kind) = self.entries[i];
        (
            &self.names[start as usize..start as usize + len as usize],
            kind,
        )
    }
}

/// A getdents64 buffer of the walker's size.
pub fn dirent_buffer() -> Vec<MaybeUninit<u8>> {
    vec![MaybeUninit::uninit(); DIRENT_BUFFER]
}

/// Removes the entry `name` of `dir` and, when it is a directory, everything below it,
/// relative to directory fds and never following a symlink; `buf` is a getdents buffer.
pub(crate) fn remove_tree(
    dir: BorrowedFd<'_>,
    name: &[u8],
    buf: &mut [MaybeUninit<u8>],
) -> rustix::io::Result<()> {
    match unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ISDIR) => {}
        Err(e) => return Err(e),
    }
    let fd = openat(dir, name, DIR_FLAGS, Mode::empty())?;
    // A directory a landing made read-only would keep its entries; one of another owner
    // stays as it is (its entries' removal then says why).
    match fchmod(&fd, Mode::RWXU) {
        Ok(()) | Err(Errno::PERM) => {}
        Err(e) => return Err(e),
    }
    let mut listing = Listing::default();
    listing.read(fd.as_fd(), buf)?;
    for i in 0..listing.len() {
        remove_tree(fd.as_fd(), listing.get(i).0, buf)?;
    }
    unlinkat(dir, name, AtFlags::REMOVEDIR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remove_tree_removes_read_only_directories_and_never_follows_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let (tree, outside) = (tmp.path().join("tree"), tmp.path().join("outside"));
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("kept"), b"x").unwrap();
        std::fs::write(tree.join("a/b/f"), b"x").unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("a/link")).unwrap();
        let mode = |p: &std::path::Path, m| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(&tree.join("a/b"), 0o500);
        mode(&tree.join("a"), 0o500);
        let parent = openat(rustix::fs::CWD, tmp.path(), DIR_FLAGS, Mode::empty()).unwrap();
        remove_tree(parent.as_fd(), b"tree", &mut dirent_buffer()).unwrap();
        assert!(!tree.exists());
        assert!(outside.join("kept").exists());
        assert_eq!(
            remove_tree(parent.as_fd(), b"tree", &mut dirent_buffer()),
            Ok(())
        );
    }
}
