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
//! In front of it, blocks up to [`CACHED`] bytes are kept when freed, by size class, in one
//! of [`SHARDS`] caches (each thread uses one), so that the landers of a run do not queue on
//! talc's one lock for the few blocks each entry allocates. mimalloc, whose threads need no
//! lock at all, was measured instead and rejected: it starts ~0.4 ms slower
//! (docs/BENCHMARKS.md, "The allocator at many threads").
//!
//! The one `unsafe` outside the library's `sys/`: a `GlobalAlloc` hands out raw blocks, so
//! its contract cannot be written in safe Rust; each block says why it holds.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::ptr::{null_mut, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rustix::mm::{mmap_anonymous, mremap, munmap, MapFlags, MremapFlags, ProtFlags};
use talc::{OomHandler, Span, Talc};

/// Blocks of this size and more get a mapping of their own.
const LARGE: usize = 256 << 10;
/// Size of a mapping that talc carves small blocks from.
const REGION: usize = 64 << 20;
/// Alignment a fresh mapping guarantees.
const PAGE: usize = 4096;
/// Blocks up to this size, aligned to at most [`CLASS`], are cached when freed.
const CACHED: usize = 512;
/// Step of the size classes, and the alignment of every cached block.
const CLASS: usize = 16;
const CLASSES: usize = CACHED / CLASS;
/// Freed blocks a shard keeps per class; more go back to talc.
const DEPTH: u16 = 32;
/// Caches of freed blocks; a thread takes the next one when it first allocates.
const SHARDS: usize = 32;

/// Small blocks from talc behind per-thread caches, large ones mapped one by one.
pub struct Allocator {
    small: Mutex<Talc<MapRegion>>,
    shards: [Mutex<Shard>; SHARDS],
}

/// Freed blocks by size class: a list threaded through each block's first word. Aligned so
/// that no two shards share a cache line (which each shard's thread would bounce).
#[repr(align(128))]
struct Shard {
    heads: [usize; CLASSES],
    counts: [u16; CLASSES],
}

impl Shard {
    const EMPTY: Self = Self {
        heads: [0; CLASSES],
        counts: [0; CLASSES],
    };
}

thread_local! {
    /// This thread's shard (`SHARDS` until its first allocation). No destructor, so no
    /// allocation to register one.
    static SHARD: Cell<usize> = const { Cell::new(SHARDS) };
}

/// The shard the next thread takes.
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

impl Allocator {
    /// An allocator that has mapped nothing yet.
    pub const fn new() -> Self {
        Self {
            small: Mutex::new(Talc::new(MapRegion)),
            shards: [const { Mutex::new(Shard::EMPTY) }; SHARDS],
        }
    }

    /// talc, locked. (It does not panic, so a poisoned lock only means a panic elsewhere.)
    fn small(&self) -> MutexGuard<'_, Talc<MapRegion>> {
        self.small.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This thread's cache, locked (by no other thread unless more than `SHARDS` threads
    /// have allocated).
    fn shard(&self) -> MutexGuard<'_, Shard> {
        let pick = |s: &Cell<usize>| {
            if s.get() == SHARDS {
                s.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS);
            }
            s.get()
        };
        let i = SHARD.try_with(pick).unwrap_or(0);
        self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The size class of a cached layout, whose blocks are `class_layout(class)`.
fn class(layout: Layout) -> Option<usize> {
    (layout.size() <= CACHED && layout.align() <= CLASS)
        .then(|| layout.size().max(1).div_ceil(CLASS) - 1)
}

/// What talc is asked for (and given back) for a block of size class `class`.
fn class_layout(class: usize) -> Layout {
    // SAFETY of the unchecked: a power-of-two alignment and a size of at most CACHED.
    unsafe { Layout::from_size_align_unchecked((class + 1) * CLASS, CLASS) }
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

// SAFETY: every block is either a mapping of exactly its layout's size (large layouts),
// talc's block of `class_layout` (cached layouts: in use or in a shard's list), or talc's
// block of its layout (the rest); the layout says which, at free and realloc too.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_large(layout) {
            map(layout.size())
        } else if let Some(class) = class(layout) {
            let mut shard = self.shard();
            let head = shard.heads[class];
            if head != 0 {
                // A cached block of this class: its first word links the next one.
                shard.heads[class] = *(head as *const usize);
                shard.counts[class] -= 1;
                return head as *mut u8;
            }
            drop(shard);
            self.small()
                .malloc(class_layout(class))
                .map_or(null_mut(), NonNull::as_ptr)
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
        } else if let Some(class) = class(layout) {
            let mut shard = self.shard();
            if shard.counts[class] < DEPTH {
                // Blocks are CLASS-aligned and at least CLASS bytes: room for the link.
                *ptr.cast::<usize>() = shard.heads[class];
                shard.heads[class] = ptr as usize;
                shard.counts[class] += 1;
                return;
            }
            drop(shard);
            self.small()
                .free(NonNull::new_unchecked(ptr), class_layout(class))
        } else {
            self.small().free(NonNull::new_unchecked(ptr), layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = Layout::from_size_align_unchecked(new_size, layout.align());
        let classes = (class(layout), class(new));
        if classes.0.is_some() && classes.0 == classes.1 {
            return ptr; // the block already has the new size's room
        }
        // A cached block moves (a copy of at most CACHED bytes); talc's grow in place.
        let uncached = classes == (None, None);
        match (is_large(layout), is_large(new)) {
            (false, false) if uncached && new_size > layout.size() => {
                let ptr = NonNull::new_unchecked(ptr);
                let grown = self.small().grow(ptr, layout, new_size);
                grown.map_or(null_mut(), NonNull::as_ptr)
            }
            (false, false) if uncached => {
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
            CACHED + 1,
            CACHED,
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

    /// A cached block comes back aligned and sized for any layout of its class, also after
    /// a class's cache has overflowed into talc.
    #[test]
    fn cached_blocks_fit_every_layout_of_their_class() {
        let a = Allocator::new();
        let n = 3 * DEPTH as usize;
        let small = Layout::from_size_align(17, 1).unwrap();
        let wide = Layout::from_size_align(2 * CLASS, CLASS).unwrap();
        unsafe {
            let blocks: Vec<_> = (0..n).map(|_| a.alloc(small)).collect();
            for &p in &blocks {
                a.dealloc(p, small);
            }
            let again: Vec<_> = (0..n).map(|_| a.alloc_zeroed(wide)).collect();
            for (i, &p) in again.iter().enumerate() {
                assert_eq!(p as usize % CLASS, 0, "block {i}");
                assert!((0..wide.size()).all(|j| *p.add(j) == 0), "block {i}");
                p.write_bytes(i as u8, wide.size());
            }
            for (i, &p) in again.iter().enumerate() {
                assert!((0..wide.size()).all(|j| *p.add(j) == i as u8), "block {i}");
                a.dealloc(p, wide);
            }
        }
    }

    /// Blocks allocated by one thread and freed by others (whose caches keep them) stay
    /// distinct and intact while all threads allocate at once.
    #[test]
    fn blocks_freed_by_other_threads() {
        static A: Allocator = Allocator::new();
        let layout = Layout::from_size_align(48, 8).unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<usize>();
        let rx = std::sync::Mutex::new(rx);
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let tx = tx.clone();
                let rx = &rx;
                s.spawn(move || unsafe {
                    for _ in 0..2000 {
                        let p = A.alloc(layout);
                        p.write_bytes(t, layout.size());
                        tx.send(p as usize | usize::from(t)).unwrap();
                        let got = rx.lock().unwrap().recv().unwrap();
                        let (p, owner) = ((got & !15) as *mut u8, (got & 15) as u8);
                        assert!((0..layout.size()).all(|j| *p.add(j) == owner));
                        A.dealloc(p, layout);
                    }
                });
            }
        });
    }
}
