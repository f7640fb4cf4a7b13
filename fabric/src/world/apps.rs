//! Host apps in the simulated world: one [`App`] per host at most, driven
//! by the same event loop as the NICs (see `udrma_app` for the
//! calling rules). A host with an app hands its NIC's events to the app;
//! the app's deadline joins the NIC's in the host's single wake-up. The
//! completion log counts completions per request (for exactly-once) and
//! failed requests (for `sim`'s all-succeeded).

use std::collections::BTreeMap;

use udrma_app::App;
use udrma_app::{downcast_mut, downcast_ref};
use udrma_nic::{Nic, WcError, WrId};
use udrma_proto::NodeAddr;

use super::{FabricError, World};

impl World {
    /// Installs `app` on host `h` (replacing any app it had) and starts it
    /// now: [`App::start`] runs at once, then the NIC sends what it
    /// posted.
    pub fn set_app(&mut self, h: NodeAddr, app: Box<dyn App>) -> Result<(), FabricError> {
        self.check_host(h)?;
        let now = self.now;
        let host = &mut self.hosts[h.0 as usize];
        let app = host.app.insert(app);
        app.start(now, &mut host.nic);
        self.service_host(h.0);
        self.give_back_if_elsewhere(h.0);
        Ok(())
    }

    /// Host `h`'s app, if it has one of type `T`.
    pub fn app<T: App>(&self, h: NodeAddr) -> Option<&T> {
        let app = self.hosts.get(h.0 as usize)?.app.as_deref()?;
        downcast_ref::<T>(app)
    }

    /// Host `h`'s app, whatever its type.
    pub fn app_dyn(&self, h: NodeAddr) -> Option<&dyn App> {
        self.hosts.get(h.0 as usize)?.app.as_deref()
    }

    /// Works on host `h`'s app of type `T` and its NIC from outside the
    /// event loop (a test poking a running app); the NIC then sends what
    /// was posted, as after any app call. `None` if `h` has no such app.
    pub fn with_app<T: App, R>(
        &mut self,
        h: NodeAddr,
        f: impl FnOnce(&mut T, &mut Nic) -> R,
    ) -> Option<R> {
        let host = self.hosts.get_mut(h.0 as usize)?;
        let app = downcast_mut::<T>(host.app.as_deref_mut()?)?;
        let r = f(app, &mut host.nic);
        self.service_host(h.0);
        Some(r)
    }

    /// Removes host `h`'s app and gives it back (its NIC's events queue
    /// for [`World::take_host_events`] again).
    pub fn take_app(&mut self, h: NodeAddr) -> Option<Box<dyn App>> {
        self.hosts.get_mut(h.0 as usize)?.app.take()
    }

    /// Requests that completed more than once on hosts with an app.
    pub fn completed_twice(&self) -> Vec<(NodeAddr, udrma_nic::WrId)> {
        self.completions.twice()
    }

    /// How many requests completed with an error, on any host, and the
    /// first few with their errors.
    pub fn failed_requests(&self) -> (u64, &[(NodeAddr, udrma_nic::WrId, udrma_nic::WcError)]) {
        self.completions.failures()
    }

    /// Hosts whose app says it is not done, in host order.
    pub fn unfinished_apps(&self) -> Vec<NodeAddr> {
        self.hosts
            .iter()
            .filter(|(_, h)| h.app.as_ref().is_some_and(|a| !a.is_done()))
            .map(|(i, _)| NodeAddr(i))
            .collect()
    }
}

/// Completions seen per request on hosts that run an app (to catch a
/// request completed twice), and the failed ones on every host (a count,
/// and the first few with their errors).
#[derive(Debug, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(crate) struct CompletionLog {
    seen: BTreeMap<(NodeAddr, WrId), u32>,
    failed: u64,
    first_failed: Vec<(NodeAddr, WrId, WcError)>,
}

/// Failed requests kept with their errors, for the report.
const FAILURES_SHOWN: usize = 4;

impl CompletionLog {
    pub(crate) fn record(&mut self, h: NodeAddr, wr: WrId) {
        *self.seen.entry((h, wr)).or_default() += 1;
    }

    pub(crate) fn record_failure(&mut self, h: NodeAddr, wr: WrId, e: WcError) {
        self.failed += 1;
        if self.first_failed.len() < FAILURES_SHOWN {
            self.first_failed.push((h, wr, e));
        }
    }

    pub(crate) fn failures(&self) -> (u64, &[(NodeAddr, WrId, WcError)]) {
        (self.failed, &self.first_failed)
    }

    pub(crate) fn twice(&self) -> Vec<(NodeAddr, WrId)> {
        self.seen
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(k, _)| *k)
            .collect()
    }
}
