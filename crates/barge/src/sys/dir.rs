//! Directory listings: getdents64 on a directory fd into one reusable buffer.

use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;

use rustix::fs::{FileType, RawDir};

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
