//! `udrma-app`: the host app surface, what a backend calls and when. A
//! crate of its own so that the backends (`udrma-fabric`, `udrma-bridge`)
//! drive apps without depending on the host software (`udrma-host`) that
//! implements them; `udrma_host::app` re-exports it.
//!
//!
//! An [`App`] is host software as a sans-IO state machine, one per host.
//! A backend (the simulated fabric, or real sockets) owns the host's
//! [`Nic`] and its app and drives both with the same rules:
//!
//! 1. [`App::start`] once, when the app is installed, before anything else.
//! 2. [`App::handle_event`] for every [`Event`] the host's NIC raises, in
//!    the order it raised them, at the time it raised them.
//! 3. [`App::handle_timeout`] once `now` has reached
//!    [`App::poll_timeout`]; the backend asks for the deadline again after
//!    every call, so an app moves its deadline by returning a new one.
//! 4. After each of those calls the backend lets the NIC send whatever the
//!    app posted, and keeps a wake-up for the earlier of the NIC's and the
//!    app's deadlines.
//!
//! An app never reads a clock, a socket, the environment or an unseeded
//! random source; `now` is all the time it has. Neither the app nor the
//! engine knows which backend drives them, so the same app runs in the
//! simulator and over UDP.
//!
//! Results stay inside the app: a backend hands it back by type
//! (`World::app::<MyApp>(host)` in the fabric), since `App: Any`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use core::any::Any;

use udrma_nic::{Event, Nic};
use udrma_proto::Instant;

/// Host software driven by a backend (see the [module docs](self) for the
/// calling rules).
pub trait App: Any + Send {
    /// Called once when the app is installed on its host, at `now`: post
    /// receives, register memory, start the first requests.
    fn start(&mut self, now: Instant, nic: &mut Nic) {
        let _ = (now, nic);
    }

    /// An event the host's NIC raised at `now` (a completion, a WRITE that
    /// landed, a control message, a peer's HELLO...).
    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event);

    /// The earliest time the app wants [`App::handle_timeout`], if any.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Called when `now` has reached [`App::poll_timeout`].
    fn handle_timeout(&mut self, now: Instant, nic: &mut Nic) {
        let _ = (now, nic);
    }

    /// Whether the app has finished its work. A backend that runs until
    /// every app is done (the UDP backend, whose sockets never go quiet by
    /// themselves) stops then; the simulator stops when nothing is left to
    /// happen and reports apps that are not done.
    fn is_done(&self) -> bool {
        true
    }

    /// A copy of this app as it stands, for a run split across threads:
    /// every thread builds the same world and installs the same apps, and
    /// each drives the copies on its own hosts. `None` (the default)
    /// says it cannot be copied, and such a run is refused.
    fn fork(&self) -> Option<Box<dyn App>> {
        None
    }

    /// The app's state as bytes, for `udrma check`'s fingerprint of a
    /// world (docs/check.md): everything that decides what it does next
    /// and what the checks read at the end, with times relative to the
    /// fingerprint's (`udrma_proto::fingerprint_origin`). `None`, the
    /// default: it cannot say, and a search over it does not merge.
    #[cfg(feature = "fingerprint")]
    fn fingerprint(&self) -> Option<Vec<u8>> {
        None
    }
}

/// A host's app serialised as its fingerprint; refused when it has none.
#[cfg(feature = "fingerprint")]
pub fn serialize_app<S: serde::Serializer>(
    app: &Option<Box<dyn App>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match app {
        None => s.serialize_none(),
        Some(a) => match a.fingerprint() {
            Some(bytes) => s.serialize_some(&bytes),
            None => Err(serde::ser::Error::custom("an app has no fingerprint")),
        },
    }
}

/// An app made of one closure that reacts to events (see [`from_fn`]).
pub struct FnApp<F> {
    on_event: F,
}

impl<F> App for FnApp<F>
where
    F: FnMut(Instant, &mut Nic, Event) + Send + 'static,
{
    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        (self.on_event)(now, nic, event);
    }
}

/// An app that only reacts to events, written as a closure: the quickest
/// way to put a few lines of host logic on a simulated host.
///
/// ```
/// use udrma_app::{from_fn, App};
/// use udrma_nic::Event;
///
/// let mut landed = 0u32;
/// let app = from_fn(move |_now, _nic, event| {
///     if let Event::WriteReceived { .. } = event {
///         landed += 1;
///     }
/// });
/// assert!(app.is_done());
/// ```
pub fn from_fn<F>(on_event: F) -> FnApp<F>
where
    F: FnMut(Instant, &mut Nic, Event) + Send + 'static,
{
    FnApp { on_event }
}

/// Downcasts an installed app to its concrete type.
pub fn downcast_ref<T: App>(app: &dyn App) -> Option<&T> {
    let any: &dyn Any = app;
    any.downcast_ref::<T>()
}

/// Downcasts an installed app to its concrete type, mutably.
pub fn downcast_mut<T: App>(app: &mut dyn App) -> Option<&mut T> {
    let any: &mut dyn Any = app;
    any.downcast_mut::<T>()
}

/// Takes an installed app back as its concrete type (or gives it back
/// unchanged if it is another type).
pub fn downcast_box<T: App>(app: Box<dyn App>) -> Result<Box<T>, Box<dyn App>> {
    if downcast_ref::<T>(&*app).is_none() {
        return Err(app);
    }
    let any: Box<dyn Any> = app;
    Ok(any.downcast::<T>().expect("checked above"))
}
