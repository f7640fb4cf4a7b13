//! Fault rules: a target (which packets), a model (what happens to them)
//! and a random stream of their own. A [`RuleSet`] applies its rules in
//! install order; the first verdict other than `Pass` wins.
//!
//! A rule whose verdict on a packet depends on nothing before it (see
//! [`Rule::draws_by_packet`]) can also draw from a key instead of its
//! stream ([`Rule::judge_keyed`]): the same packet at the same place then
//! gets the same verdict whatever was judged before it, which is what a
//! run split across threads needs.

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use thiserror::Error;
use udrma_proto::{Duration, Flags, Instant, NodeAddr, Opcode};

use crate::rng::{below, mix, normal, stream, unit, Correlated};

/// What happens to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Verdict {
    /// Untouched.
    Pass,
    /// Lost.
    Drop,
    /// Sent, plus this many extra copies.
    Duplicate(u32),
    /// Held this long before it enters the link's queue.
    Delay(Duration),
    /// This many bits flipped (the ICRC must catch it).
    Corrupt(u32),
}

/// Which way a packet crosses a link named `a-b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Direction {
    /// From `a` to `b`.
    Forward,
    /// From `b` to `a`.
    Reverse,
}

/// What a rule may look at: the packet, where and when.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct PacketCtx {
    /// Now.
    pub now: Instant,
    /// Index of the link (as the fabric numbers them).
    pub link: u32,
    /// Which way it crosses the link.
    pub direction: Direction,
    /// Flow source host.
    pub src: NodeAddr,
    /// Flow destination host.
    pub dst: NodeAddr,
    /// Opcode, if the packet parses.
    pub opcode: Option<Opcode>,
    /// Header flags.
    pub flags: Flags,
    /// Bytes on the wire (datagram).
    pub len: u32,
}

/// Which packets a rule considers. Empty lists mean "any".
#[derive(Debug, Clone, Default, PartialEq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Target {
    /// Link names (`h0-e0`); resolved to indices by [`RuleSet::resolve`].
    pub links: Vec<String>,
    /// Direction across those links.
    pub direction: Option<Direction>,
    /// Flow sources.
    pub src: Vec<NodeAddr>,
    /// Flow destinations.
    pub dst: Vec<NodeAddr>,
    /// Opcodes.
    pub opcodes: Vec<Opcode>,
    /// Flags that must all be set (e.g. FIRST).
    pub flags: Flags,
    /// Only in `[from, until)`.
    pub window: Option<(Instant, Instant)>,
    /// Among the packets matching everything above, only the
    /// `offset`-th of every `every` (0-based), at most `limit` times.
    pub nth: Option<Nth>,
    pub(crate) link_ids: Vec<u32>,
}

/// "Every `every`-th matching packet, starting at `offset`".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Nth {
    /// Period (≥ 1).
    pub every: u64,
    /// Which one in each period (< every).
    pub offset: u64,
    /// Fire at most this many times.
    pub limit: Option<u64>,
}

impl Target {
    /// Every packet.
    pub fn any() -> Target {
        Target::default()
    }

    /// Only on these links.
    #[must_use]
    pub fn links(mut self, names: &[&str]) -> Target {
        self.links = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Only this direction.
    #[must_use]
    pub fn direction(mut self, d: Direction) -> Target {
        self.direction = Some(d);
        self
    }

    /// Only flows from these hosts to those hosts (empty = any).
    #[must_use]
    pub fn flow(mut self, src: &[NodeAddr], dst: &[NodeAddr]) -> Target {
        self.src = src.to_vec();
        self.dst = dst.to_vec();
        self
    }

    /// Only these opcodes.
    #[must_use]
    pub fn opcodes(mut self, ops: &[Opcode]) -> Target {
        self.opcodes = ops.to_vec();
        self
    }

    /// Only packets with all of `flags`.
    #[must_use]
    pub fn flags(mut self, flags: Flags) -> Target {
        self.flags = flags;
        self
    }

    /// Only in `[from, until)`.
    #[must_use]
    pub fn window(mut self, from: Instant, until: Instant) -> Target {
        self.window = Some((from, until));
        self
    }

    /// Only every `every`-th match (from `offset`).
    #[must_use]
    pub fn nth(mut self, every: u64, offset: u64, limit: Option<u64>) -> Target {
        self.nth = Some(Nth {
            every,
            offset,
            limit,
        });
        self
    }

    fn matches_static(&self, p: &PacketCtx) -> bool {
        (self.link_ids.is_empty() || self.link_ids.contains(&p.link))
            && self.direction.is_none_or(|d| d == p.direction)
            && (self.src.is_empty() || self.src.contains(&p.src))
            && (self.dst.is_empty() || self.dst.contains(&p.dst))
            && (self.opcodes.is_empty() || p.opcode.is_some_and(|o| self.opcodes.contains(&o)))
            && p.flags.contains(self.flags)
            && self
                .window
                .is_none_or(|(from, until)| p.now >= from && p.now < until)
    }
}

/// Delay jitter distributions (netem's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Jitter {
    /// base ± jitter, uniform.
    Uniform,
    /// base + jitter·N(0, 1), clamped at zero.
    Normal,
    /// base + jitter·(U^(-1/3) − 1): Pareto with shape 3, heavy tail,
    /// mean extra delay jitter/2.
    Pareto,
}

/// What a rule does to the packets it targets.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum Model {
    /// Random loss with probability `p` (netem `loss p [correlation]`).
    Loss {
        /// Loss probability.
        p: f64,
        /// Correlation with the previous draw.
        correlation: f64,
    },
    /// Gilbert-Elliott loss (netem `loss gemodel p r 1-h 1-k`): a good and
    /// a bad state; `p` = P(good→bad), `r` = P(bad→good) per packet.
    GilbertElliott {
        /// P(good → bad).
        p: f64,
        /// P(bad → good).
        r: f64,
        /// Loss probability in the good state (1 − k).
        loss_good: f64,
        /// Loss probability in the bad state (1 − h).
        loss_bad: f64,
    },
    /// Duplicate with probability `p`, `copies` extra copies.
    Duplicate {
        /// Duplication probability.
        p: f64,
        /// Extra copies when it fires.
        copies: u32,
        /// Correlation with the previous draw.
        correlation: f64,
    },
    /// netem reorder: packets are delayed by `delay`, except that every
    /// `gap`-th one is sent at once with probability `p`, overtaking the
    /// delayed ones.
    Reorder {
        /// Probability that an eligible packet goes at once.
        p: f64,
        /// Correlation with the previous draw.
        correlation: f64,
        /// Only every `gap`-th packet is eligible (1 = every packet).
        gap: u32,
        /// Delay of the packets that are not reordered.
        delay: Duration,
        /// Most packets held delayed at once (netem `limit`); more: drop.
        limit: Option<u32>,
    },
    /// Delay with jitter.
    Delay {
        /// Base delay.
        base: Duration,
        /// Jitter scale.
        jitter: Duration,
        /// Distribution of the jitter.
        dist: Jitter,
        /// Most packets held delayed at once (netem `limit`, the queue
        /// limit); more: drop.
        limit: Option<u32>,
    },
    /// Flip `bits` random bits with probability `p`.
    Corrupt {
        /// Corruption probability.
        p: f64,
        /// Bits flipped when it fires.
        bits: u32,
    },
    /// Shape to `bits_per_sec` (netem `rate`): each packet waits until the
    /// ones before it have drained; more than `limit` waiting → drop
    /// (netem `limit`, the queue limit).
    Rate {
        /// Rate in bits per second.
        bits_per_sec: u64,
        /// Most packets waiting in the shaper.
        limit: u32,
    },
    /// Drop everything targeted (with a link and a window: link down/up).
    Down,
    /// Drop traffic from hosts `a` to hosts `b` (and back if `two_way`).
    Partition {
        /// One side.
        a: Vec<NodeAddr>,
        /// The other side.
        b: Vec<NodeAddr>,
        /// Both directions.
        two_way: bool,
    },
}

/// Why a rule cannot be installed.
#[derive(Debug, Error, Clone, PartialEq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum FaultError {
    /// A probability outside [0, 1].
    #[error("rule {rule}: {field} = {value} is not a probability in [0, 1]")]
    Probability {
        /// Rule name.
        rule: String,
        /// Field.
        field: &'static str,
        /// Value.
        value: f64,
    },
    /// A parameter out of range.
    #[error("rule {rule}: {what}")]
    Invalid {
        /// Rule name.
        rule: String,
        /// What is wrong.
        what: String,
    },
    /// A link name the topology lacks.
    #[error("rule {rule}: unknown link {link:?}{}", link_hint(.suggestion, .known, *.total))]
    UnknownLink {
        /// Rule name.
        rule: String,
        /// The name given.
        link: String,
        /// The closest existing name, if one is close.
        suggestion: Option<String>,
        /// The topology's first few link names (shown when none is close).
        known: Vec<String>,
        /// How many links the topology has.
        total: usize,
    },
}

/// How often a rule fired, by verdict.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct RuleCounters {
    /// Packets the target matched.
    pub matched: u64,
    /// Dropped.
    pub dropped: u64,
    /// Duplicated (events, not copies).
    pub duplicated: u64,
    /// Delayed.
    pub delayed: u64,
    /// Corrupted.
    pub corrupted: u64,
}

#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct State {
    corr: Correlated,
    ge_bad: bool,
    reorder_count: u64,
    nth_seen: u64,
    nth_fired: u64,
    rate_free_at: Instant,
    rate_waiting: std::collections::VecDeque<Instant>,
    /// Release times of packets this rule holds delayed (queue limit).
    held: std::collections::VecDeque<Instant>,
}

impl State {
    /// Whether a queue limit leaves room for one more held packet; frees
    /// the packets already released by `now`.
    fn room(&mut self, now: Instant, limit: Option<u32>) -> bool {
        while self.held.front().is_some_and(|t| *t <= now) {
            self.held.pop_front();
        }
        limit.is_none_or(|l| self.held.len() < l as usize)
    }

    /// Records a packet held until `until` (kept sorted).
    fn hold(&mut self, until: Instant) {
        let at = self.held.partition_point(|t| *t <= until);
        self.held.insert(at, until);
    }
}

/// One installed rule.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Rule {
    /// Name (for traces, counters and errors).
    pub name: String,
    /// Which packets.
    pub target: Target,
    /// What happens to them.
    pub model: Model,
    /// How often it fired.
    pub counters: RuleCounters,
    rng: ChaCha8Rng,
    state: State,
    /// The seed of draws from a key ([`Rule::judge_keyed`]).
    keyed: u64,
}

fn check_p(rule: &str, field: &'static str, value: f64) -> Result<(), FaultError> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(FaultError::Probability {
            rule: rule.to_string(),
            field,
            value,
        })
    }
}

impl Model {
    /// Whether a verdict depends on when earlier packets came, not only
    /// on how many: a shaper's backlog (`Rate`) and the packets a delay
    /// with a `limit` still holds. Such a rule needs its packets in time
    /// order across every link it targets.
    pub fn keeps_time(&self) -> bool {
        match self {
            Model::Rate { .. } => true,
            Model::Delay { limit, .. } | Model::Reorder { limit, .. } => limit.is_some(),
            _ => false,
        }
    }

    fn validate(&self, rule: &str) -> Result<(), FaultError> {
        let invalid = |what: &str| {
            Err(FaultError::Invalid {
                rule: rule.to_string(),
                what: what.to_string(),
            })
        };
        match self {
            Model::Loss { p, correlation } => {
                check_p(rule, "p", *p)?;
                check_p(rule, "correlation", *correlation)
            }
            Model::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
            } => {
                check_p(rule, "p", *p)?;
                check_p(rule, "r", *r)?;
                check_p(rule, "loss_good", *loss_good)?;
                check_p(rule, "loss_bad", *loss_bad)
            }
            Model::Duplicate {
                p,
                correlation,
                copies,
            } => {
                check_p(rule, "p", *p)?;
                check_p(rule, "correlation", *correlation)?;
                if *copies == 0 || *copies > 64 {
                    return invalid("copies must be 1..=64");
                }
                Ok(())
            }
            Model::Reorder {
                p,
                correlation,
                gap,
                limit,
                ..
            } => {
                if *limit == Some(0) {
                    return invalid("limit must be at least 1");
                }
                check_p(rule, "p", *p)?;
                check_p(rule, "correlation", *correlation)?;
                if *gap == 0 {
                    return invalid("gap must be at least 1");
                }
                Ok(())
            }
            Model::Corrupt { p, bits } => {
                check_p(rule, "p", *p)?;
                if *bits == 0 || *bits > 64 {
                    return invalid("bits must be 1..=64");
                }
                Ok(())
            }
            Model::Rate {
                bits_per_sec,
                limit,
            } => {
                if *bits_per_sec == 0 || *limit == 0 {
                    return invalid("rate and limit must be positive");
                }
                Ok(())
            }
            Model::Delay { limit, .. } => {
                if *limit == Some(0) {
                    return invalid("limit must be at least 1");
                }
                Ok(())
            }
            Model::Down | Model::Partition { .. } => Ok(()),
        }
    }
}

impl Rule {
    /// A rule with its own random stream, derived from (`seed`, `name`).
    pub fn new(seed: u64, name: &str, target: Target, model: Model) -> Result<Rule, FaultError> {
        model.validate(name)?;
        if let Some(n) = target.nth {
            if n.every == 0 || n.offset >= n.every {
                return Err(FaultError::Invalid {
                    rule: name.to_string(),
                    what: "nth needs every ≥ 1 and offset < every".to_string(),
                });
            }
        }
        Ok(Rule {
            name: name.to_string(),
            target,
            model,
            counters: RuleCounters::default(),
            rng: stream(seed, &format!("rule:{name}")),
            state: State::default(),
            keyed: mix(seed ^ mix(crate::rng::component_id(&format!("rule-keyed:{name}")))),
        })
    }

    /// Whether a verdict depends only on the packet and its draws, not on
    /// the packets the rule saw before: no n-th packet target, no
    /// correlation between draws, no Gilbert-Elliott state, no reorder
    /// gap, nothing that keeps time. Such a rule can draw by packet.
    pub fn draws_by_packet(&self) -> bool {
        self.target.nth.is_none()
            && match &self.model {
                Model::Loss { correlation, .. } | Model::Duplicate { correlation, .. } => {
                    *correlation <= 0.0
                }
                Model::Reorder {
                    correlation,
                    gap,
                    limit,
                    ..
                } => *correlation <= 0.0 && *gap <= 1 && limit.is_none(),
                Model::Delay { limit, .. } => limit.is_none(),
                Model::Corrupt { .. } | Model::Down | Model::Partition { .. } => true,
                Model::GilbertElliott { .. } | Model::Rate { .. } => false,
            }
    }

    /// Judges one packet with draws from `key` (which should name the
    /// packet and where it is) instead of the rule's stream, if the rule
    /// [draws by packet](Rule::draws_by_packet); otherwise as
    /// [`Rule::judge`].
    pub fn judge_keyed(&mut self, p: &PacketCtx, key: u64) -> Verdict {
        let keyed = self.draws_by_packet().then_some(key);
        self.judge_with(p, keyed)
    }

    /// Judges one packet.
    pub fn judge(&mut self, p: &PacketCtx) -> Verdict {
        self.judge_with(p, None)
    }

    fn judge_with(&mut self, p: &PacketCtx, keyed: Option<u64>) -> Verdict {
        if !self.target.matches_static(p) {
            return Verdict::Pass;
        }
        if let Some(n) = self.target.nth {
            let i = self.state.nth_seen;
            self.state.nth_seen += 1;
            if i % n.every != n.offset || n.limit.is_some_and(|l| self.state.nth_fired >= l) {
                return Verdict::Pass;
            }
            self.state.nth_fired += 1;
        }
        self.counters.matched += 1;
        let v = match keyed {
            Some(key) => {
                let mut rng = self.keyed_rng(key, 0);
                decide(&self.model, &mut self.state, &mut rng, p)
            }
            None => decide(&self.model, &mut self.state, &mut self.rng, p),
        };
        match v {
            Verdict::Pass => {}
            Verdict::Drop => self.counters.dropped += 1,
            Verdict::Duplicate(_) => self.counters.duplicated += 1,
            Verdict::Delay(_) => self.counters.delayed += 1,
            Verdict::Corrupt(_) => self.counters.corrupted += 1,
        }
        v
    }

    /// The draws of `key`, for the verdict (`use_` 0) or the bits a
    /// corruption flips (1).
    fn keyed_rng(&self, key: u64, use_: u64) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(mix(self.keyed ^ mix(key ^ use_)))
    }

    /// Flips `bits` distinct random bits of `bytes` with this rule's stream.
    pub fn corrupt(&mut self, bytes: &mut [u8], bits: u32) {
        flip(&mut self.rng, bytes, bits);
    }

    /// Flips bits as [`Rule::corrupt`] does, drawn from `key` (after
    /// [`Rule::judge_keyed`] with the same key returned `Corrupt`).
    pub fn corrupt_keyed(&mut self, key: u64, bytes: &mut [u8], bits: u32) {
        if self.draws_by_packet() {
            flip(&mut self.keyed_rng(key, 1), bytes, bits);
        } else {
            self.corrupt(bytes, bits);
        }
    }
}

/// The verdict of `model` (its state `st`) on `p`, drawing from `rng`.
fn decide(model: &Model, st: &mut State, rng: &mut ChaCha8Rng, p: &PacketCtx) -> Verdict {
    match model {
        Model::Loss {
            p: prob,
            correlation,
        } => {
            if st.corr.next(rng, *correlation) < *prob {
                Verdict::Drop
            } else {
                Verdict::Pass
            }
        }
        Model::GilbertElliott {
            p: to_bad,
            r: to_good,
            loss_good,
            loss_bad,
        } => gilbert_elliott(st, rng, *to_bad, *to_good, *loss_good, *loss_bad),
        Model::Duplicate {
            p: prob,
            copies,
            correlation,
        } => {
            if st.corr.next(rng, *correlation) < *prob {
                Verdict::Duplicate(*copies)
            } else {
                Verdict::Pass
            }
        }
        Model::Reorder {
            p: prob,
            correlation,
            gap,
            delay,
            limit,
        } => reorder(st, rng, p, (*prob, *correlation), *gap, *delay, *limit),
        Model::Delay {
            base,
            jitter,
            dist,
            limit,
        } => delay(st, rng, p, (*base, *jitter, *dist), *limit),
        Model::Corrupt { p: prob, bits } => {
            if unit(rng) < *prob {
                Verdict::Corrupt(*bits)
            } else {
                Verdict::Pass
            }
        }
        Model::Rate {
            bits_per_sec,
            limit,
        } => rate(st, p, *bits_per_sec, *limit),
        Model::Down => Verdict::Drop,
        Model::Partition { a, b, two_way } => {
            let cut = (a.contains(&p.src) && b.contains(&p.dst))
                || (*two_way && b.contains(&p.src) && a.contains(&p.dst));
            if cut {
                Verdict::Drop
            } else {
                Verdict::Pass
            }
        }
    }
}

/// Gilbert-Elliott: transition first, then lose by the new state's rate
/// (netem's order).
fn gilbert_elliott(
    st: &mut State,
    rng: &mut ChaCha8Rng,
    to_bad: f64,
    to_good: f64,
    loss_good: f64,
    loss_bad: f64,
) -> Verdict {
    let u = unit(rng);
    if st.ge_bad {
        if u < to_good {
            st.ge_bad = false;
        }
    } else if u < to_bad {
        st.ge_bad = true;
    }
    let loss = if st.ge_bad { loss_bad } else { loss_good };
    if unit(rng) < loss {
        Verdict::Drop
    } else {
        Verdict::Pass
    }
}

/// netem's reorder: not reordered if the gap is not reached or the draw
/// (probability, correlation) fails; those are delayed. Reordered ones go
/// at once.
fn reorder(
    st: &mut State,
    rng: &mut ChaCha8Rng,
    p: &PacketCtx,
    (prob, correlation): (f64, f64),
    gap: u32,
    delay: Duration,
    limit: Option<u32>,
) -> Verdict {
    let eligible = st.reorder_count + 1 >= u64::from(gap);
    if eligible && st.corr.next(rng, correlation) < prob {
        st.reorder_count = 0;
        Verdict::Pass
    } else if !st.room(p.now, limit) {
        Verdict::Drop
    } else {
        st.reorder_count += 1;
        if limit.is_some() {
            st.hold(p.now + delay);
        }
        Verdict::Delay(delay)
    }
}

/// A delay of `base` plus jitter drawn from `dist`, or a drop when the
/// rule already holds `limit` packets.
fn delay(
    st: &mut State,
    rng: &mut ChaCha8Rng,
    p: &PacketCtx,
    (base, jitter, dist): (Duration, Duration, Jitter),
    limit: Option<u32>,
) -> Verdict {
    if !st.room(p.now, limit) {
        return Verdict::Drop;
    }
    let j = jitter.as_ps() as f64;
    let extra = match dist {
        Jitter::Uniform => (unit(rng) * 2.0 - 1.0) * j,
        Jitter::Normal => normal(rng) * j,
        Jitter::Pareto => j * ((1.0 - unit(rng)).powf(-1.0 / 3.0) - 1.0),
    };
    let total = (base.as_ps() as f64 + extra).max(0.0);
    let d = Duration(total.min(u64::MAX as f64) as u64);
    if limit.is_some() {
        st.hold(p.now + d);
    }
    Verdict::Delay(d)
}

/// A rate limit: each packet waits for the ones before it to be
/// serialised at `bits_per_sec`; a drop when `limit` already wait.
fn rate(st: &mut State, p: &PacketCtx, bits_per_sec: u64, limit: u32) -> Verdict {
    while st.rate_waiting.front().is_some_and(|t| *t <= p.now) {
        st.rate_waiting.pop_front();
    }
    if st.rate_waiting.len() >= limit as usize {
        return Verdict::Drop;
    }
    let start = st.rate_free_at.max(p.now);
    let ser =
        Duration((u128::from(p.len) * 8 * 1_000_000_000_000 / u128::from(bits_per_sec)) as u64);
    st.rate_free_at = start + ser;
    st.rate_waiting.push_back(start);
    let wait = start - p.now;
    if wait == Duration::ZERO {
        Verdict::Pass
    } else {
        Verdict::Delay(wait)
    }
}

/// Flips `bits` distinct random bits of `bytes`, drawn from `rng`.
fn flip(rng: &mut ChaCha8Rng, bytes: &mut [u8], bits: u32) {
    let total = bytes.len() as u64 * 8;
    if total == 0 {
        return;
    }
    let mut flipped: Vec<u64> = Vec::with_capacity(bits as usize);
    while flipped.len() < (bits as usize).min(total as usize) {
        let b = below(rng, total);
        if !flipped.contains(&b) {
            flipped.push(b);
            bytes[(b / 8) as usize] ^= 1 << (b % 8);
        }
    }
}

/// The tail of an unknown-link message: the close name, or else the
/// names there are.
fn link_hint(suggestion: &Option<String>, known: &[String], total: usize) -> String {
    match suggestion {
        Some(s) => format!(" (did you mean {s:?}?)"),
        None if known.is_empty() => "; the topology has no links".to_string(),
        None => {
            let more = if total > known.len() {
                format!(", ... ({total} in all)")
            } else {
                String::new()
            };
            format!("; its links are {}{more}", known.join(", "))
        }
    }
}

/// The name in `names` nearest to `name` by edit distance, if close.
pub fn closest(name: &str, names: &[&str]) -> Option<String> {
    fn dist(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut cur = vec![i + 1; b.len() + 1];
            for (j, cb) in b.iter().enumerate() {
                cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1);
            }
            prev = cur;
        }
        prev[b.len()]
    }
    names
        .iter()
        .map(|n| (dist(name, n), *n))
        .filter(|(d, _)| *d <= name.len().max(3) / 2)
        .min()
        .map(|(_, n)| n.to_string())
}
