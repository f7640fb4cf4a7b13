//! Ctrl-C (SIGINT) for the commands that stop cleanly on it (`udrma
//! check`, `udrma run`): the first sets a flag the command reads at its
//! next boundary, to finish and say what it covered; a second one exits
//! at once with status 130, for a user who will not wait.
//!
//! Tokio's signal handling, already in the build for the bridge, is
//! used rather than another crate: it reads the signal on a thread of
//! its own, and nothing else in the process is disturbed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The exit status of an interrupted command (128 + SIGINT).
pub(crate) const EXIT: u8 = 130;

/// A flag set by the first Ctrl-C from now on; the second exits the
/// process. If the handler cannot be installed, the flag is never set
/// and Ctrl-C keeps its default effect (it ends the process).
pub(crate) fn flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = flag.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let Ok(rt) = rt else {
        return flag;
    };
    // Installed here, before the command starts, not when the thread
    // first runs: a Ctrl-C right after this returns is already ours.
    let sigint = {
        let _in_rt = rt.enter();
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
    };
    let Ok(mut sigint) = sigint else {
        return flag;
    };
    std::thread::spawn(move || {
        rt.block_on(async move {
            if sigint.recv().await.is_some() {
                set.store(true, Ordering::Relaxed);
                if sigint.recv().await.is_some() {
                    // The outputs under way are dropped; their paths keep
                    // what they held (`crate::output`).
                    crate::output::discard();
                    std::process::exit(i32::from(EXIT));
                }
            }
        });
    });
    flag
}
