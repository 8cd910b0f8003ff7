//! The global allocator.
//!
//! The release `barge` is a static musl binary (see `scripts/build`): in a VM, where each
//! of the `cpuid` instructions of glibc's start-up exits to the hypervisor, musl starts
//! faster. musl's own allocator maps and unmaps small groups of pages as they fill and
//! empty, though, each `munmap` a TLB shoot-down across the CPUs while the landers run,
//! which ate most of that gain (docs/BENCHMARKS.md, "Design measurements"). Here, blocks under
//! [`LARGE`] come from talc, a free-list allocator over [`REGION`]-sized mappings that are
//! never unmapped (untouched pages cost nothing), and larger blocks get a mapping of their
//! own, as every libc's `malloc` does, so that big buffers go back to the system when freed
//! and grow with `mremap` instead of a copy.
//! talc sits behind a `std` mutex (futex-based: a thread that finds it taken spins briefly,
//! then sleeps, so a holder that was preempted does not cost the waiter its time slice).
//!
//! The one `unsafe` outside the library's `sys/`: a `GlobalAlloc` hands out raw blocks, so
//! its contract cannot be written in safe Rust; each block says why it holds.

use std::alloc::{GlobalAlloc, Layout};
use std::ptr::{null_mut, NonNull};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rustix::mm::{mmap_anonymous, mremap, munmap, MapFlags, MremapFlags, ProtFlags};
use talc::{OomHandler, Span, Talc};

/// Blocks of this size and more get a mapping of their own.
const LARGE: usize = 256 << 10;
/// Size of a mapping that talc carves small blocks from.
const REGION: usize = 64 << 20;
/// Alignment a fresh mapping guarantees.
const PAGE: usize = 4096;

/// Small blocks from talc, large ones mapped one by one.
pub struct Allocator {
    small: Mutex<Talc<MapRegion>>,
}

impl Allocator {
    /// An allocator that has mapped nothing yet.
    pub const fn new() -> Self {
        Self {
            small: Mutex::new(Talc::new(MapRegion)),
        }
    }

    /// talc, locked. (It does not panic, so a poisoned lock only means a panic elsewhere.)
    fn small(&self) -> MutexGuard<'_, Talc<MapRegion>> {
        self.small.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Gives talc another region when it runs out.
struct MapRegion;

impl OomHandler for MapRegion {
    fn handle_oom(talc: &mut Talc<Self>, layout: Layout) -> Result<(), ()> {
        let size = REGION.max(layout.size() + layout.align() + PAGE);
        let base = map(size);
        if base.is_null() {
            return Err(());
        }
        // SAFETY: a fresh mapping of `size` bytes that nothing else uses.
        unsafe { talc.claim(Span::from_base_size(base, size)) }.map(drop)
    }
}

fn is_large(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= PAGE
}

/// A fresh zeroed read-write mapping of `size` bytes, or null.
fn map(size: usize) -> *mut u8 {
    let prot = ProtFlags::READ | ProtFlags::WRITE;
    let flags = MapFlags::PRIVATE | MapFlags::NORESERVE;
    // SAFETY: a new anonymous mapping at an address of the kernel's choice.
    unsafe { mmap_anonymous(null_mut(), size, prot, flags) }.map_or(null_mut(), |p| p.cast())
}

// SAFETY: every block is either talc's (small layouts) or a mapping of exactly its layout's
// size (large layouts); `is_large` of the layout says which, at free and realloc too.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_large(layout) {
            map(layout.size())
        } else {
            self.small()
                .malloc(layout)
                .map_or(null_mut(), NonNull::as_ptr)
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = self.alloc(layout);
        // Fresh mappings read as zeros; talc's blocks may have been used before.
        if !is_large(layout) && !p.is_null() {
            p.write_bytes(0, layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_large(layout) {
            // Cannot fail for a whole mapping made by `map`; a leak is the worst case.
            let _ = munmap(ptr.cast(), layout.size());
        } else {
            self.small().free(NonNull::new_unchecked(ptr), layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = Layout::from_size_align_unchecked(new_size, layout.align());
        match (is_large(layout), is_large(new)) {
            (false, false) if new_size > layout.size() => {
                let ptr = NonNull::new_unchecked(ptr);
                let grown = self.small().grow(ptr, layout, new_size);
                grown.map_or(null_mut(), NonNull::as_ptr)
            }
            (false, false) => {
                self.small()
                    .shrink(NonNull::new_unchecked(ptr), layout, new_size);
                ptr
            }
            (true, true) => mremap(ptr.cast(), layout.size(), new_size, MremapFlags::MAYMOVE)
                .map_or(null_mut(), |p| p.cast()),
            _ => {
                let moved = self.alloc(new);
                if !moved.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Grows one block from small to large and shrinks it back (every realloc path),
    /// checking its contents survive each move.
    #[test]
    fn realloc_keeps_contents_across_the_large_threshold() {
        let a = Allocator::new();
        let sizes = [
            100,
            LARGE - 1,
            LARGE,
            3 * LARGE + 5,
            40 * LARGE,
            LARGE + 1,
            LARGE - 8,
            16,
        ];
        let mut layout = Layout::from_size_align(sizes[0], 8).unwrap();
        unsafe {
            let mut p = a.alloc(layout);
            assert!(!p.is_null());
            for i in 0..layout.size() {
                *p.add(i) = i as u8;
            }
            for &size in &sizes[1..] {
                let kept = layout.size().min(size);
                p = a.realloc(p, layout, size);
                assert!(!p.is_null(), "realloc to {size}");
                for i in 0..kept {
                    assert_eq!(*p.add(i), i as u8, "byte {i} after realloc to {size}");
                }
                layout = Layout::from_size_align(size, 8).unwrap();
                for i in 0..size {
                    *p.add(i) = i as u8;
                }
            }
            a.dealloc(p, layout);
        }
    }

    /// Zeroed blocks are zero on both paths, also where talc reuses a dirty block.
    #[test]
    fn zeroed_blocks_are_zero() {
        let a = Allocator::new();
        for size in [64, 4000, LARGE, 5 * LARGE] {
            let layout = Layout::from_size_align(size, 16).unwrap();
            unsafe {
                let dirty = a.alloc(layout);
                dirty.write_bytes(0xAB, size);
                a.dealloc(dirty, layout);
                let p = a.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert!((0..size).all(|i| *p.add(i) == 0), "size {size}");
                a.dealloc(p, layout);
            }
        }
    }

    /// Alignments beyond a page come from talc, also for blocks larger than a region; a
    /// region-sized block with a small alignment gets its own mapping.
    #[test]
    fn oversized_and_overaligned_blocks() {
        let a = Allocator::new();
        for (size, align) in [(2 * REGION, 2 * PAGE), (100, 4 * PAGE), (REGION, 8)] {
            let layout = Layout::from_size_align(size, align).unwrap();
            unsafe {
                let p = a.alloc(layout);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "align {align}");
                p.write_bytes(1, size);
                a.dealloc(p, layout);
            }
        }
    }
}
