//! Transparent huge pages under the heap (Linux with glibc).
//!
//! A large fabric's state is hundreds of MiB of small allocations (every
//! NIC's tables, every port's line of packets) read in no order a cache
//! or a TLB can follow: at 8,192 hosts its 634 MiB are 160,000 pages of
//! 4 KiB, where a TLB holds a few thousand, so a packet-hop's cache
//! misses tend to miss the TLB as well. Where the kernel offers transparent
//! huge pages only to memory that asks for them (`madvise` mode, the
//! usual default), this allocator asks: it is the system allocator, and
//! after each allocation that grew the heap it marks the new part
//! `MADV_HUGEPAGE`, as do allocations of 2 MiB and more (which glibc maps
//! apart from the heap). It also makes the heap grow in steps of 64 MiB
//! and keeps allocations up to 32 MiB on the heap, so the new parts are
//! marked before most of their pages are touched.
//!
//! Outcomes do not depend on it (no address reaches a result or a hash);
//! it changes speed and, by at most a huge page per partly used 2 MiB,
//! resident memory. Only the commands that simulate ask; those that put
//! the engine on real sockets keep small pages (a fault that clears a
//! 2 MiB page, or waits for the kernel to compact memory, would stall a
//! transfer in real time, and their state is small).
//! `UDRMA_HUGE_PAGES=0` turns it off; `udrma bench sim` reports how much
//! of the process's memory the kernel gave huge pages.
//! glibc's own `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` does the same from
//! the environment; this needs no environment.

/// Whether [`enable`] turned huge pages on, and if not why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The heap asks for huge pages.
    On,
    /// `UDRMA_HUGE_PAGES=0` (or `off`) asked not to.
    OffByRequest,
    /// The kernel or the C library offers none (not Linux with glibc, or
    /// transparent huge pages set to `never`).
    Unavailable,
    /// Not asked for: the command runs real sockets, not the simulator.
    NotAsked,
}

impl core::fmt::Display for Status {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Status::On => "on",
            Status::OffByRequest => "off (UDRMA_HUGE_PAGES=0)",
            Status::Unavailable => "unavailable (needs Linux, glibc and transparent huge pages)",
            Status::NotAsked => "not asked for (this command does not simulate)",
        })
    }
}

/// Whether the kernel gives transparent huge pages to memory that asks
/// (`madvise` or `always` in `/sys/kernel/mm/transparent_hugepage/enabled`).
pub fn kernel_offers() -> bool {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|m| m.contains("[madvise]") || m.contains("[always]"))
}

/// Whether the environment asks for huge pages to stay off.
fn refused() -> bool {
    std::env::var("UDRMA_HUGE_PAGES").is_ok_and(|v| matches!(v.trim(), "0" | "off" | "no"))
}

/// Bytes of the process's memory the kernel backs with huge pages now
/// (`AnonHugePages` of `/proc/self/smaps_rollup`), if it says.
pub fn resident_huge_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = text.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    #![allow(unsafe_code)]

    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};

    use super::Status;

    /// Allocations at least this large are marked themselves (glibc maps
    /// those above its mmap threshold apart from the heap).
    const HUGE: usize = 2 << 20;
    /// The heap grows at least this much at a time.
    const TOP_PAD: i32 = 64 << 20;
    /// Allocations up to this size stay on the heap (glibc's largest).
    const MMAP_THRESHOLD: i32 = 32 << 20;
    const PAGE: usize = 4096;

    /// The system allocator, marking new heap `MADV_HUGEPAGE` once
    /// [`enable`] turned it on.
    pub(super) struct Heap {
        on: AtomicBool,
        /// Where the main heap began when huge pages were turned on.
        start: AtomicUsize,
        /// The end of the heap already marked.
        advised: AtomicUsize,
    }

    #[global_allocator]
    static HEAP: Heap = Heap {
        on: AtomicBool::new(false),
        start: AtomicUsize::new(0),
        advised: AtomicUsize::new(0),
    };

    /// The size and alignment of each heap of a thread's arena: glibc
    /// maps them one by one, 64 MiB each on 64-bit systems.
    const ARENA_HEAP: usize = 64 << 20;

    /// Arena heaps already marked, one bit per 64 MiB of a 47-bit
    /// address space (256 KiB, untouched until a thread's arena is
    /// used). A thread's arena is a chain of heaps, and a thread
    /// allocates from any of them as frees come back: remembering only
    /// the last one marked had a split k=32 run call `madvise` 231,296
    /// times (32 times now).
    static MARKED: [AtomicU64; MARKED_WORDS] = [const { AtomicU64::new(0) }; MARKED_WORDS];
    const MARKED_WORDS: usize = (1 << 47) / ARENA_HEAP / 64;

    /// Marks the arena heap that holds `at` unless it is marked already;
    /// whether it asked the kernel. (A heap glibc unmapped and mapped
    /// again at the same place stays unmarked: it only costs speed.)
    pub(super) fn mark_arena_heap(at: usize) -> bool {
        let n = at / ARENA_HEAP;
        let (word, bit) = (n / 64, 1u64 << (n % 64));
        let Some(w) = MARKED.get(word) else {
            return false;
        };
        if w.load(Relaxed) & bit == 0 && w.fetch_or(bit, Relaxed) & bit == 0 {
            advise(n * ARENA_HEAP, ARENA_HEAP);
            return true;
        }
        false
    }

    /// Asks the kernel for huge pages under `len` bytes from `start` (the
    /// range widened to whole pages). Only a hint: a refusal changes
    /// nothing but speed, so its result is not looked at.
    fn advise(start: usize, len: usize) {
        let from = start & !(PAGE - 1);
        let to = start.saturating_add(len);
        // SAFETY: madvise with MADV_HUGEPAGE changes no contents and no
        // protection; on a range that is not mapped it fails with ENOMEM
        // and does nothing. The ranges here are the heap's new part or an
        // allocation the caller just received, both mapped.
        unsafe {
            libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
        }
    }

    impl Heap {
        /// After the system allocator returned `p` of `size` bytes: marks
        /// the heap's new part, and `p` itself when it is large.
        #[inline]
        fn after(&self, p: *mut u8, size: usize) {
            if p.is_null() || !self.on.load(Relaxed) {
                return;
            }
            // SAFETY: sbrk(0) only reads the current program break.
            let brk = unsafe { libc::sbrk(0) } as usize;
            let done = self.advised.load(Relaxed);
            if brk != done {
                // (A heap trimmed since is marked again as it regrows.)
                self.advised.store(brk, Relaxed);
                if brk > done && done != 0 {
                    advise(done, brk - done);
                }
            }
            let at = p as usize;
            if size >= HUGE {
                advise(at, size);
            } else if at < self.start.load(Relaxed) || at >= brk {
                // Not the main heap: a thread's arena (a split run's
                // shards allocate there). Its heap is marked whole, once.
                mark_arena_heap(at);
            }
        }
    }

    // SAFETY: every call is the system allocator's, with the caller's
    // arguments; `after` only gives the kernel a hint about memory that
    // allocator owns.
    unsafe impl GlobalAlloc for Heap {
        #[inline]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract is System's.
            let p = unsafe { System.alloc(layout) };
            self.after(p, layout.size());
            p
        }

        #[inline]
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // SAFETY: as for `alloc`.
            let p = unsafe { System.alloc_zeroed(layout) };
            self.after(p, layout.size());
            p
        }

        #[inline]
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: `ptr` came from System (every allocation here does).
            unsafe { System.dealloc(ptr, layout) }
        }

        #[inline]
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: as for `dealloc`.
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            self.after(p, new_size);
            p
        }
    }

    pub(super) fn enable() -> Status {
        if super::refused() {
            return Status::OffByRequest;
        }
        if !super::kernel_offers() {
            return Status::Unavailable;
        }
        // SAFETY: mallopt only changes glibc's allocation policy; sbrk(0)
        // reads the program break.
        unsafe {
            libc::mallopt(libc::M_TOP_PAD, TOP_PAD);
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            let brk = libc::sbrk(0) as usize;
            HEAP.start.store(brk, Relaxed);
            HEAP.advised.store(brk, Relaxed);
        }
        HEAP.on.store(true, Relaxed);
        Status::On
    }
}

/// Turns huge pages on for the rest of the process, unless
/// `UDRMA_HUGE_PAGES=0` or the system offers none; says which.
pub fn enable() -> Status {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        glibc::enable()
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        if refused() {
            Status::OffByRequest
        } else {
            Status::Unavailable
        }
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Turns huge pages on; where the kernel offers none, says the test
    /// is skipped and returns false.
    fn turned_on() -> bool {
        if !kernel_offers() || refused() {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: no transparent huge pages here (or UDRMA_HUGE_PAGES=0)"
            );
            return false;
        }
        assert_eq!(enable(), Status::On);
        true
    }

    /// An allocation larger than glibc keeps on its heap (it maps those
    /// apart) is marked itself: touched, it sits on huge pages. Where the
    /// kernel offers none, the test says so and checks nothing.
    #[test]
    fn a_large_allocation_lands_on_huge_pages() {
        if !turned_on() {
            return;
        }
        let before = resident_huge_bytes().unwrap_or(0);
        let mut big = vec![0u8; 64 << 20];
        for i in (0..big.len()).step_by(4096) {
            big[i] = 1;
        }
        let after = resident_huge_bytes().unwrap_or(0);
        assert!(
            after >= before + (32 << 20),
            "{} MiB on huge pages before, {} MiB after touching 64 MiB",
            before >> 20,
            after >> 20
        );
        assert_eq!(
            big.iter().step_by(4096).filter(|&&b| b == 1).count(),
            16_384
        );
    }

    /// Small allocations of a thread other than the main one come from
    /// its own glibc arena, away from the main heap: that heap is marked
    /// too, so touched, they sit on huge pages. Where the kernel offers
    /// none, the test says so and checks nothing.
    #[test]
    fn a_threads_arena_lands_on_huge_pages() {
        if !turned_on() {
            return;
        }
        let before = resident_huge_bytes().unwrap_or(0);
        let (pieces, after) = std::thread::spawn(|| {
            let mut pieces: Vec<Vec<u8>> = Vec::new();
            for i in 0..8192u32 {
                let mut p = vec![0u8; 4096];
                p[0] = i as u8;
                p[4095] = 1;
                pieces.push(p);
            }
            let after = resident_huge_bytes().unwrap_or(0);
            (
                pieces.iter().map(|p| usize::from(p[4095])).sum::<usize>(),
                after,
            )
        })
        .join()
        .unwrap();
        assert_eq!(pieces, 8192);
        assert!(
            after >= before + (16 << 20),
            "{} MiB on huge pages before, {} MiB after a thread touched 32 MiB",
            before >> 20,
            after >> 20
        );
    }

    /// Each heap of a thread's arena is marked once, however the thread's
    /// allocations go back and forth between heaps (remembering only the
    /// last heap marked had a split run mark two heaps 230,000 times).
    /// The addresses are far from any heap; `madvise` on them fails and
    /// does nothing.
    #[test]
    fn every_arena_heap_is_marked_once() {
        let heap = 64 << 20;
        let (a, b) = ((1usize << 46) + 5, (1usize << 46) + heap + 7);
        assert!(glibc::mark_arena_heap(a));
        assert!(glibc::mark_arena_heap(b));
        for _ in 0..3 {
            assert!(!glibc::mark_arena_heap(a + 4096));
            assert!(!glibc::mark_arena_heap(b));
        }
        assert!(
            !glibc::mark_arena_heap(usize::MAX),
            "beyond the address space"
        );
    }
}
