//! A world split across threads that stays split from one run to the
//! next: what a scenario runner drives.
//!
//! [`run_sharded`] builds a world on every thread and runs it to the
//! end. A [`SplitWorld`] is handed the copies ready-built (the same world
//! each time, as the caller's build is deterministic), takes apps like a
//! world (every copy gets one, [`App::fork`]), and then runs to a limit
//! as often as asked: at the first run each copy keeps its shard's part
//! ([`partition`]), and between runs the threads give their worlds back,
//! so a host's NIC and app are read from the world that ran it. The
//! outcome is the run of one world in windows, event for event.

use std::sync::Mutex;

use super::shards::{crew, prepare, Between, Bounds, Ready};
use super::*;

/// A world split into shards that run on threads of their own (see the
/// module documentation).
pub struct SplitWorld {
    /// One world per shard: the same until the first run, then each
    /// keeping its shard's part. Never empty: after a run that failed,
    /// shard 0's alone.
    worlds: Vec<World>,
    /// Each node's shard, from the first run on.
    part: Option<Vec<u16>>,
    /// The window width, from the first run on.
    width: u64,
    /// The run's trace, from the first run on (before it, world 0's).
    trace: Option<Trace>,
    between: Between,
    host_events: Vec<HostEvent>,
    /// A host whose NIC was worked on from outside its app.
    touched: Option<u32>,
    /// Why the worlds are gone (a run failed).
    broken: Option<String>,
}

impl std::fmt::Debug for SplitWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SplitWorld")
            .field("shards", &self.worlds.len())
            .field("split", &self.part.is_some())
            .finish_non_exhaustive()
    }
}

impl SplitWorld {
    /// Takes one copy of the world per shard (from 1 to [`MAX_SHARDS`]),
    /// built the same way each: checks that it can be split and puts
    /// every copy in windows.
    pub fn new(worlds: Vec<World>) -> Result<SplitWorld, ShardError> {
        let shards = worlds.len();
        if shards == 0 || shards > MAX_SHARDS {
            return Err(ShardError::Count(shards));
        }
        let mut worlds = worlds;
        for w in &mut worlds {
            w.shardable().map_err(ShardError::Unsupported)?;
            w.set_event_order(EventOrder::Windows)?;
        }
        Ok(SplitWorld {
            worlds,
            part: None,
            width: 0,
            trace: None,
            between: Between::new(shards),
            host_events: Vec::new(),
            touched: None,
            broken: None,
        })
    }

    /// Shards (threads) the runs are split into.
    pub fn shards(&self) -> usize {
        self.between.inboxes.len()
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        self.worlds[0].topology()
    }

    /// The shard that runs host `h` (0 before the first run, when every
    /// copy is the same, and for a host that does not exist).
    fn shard_of(&self, h: NodeAddr) -> usize {
        match &self.part {
            Some(part) => self.worlds[0]
                .topo
                .hosts
                .get(h.0 as usize)
                .map_or(0, |n| usize::from(part[*n as usize])),
            None => 0,
        }
    }

    /// The world that runs host `h`: its NIC and app are read there
    /// (after a failed run, shard 0's world stands in for all).
    pub fn world_of(&self, h: NodeAddr) -> &World {
        self.worlds.get(self.shard_of(h)).unwrap_or(&self.worlds[0])
    }

    /// Installs `app` on host `h` of every copy (copies made with
    /// [`App::fork`]) and starts it there. Only before the first run.
    pub fn set_app(&mut self, h: NodeAddr, app: Box<dyn App>) -> Result<(), ShardError> {
        if self.part.is_some() {
            return Err(ShardError::Unsupported(format!(
                "host {h}: a split run takes its apps before it first runs"
            )));
        }
        let mut copies = Vec::with_capacity(self.worlds.len());
        copies.push(app);
        for _ in 1..self.worlds.len() {
            let copy = copies[0].fork().ok_or_else(|| {
                ShardError::Unsupported(format!("host {h}'s app cannot be copied for every thread"))
            })?;
            copies.push(copy);
        }
        for (w, app) in self.worlds.iter_mut().zip(copies) {
            w.set_app(h, app)?;
        }
        Ok(())
    }

    /// Host `h`'s NIC, to work on from outside its app. A split run
    /// cannot make that change on every copy or keep it in step, so the
    /// next run is refused, naming the host.
    pub fn nic_mut(&mut self, h: NodeAddr) -> &mut Nic {
        self.touched.get_or_insert(h.0);
        let s = self.shard_of(h);
        // After a failed run, shard 0's world stands in for all.
        let s = if s < self.worlds.len() { s } else { 0 };
        self.worlds[s].nic_mut(h)
    }

    /// Runs every shard in windows until nothing is left (true) or the
    /// next thing is due after `limit` (false), as [`World::run_until`]
    /// does on one thread.
    pub fn run_until(&mut self, limit: Instant) -> Result<bool, ShardError> {
        Ok(self.run_for(limit, u64::MAX)? == Ran::Idle)
    }

    /// [`SplitWorld::run_until`] in slices, as [`World::run_for`] runs
    /// one world in windows: it also returns ([`Ran::Budget`]) at the end
    /// of the window in which about `events` more events have run, with
    /// more still due before `limit`. The threads give their worlds back
    /// between slices, so a caller may look at the run; calling it again
    /// goes on where it stopped, with the same trace as one go.
    pub fn run_for(&mut self, limit: Instant, events: u64) -> Result<Ran, ShardError> {
        if let Some(why) = &self.broken {
            return Err(ShardError::Stopped(0, why.clone()));
        }
        if let Some(h) = self.touched {
            return Err(ShardError::Unsupported(format!(
                "host h{h}'s NIC was worked on outside its app, which a split run cannot copy"
            )));
        }
        if self.part.is_none() {
            self.split()?;
        }
        let shards = self.shards();
        let width = self.width;
        let mut worlds = std::mem::take(&mut self.worlds).into_iter();
        let mut w0 = worlds.next().expect("a split world is never empty");
        let others: Vec<Mutex<Option<World>>> = worlds.map(|w| Mutex::new(Some(w))).collect();
        let source = |me: usize| {
            let slot = &others[me - 1];
            move || {
                let mut w = slot
                    .lock()
                    .map_err(|_| ShardError::Lost)?
                    .take()
                    .ok_or(ShardError::Lost)?;
                let ready = w.ready(width, String::new(), (0, 0));
                Ok((w, ready))
            }
        };
        let between = &mut self.between;
        let trace = self.trace.get_or_insert_with(Trace::default);
        let stop_at = trace.events().saturating_add(events);
        let host_events = &mut self.host_events;
        let result = crew(shards, source, true, |crew| {
            let ready0 = w0.ready(width, String::new(), (0, 0));
            let mut next = crew.handshake(&ready0)?;
            let ran = crew.windows(
                &mut w0,
                &mut next,
                Bounds {
                    width,
                    limit,
                    stop_at,
                },
                between,
                trace,
                host_events,
            )?;
            Ok((ran, crew.finish(&w0)?))
        });
        self.worlds.push(w0);
        let back = result.and_then(|(ran, finals)| {
            let mut back = Vec::with_capacity(shards - 1);
            for (s, (_, _, w)) in finals.into_iter().enumerate().skip(1) {
                back.push(*w.ok_or_else(|| ShardError::Stopped(s, "no world back".into()))?);
            }
            Ok((ran, back))
        });
        match back {
            Ok((ran, back)) => {
                self.worlds.extend(back);
                Ok(ran)
            }
            Err(e) => {
                self.broken = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// The first run: each copy keeps its shard's part, after a check
    /// that every copy is the same world.
    fn split(&mut self) -> Result<(), ShardError> {
        let shards = self.worlds.len();
        let mut kept = Vec::with_capacity(shards);
        let mut first: Option<Ready> = None;
        for (s, w) in std::mem::take(&mut self.worlds).into_iter().enumerate() {
            let (w, ready) = prepare(w, shards, s)?;
            if let Some(r0) = &first {
                if ready.fingerprint != r0.fingerprint {
                    return Err(ShardError::Differ(
                        s,
                        format!("{} against {}", ready.fingerprint, r0.fingerprint),
                    ));
                }
            } else {
                self.width = ready.width;
                self.trace = Some(Trace::continuing(ready.trace));
                first = Some(ready);
            }
            kept.push(w);
        }
        self.part = kept.first().map(|w| partition(&w.topo, shards));
        self.worlds = kept;
        Ok(())
    }

    /// When the next thing is due (an event, or a packet between
    /// shards); `None` if nothing is.
    pub fn peek_time(&mut self) -> Option<Instant> {
        let events = self.worlds.iter_mut().filter_map(World::peek_time);
        events.chain(self.between.first_arrival()).min()
    }

    /// Nothing left to happen and every NIC (in the world that runs it)
    /// idle.
    pub fn is_idle(&self) -> bool {
        self.between.first_arrival().is_none()
            && self.worlds.iter().all(|w| w.queue.is_empty())
            && (0..self.worlds[0].topo.n_hosts()).all(|h| {
                let h = NodeAddr(h as u32);
                self.world_of(h).nic(h).is_idle()
            })
    }

    /// The fabric's counters, summed over the shards (before the first
    /// run, the first copy's).
    pub fn stats(&self) -> FabricStats {
        if self.part.is_none() {
            return self.worlds[0].stats.clone();
        }
        let mut stats = FabricStats::default();
        for w in &self.worlds {
            stats.absorb(&w.stats);
        }
        stats.max_event_queue = stats.max_event_queue.max(self.between.deepest);
        stats
    }

    /// The run's trace (hash and event count).
    pub fn trace(&self) -> &Trace {
        self.trace.as_ref().unwrap_or(&self.worlds[0].trace)
    }

    /// Simulated time: the latest event run.
    pub fn now(&self) -> Instant {
        self.worlds
            .iter()
            .map(World::now)
            .max()
            .unwrap_or(Instant::ZERO)
    }

    /// Completions and arrivals the hosts without apps reported, in order.
    pub fn take_host_events(&mut self) -> Vec<HostEvent> {
        if self.part.is_none() {
            return self.worlds[0].take_host_events();
        }
        std::mem::take(&mut self.host_events)
    }

    /// Flushes every shard's outputs; the first error.
    pub fn finish(&mut self) -> Result<(), FabricError> {
        let mut first = Ok(());
        for w in &mut self.worlds {
            let r = w.finish();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Once split, a world keeps the state of the hosts its thread runs
    /// and gives back the others' (their build's posts, regions and
    /// apps), which no thread reads again; the hosts it runs keep theirs.
    #[test]
    fn a_thread_keeps_only_its_own_hosts() {
        let build = || crate::shapes::speed_shape(4, 3).unwrap();
        let mut split = SplitWorld::new(vec![build(), build()]).unwrap();
        let regions = |w: &World, h: usize| w.hosts[h].nic.memory().regions().count();
        let before = regions(&split.worlds[1], 0);
        assert!(before > 0, "the build registers every host's regions");
        assert!(!split
            .run_until(Instant::ZERO + Duration::from_micros(3))
            .unwrap());
        let part = split.part.clone().unwrap();
        let (mut kept, mut vacated) = (0, 0);
        for (s, w) in split.worlds.iter().enumerate() {
            for (h, &node) in w.topo.hosts.iter().enumerate() {
                if usize::from(part[node as usize]) == s {
                    assert_eq!(regions(w, h), before, "host {h} in shard {s}");
                    kept += 1;
                } else {
                    assert_eq!(regions(w, h), 0, "host {h}, another shard's, in shard {s}");
                    assert!(w.hosts[h].nic.is_idle() && w.hosts[h].app.is_none());
                    vacated += 1;
                }
            }
        }
        assert_eq!((kept, vacated), (16, 16));
        assert!(
            split.run_until(Instant(u64::MAX)).unwrap(),
            "runs to the end"
        );
    }

    /// A line to another thread keeps a stand-in of each packet it gave
    /// on, for its queue's count, until a packet joins its queue after
    /// the stand-in's arrival: the bound it keeps (so that a joining
    /// packet reads its line's cold head only once one may have arrived)
    /// never passes its head's arrival, and what is left at the end is
    /// the few given on since its last packet joined, not every one.
    #[test]
    fn a_line_to_another_thread_drops_its_stand_ins_as_packets_join() {
        let build = || crate::shapes::speed_shape(4, 3).unwrap();
        let mut split = SplitWorld::new(vec![build(), build()]).unwrap();
        let (mut held, mut lines) = (0, 0);
        for until in [3, 6, 9, 12] {
            let done = split
                .run_until(Instant::ZERO + Duration::from_micros(until))
                .unwrap();
            for w in &split.worlds {
                let from = &w.shard.as_ref().unwrap().stand_ins_from;
                for (st, from) in w.ports.iter().zip(from).filter(|(st, _)| st.hot.remote) {
                    if let Some(head) = st.flight.front() {
                        assert!(*from <= head.arrive.as_ps(), "the bound passed its head");
                    }
                    held += st.flight.len();
                    lines += 1;
                }
            }
            assert!(!done, "still running at {until} us");
        }
        // 16 lines between the two halves, looked at four times: 225
        // stand-ins; lines that never dropped theirs would hold 630.
        assert_eq!(lines, 4 * 16);
        assert!(held <= 300, "{held} stand-ins held");
        assert!(
            split.run_until(Instant(u64::MAX)).unwrap(),
            "runs to the end"
        );
    }
}
