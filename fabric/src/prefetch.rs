//! A cache prefetch hint: the one `unsafe` call in the fabric.
//!
//! On a large fabric most of an event's time is a cache miss on the port
//! state or the packet it touches, written a microsecond of simulated time
//! (a hundred thousand events) earlier. The event loop knows the next
//! events' ports before it runs them and asks for their lines early.

/// Asks the CPU to bring the cache line holding `p` closer. A hint only: it
/// reads nothing into the program and cannot fault, whatever the address.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: PREFETCHT0 never faults and has no architectural effect; the
    // intrinsic is unsafe only because it takes a raw pointer.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
