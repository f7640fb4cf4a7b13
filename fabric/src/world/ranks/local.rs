//! [`LocalRanks`]: ranks on threads of one process, exchanging through
//! shared memory. What a rank run is checked with where no MPI is
//! installed, and what shows a rank that ends early stopping the others
//! with its name rather than a hang.

use std::sync::{Arc, Condvar, Mutex};

use super::Ranks;

/// One rank of a group on threads ([`LocalRanks::group`]); move each to
/// its own thread.
#[derive(Debug)]
pub struct LocalRanks {
    me: usize,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug)]
struct State {
    /// By receiving rank, by sending rank: a message not yet taken.
    slots: Vec<Vec<Option<Vec<u8>>>>,
    /// The first rank whose handle was dropped.
    gone: Option<usize>,
}

impl LocalRanks {
    /// A group of `n` ranks.
    pub fn group(n: usize) -> Vec<LocalRanks> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                slots: vec![vec![None; n]; n],
                gone: None,
            }),
            changed: Condvar::new(),
        });
        (0..n)
            .map(|me| LocalRanks {
                me,
                shared: Arc::clone(&shared),
            })
            .collect()
    }
}

impl Ranks for LocalRanks {
    fn rank(&self) -> usize {
        self.me
    }

    fn size(&self) -> usize {
        self.shared.state.lock().map_or(0, |s| s.slots.len())
    }

    fn exchange(&mut self, out: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, String> {
        let me = self.me;
        let lost = |_| "the ranks' shared state was poisoned".to_string();
        let mut st = self.shared.state.lock().map_err(lost)?;
        let n = st.slots.len();
        if out.len() != n {
            return Err(format!("{} messages for {n} ranks", out.len()));
        }
        // Each receiver must have taken this rank's last message first.
        while st.slots.iter().any(|to| to[me].is_some()) {
            if let Some(r) = st.gone {
                return Err(format!("rank {r} has ended"));
            }
            st = self.shared.changed.wait(st).map_err(lost)?;
        }
        for (r, m) in out.into_iter().enumerate() {
            st.slots[r][me] = Some(m);
        }
        self.shared.changed.notify_all();
        while st.slots[me].iter().any(Option::is_none) {
            if let Some(r) = st.gone {
                return Err(format!("rank {r} has ended"));
            }
            st = self.shared.changed.wait(st).map_err(lost)?;
        }
        let got = st.slots[me]
            .iter_mut()
            .map(|m| m.take().unwrap_or_default());
        let got = got.collect();
        self.shared.changed.notify_all();
        Ok(got)
    }
}

impl Drop for LocalRanks {
    fn drop(&mut self) {
        if let Ok(mut st) = self.shared.state.lock() {
            st.gone.get_or_insert(self.me);
            self.shared.changed.notify_all();
        }
    }
}
