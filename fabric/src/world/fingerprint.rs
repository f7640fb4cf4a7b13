//! The world's state as `udrma check` fingerprints it (feature
//! `fingerprint`; docs/check.md): what decides what happens from now on
//! and what the checks read at the end, with every time relative to now
//! and nothing that only names or speeds things up.
//!
//! In: every host (its NIC, app, held packets, timers), every port (its
//! queue, flight line, pause state), the switches' random streams, the
//! packets sent ahead of queues and waiting in lanes, the pending events
//! in the order they will come out (their sequence numbers and slab
//! slots dropped), the events waiting for their host, the completion log
//! and a lossless fabric's state. Out: the topology, routes and
//! configuration (the same in every run of one search), the fault rules
//! (a schedule's own, spent once its last fault has struck), the trace,
//! captures, journal, egress log, statistics, buffers and hints.

use serde::ser::{Serialize, SerializeTuple, Serializer};

use super::events::EvKind;
use super::*;

/// A pending event: coded in its key, or held in the slab.
#[derive(serde::Serialize)]
enum Pending<'a> {
    Coded(u32),
    Held(&'a EvKind),
}

std::thread_local! {
    /// Whether packet serials are state (some port marks ECN by them).
    static SERIALS: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// A packet's serial: written only while serials are state.
pub(super) fn serial<S: Serializer>(serial: &u64, s: S) -> Result<S::Ok, S::Error> {
    if SERIALS.with(|c| c.get()) {
        s.serialize_some(serial)
    } else {
        s.serialize_none()
    }
}

/// Bytes as one run.
pub(super) fn as_bytes<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(bytes)
}

impl Serialize for World {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // ECN marks draw by the packet's serial. (Windows order runs its
        // own loop, which takes no fingerprints: nothing merges there.)
        let serials = self.ports.iter().any(|p| p.hot.ecn_threshold != u64::MAX);
        let before = SERIALS.with(|c| c.replace(serials));
        let r = self.serialize_state(serials, s);
        SERIALS.with(|c| c.set(before));
        r
    }
}

impl World {
    fn serialize_state<S: Serializer>(&self, serials: bool, s: S) -> Result<S::Ok, S::Error> {
        let pending: Vec<(Instant, Pending<'_>)> = self
            .queue
            .pending()
            .into_iter()
            .map(|(t, slot)| {
                let index = slot & events::CODE_INDEX;
                let coded = slot & !events::CODE_INDEX != 0 || index & events::CODE_AHEAD != 0;
                let p = match self.slab.get(index as usize).and_then(Option::as_ref) {
                    Some(kind) if !coded => Pending::Held(kind),
                    _ => Pending::Coded(slot),
                };
                (t, p)
            })
            .collect();
        let mut t = s.serialize_tuple(11)?;
        t.serialize_element(&serials.then_some(self.serial))?;
        t.serialize_element(self.hosts.in_run())?;
        t.serialize_element(&self.ports)?;
        t.serialize_element(&self.switch_rng)?;
        t.serialize_element(&self.ahead)?;
        t.serialize_element(&self.lanes)?;
        t.serialize_element(&pending)?;
        t.serialize_element(&self.host_events)?;
        t.serialize_element(&self.completions)?;
        t.serialize_element(&self.pfc)?;
        // A lossless fabric's checks read what was dropped.
        t.serialize_element(&self.pfc.as_ref().map(|_| &self.stats))?;
        t.end()
    }
}

impl World {
    /// Takes a fingerprint before every event from now on (with the
    /// egress log, which numbers the packets the fault rules judge).
    /// Events that begin before `from` packets were judged are entered
    /// with fingerprint 0 ("none"), at no cost.
    pub fn log_fingerprints(&mut self, from: u32) {
        self.log_egress();
        self.fingerprints
            .get_or_insert_with(FingerprintLog::default)
            .from = from;
    }

    /// The fingerprints taken since [`World::log_fingerprints`].
    pub fn fingerprints(&self) -> Option<&FingerprintLog> {
        self.fingerprints.as_ref()
    }

    /// The fingerprint of the state as it stands, about to run an event
    /// at `at` (the event still pending); an error says which part of
    /// the state cannot say (an app or a controller with no snapshot).
    pub fn state_fingerprint(&self, at: Instant) -> Result<u128, String> {
        udrma_proto::fingerprint_origin(at, || {
            postcard::serialize_with_flavor(self, Hashing::default())
        })
        .map_err(|e| e.to_string())
    }

    /// Records the fingerprint before an event at `at`, if asked: of the
    /// state, once the run has judged `FingerprintLog::from` packets, else 0
    /// ("none").
    #[inline]
    pub(super) fn note_fingerprint(&mut self, at: Instant) {
        let Some(log) = self.fingerprints.as_ref() else {
            return;
        };
        if log.refused.is_some() {
            return;
        }
        let judged = self.egress_log.as_ref().map_or(0, Vec::len) as u32;
        let taken = if judged < log.from {
            Ok(0)
        } else {
            // Memory is hashed by blocks, each rehashed only once written.
            for h in self.hosts.iter_mut() {
                h.nic.memory_mut().refresh_hashes();
            }
            // (0 stays "none": a fingerprint of 0 is taken as 1.)
            self.state_fingerprint(at).map(|f| f.max(1))
        };
        let log = self.fingerprints.as_mut().expect("asked");
        match taken {
            Ok(f) => log.taken.push((judged, at.as_ps(), f)),
            Err(e) => log.refused = Some(e),
        }
    }
}

/// A postcard output that hashes what it is given (two independent
/// 64-bit SipHashes with fixed keys, the same in every process: one
/// 128-bit fingerprint) instead of keeping it. The bytes are gathered
/// first and hashed at once: postcard hands many of them over one by
/// one, and a hasher's call costs more than its byte.
struct Hashing {
    bytes: Vec<u8>,
}

impl Default for Hashing {
    fn default() -> Self {
        Hashing {
            bytes: Vec::with_capacity(4096),
        }
    }
}

impl postcard::ser_flavors::Flavor for Hashing {
    type Output = u128;

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.bytes.push(data);
        Ok(())
    }

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.bytes.extend_from_slice(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<u128> {
        use std::hash::Hasher;
        let mut a = std::hash::DefaultHasher::new();
        let mut b = std::hash::DefaultHasher::new();
        b.write_u16(0x5eed);
        a.write(&self.bytes);
        b.write(&self.bytes);
        Ok((u128::from(a.finish()) << 64) | u128::from(b.finish()))
    }
}
