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
    if let Ok(rt) = rt {
        std::thread::spawn(move || {
            rt.block_on(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    set.store(true, Ordering::Relaxed);
                    if tokio::signal::ctrl_c().await.is_ok() {
                        std::process::exit(i32::from(EXIT));
                    }
                }
            });
        });
    }
    flag
}
