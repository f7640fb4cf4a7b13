//! Looking at a run while it runs: the runner's backend is wrapped so
//! that time passes in slices of the caller's number of events (for a
//! CLI, [`SLICE_EVENTS`]; on threads and ranks, whole windows of
//! [`WINDOWED_SCALE`] times as many events in all; over
//! sockets, [`crate::backend::UDP_SLICE`] of real time), and between two
//! slices the caller's [`Observer`] sees a [`Progress`] and may stop the
//! run there. On ranks every rank's observer is asked, and the run stops
//! on every rank at the same window if any asked ([`Progress::elsewhere`]
//! tells the others). The slices do not change the run (the fabric goes
//! on exactly where it stopped), and nothing here reads a clock: what the
//! observer does with the wall clock is its own affair.

use std::cell::RefCell;
use std::ops::ControlFlow;
use std::rc::Rc;

use udrma_fabric::World;
use udrma_host::App;
use udrma_nic::Nic;
use udrma_proto::{Instant, NodeAddr};

use crate::backend::{Backend, DropCounts, Ending, NicSums, Traffic};

/// Events per slice for a caller that shows progress: small enough that
/// it hears from a run about every millisecond of wall time in an
/// optimised build (every few tenths of a second unoptimised), large
/// enough that the call costs nothing beside the events.
pub const SLICE_EVENTS: u64 = 1 << 14;

/// Where a run is, between two slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Simulated time of the last event run.
    pub now: Instant,
    /// The time limit the run goes to.
    pub limit: Instant,
    /// The counters so far: events, packets sent and delivered, ...
    /// (on ranks, the events and packets sent of every rank, the rest
    /// this rank's).
    pub traffic: Traffic,
    /// Another rank's observer stopped the run here: this call is to
    /// say so, and the run stops whatever it answers.
    pub elsewhere: bool,
}

/// Called between slices of a run; `Break` stops it there,
/// and the report is then of the run so far (its leftover note says it
/// was interrupted). A run of several phases (a collective run both on
/// the NICs and on the hosts) calls it through all of them, and once
/// stopped runs no further phase.
pub type Observer = Box<dyn FnMut(&Progress) -> ControlFlow<()> + Send>;

/// The observer, and whether it stopped the run.
pub(crate) struct Watch {
    every: u64,
    observer: Observer,
    stopped: bool,
}

/// One watch, shared by every backend of a run.
pub(crate) type Shared = Rc<RefCell<Watch>>;

/// What a run on ranks adds to the identity the ranks compare: whether
/// it is watched, and how often, since the ranks meet between slices and
/// must all slice alike.
pub(crate) fn identity(watch: Option<&Shared>) -> String {
    match watch {
        Some(w) => format!(", watched every {} events", w.borrow().every),
        None => ", unwatched".into(),
    }
}

impl Watch {
    /// Whether the observer stopped the run (here or, on ranks, on
    /// another rank).
    pub(crate) fn stopped(&self) -> bool {
        self.stopped
    }
}

/// A watch calling `observer` every `every` events (at least 1).
pub(crate) fn watch((every, observer): (u64, Observer)) -> Shared {
    Rc::new(RefCell::new(Watch {
        every: every.max(1),
        observer,
        stopped: false,
    }))
}

/// A backend whose runs go in slices, with the watch's observer called
/// between them; everything else is the inner backend's.
pub(crate) struct Observed {
    inner: Box<dyn Backend>,
    watch: Shared,
    /// Slices of this many times the watch's events.
    scale: u64,
}

/// How many more events a slice of a run on threads or ranks has than
/// one thread's: each slice there costs a meeting of every thread (or an
/// exchange among the ranks), so it comes about as often in wall time.
pub const WINDOWED_SCALE: u64 = 64;

impl Observed {
    /// `inner`, watched by `watch` in slices `scale` times the watch's
    /// events (1; [`WINDOWED_SCALE`] for a run on threads or ranks).
    pub(crate) fn new(inner: Box<dyn Backend>, watch: &Shared, scale: u64) -> Observed {
        Observed {
            inner,
            watch: watch.clone(),
            scale,
        }
    }
}

impl Backend for Observed {
    fn run(&mut self, limit: Instant) -> Result<Ending, String> {
        let mut watch = self.watch.borrow_mut();
        if watch.stopped {
            return Ok(Ending::Stopped);
        }
        loop {
            let every = watch.every.saturating_mul(self.scale);
            if let Some(ending) = self.inner.run_for(limit, every)? {
                return Ok(ending);
            }
            let mut p = Progress {
                now: self.inner.now(),
                limit,
                traffic: self.inner.traffic(),
                elsewhere: false,
            };
            let mine = (watch.observer)(&p).is_break();
            if self.inner.agree(mine)? {
                if !mine {
                    p.elsewhere = true;
                    let _ = (watch.observer)(&p);
                }
                watch.stopped = true;
                return Ok(Ending::Stopped);
            }
        }
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn now(&self) -> Instant {
        self.inner.now()
    }
    fn n_hosts(&self) -> usize {
        self.inner.n_hosts()
    }
    fn is_local(&self, h: NodeAddr) -> bool {
        self.inner.is_local(h)
    }
    fn nic(&self, h: NodeAddr) -> &Nic {
        self.inner.nic(h)
    }
    fn nic_mut(&mut self, h: NodeAddr) -> &mut Nic {
        self.inner.nic_mut(h)
    }
    fn service(&mut self, h: NodeAddr) {
        self.inner.service(h)
    }
    fn set_app(&mut self, h: NodeAddr, app: Box<dyn App>) -> Result<(), String> {
        self.inner.set_app(h, app)
    }
    fn app(&self, h: NodeAddr) -> Option<&dyn App> {
        self.inner.app(h)
    }
    fn start(&mut self) -> Result<(), String> {
        self.inner.start()
    }
    fn run_for(&mut self, limit: Instant, events: u64) -> Result<Option<Ending>, String> {
        self.inner.run_for(limit, events)
    }
    fn agree(&mut self, stop: bool) -> Result<bool, String> {
        self.inner.agree(stop)
    }
    fn is_idle(&self) -> bool {
        self.inner.is_idle()
    }
    fn finish(&mut self) -> Result<(), String> {
        self.inner.finish()
    }
    fn traffic(&self) -> Traffic {
        self.inner.traffic()
    }
    fn drop_counts(&self) -> DropCounts {
        self.inner.drop_counts()
    }
    fn trace_hash(&self) -> Option<u64> {
        self.inner.trace_hash()
    }
    fn world(&self) -> Option<&World> {
        self.inner.world()
    }
    fn nic_sums(&self) -> NicSums {
        self.inner.nic_sums()
    }
    fn gather(&mut self, mine: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>, String> {
        self.inner.gather(mine)
    }
    fn ranks(&self) -> Option<(usize, &[udrma_fabric::Exchanged])> {
        self.inner.ranks()
    }
}
