//! `serve --quota`: what DEST holds, as the quota counts it. The quota itself, shared by the
//! uploads landing, is the library's [`barge::uploads::Quota`]: every entry is charged
//! [`barge::format::space`], at least a 4 KiB block, so that empty entries are not free.

use std::path::Path;

use barge::exclude::Exclude;
use barge::threads::Work;

/// What `path` and everything below it take, as the quota counts it (each entry charged as
/// landing charges it, or its allocated size when more; see `barge::du::Totals::space`).
pub(super) fn space_below(path: &Path) -> u64 {
    let threads = Work::Cores.threads();
    crate::du::totals_below(&[path.to_path_buf()], Exclude::default(), threads).space
}
