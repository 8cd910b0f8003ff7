//! What an input that is not a barge archive looks like, from its first bytes: a front end
//! names the format and the tool that reads it instead of only "bad magic".

/// A known format other than barge's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Foreign {
    /// The format, with its article: `a gzip-compressed file`.
    pub what: &'static str,
    /// The tools that read it: `tar -xzf or gunzip`.
    pub tool: &'static str,
}

/// Magic numbers at the start of a file, and what they mean.
const MAGIC: [(&[u8], Foreign); 7] = [
    (
        b"\x1f\x8b",
        foreign("a gzip-compressed file", "tar -xzf or gunzip"),
    ),
    (
        b"\x28\xb5\x2f\xfd",
        foreign("a zstd-compressed file", "tar --zstd -xf or unzstd"),
    ),
    (
        b"\xfd7zXZ\0",
        foreign("an xz-compressed file", "tar -xJf or unxz"),
    ),
    (
        b"BZh",
        foreign("a bzip2-compressed file", "tar -xjf or bunzip2"),
    ),
    (
        b"\x04\x22\x4d\x18",
        foreign("an lz4-compressed file", "lz4 -d"),
    ),
    (b"PK\x03\x04", foreign("a zip archive", "unzip")),
    (b"7z\xbc\xaf\x27\x1c", foreign("a 7z archive", "7z x")),
];

const fn foreign(what: &'static str, tool: &'static str) -> Foreign {
    Foreign { what, tool }
}

/// The format `head` (an input's first bytes) starts like, when it is one this knows.
pub fn sniff(head: &[u8]) -> Option<Foreign> {
    // POSIX tar (ustar, and GNU's "ustar  "): the magic follows the first header's fields.
    if head.get(257..262) == Some(b"ustar") {
        return Some(foreign("a tar archive", "tar -xf"));
    }
    MAGIC
        .iter()
        .find(|(magic, _)| head.starts_with(magic))
        .map(|&(_, found)| found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_formats_are_named_by_their_magic() {
        let what = |head: &[u8]| sniff(head).map(|f| f.what);
        assert_eq!(what(b"\x1f\x8b\x08\0"), Some("a gzip-compressed file"));
        assert_eq!(what(b"\x28\xb5\x2f\xfd\0"), Some("a zstd-compressed file"));
        assert_eq!(what(b"\xfd7zXZ\0\0"), Some("an xz-compressed file"));
        assert_eq!(what(b"BZh91AY"), Some("a bzip2-compressed file"));
        assert_eq!(what(b"\x04\x22\x4d\x18"), Some("an lz4-compressed file"));
        assert_eq!(what(b"PK\x03\x04rest"), Some("a zip archive"));
        assert_eq!(what(b"7z\xbc\xaf\x27\x1c"), Some("a 7z archive"));
        let mut tar = vec![0u8; 512];
        tar[257..263].copy_from_slice(b"ustar\0");
        assert_eq!(sniff(&tar).map(|f| f.tool), Some("tar -xf"));
    }

    #[test]
    fn barge_short_and_unknown_heads_are_none() {
        assert_eq!(sniff(&crate::format::HEADER), None);
        assert_eq!(sniff(b""), None);
        assert_eq!(sniff(b"\x1f"), None, "half a magic");
        assert_eq!(sniff(b"hello world"), None);
        // ustar cut short before its magic ends.
        let mut tar = vec![0u8; 260];
        tar[257..260].copy_from_slice(b"ust");
        assert_eq!(sniff(&tar), None);
    }
}
