//! The scenario as it will run, every key filled in (`udrma validate`):
//! each key the file gives, as it gives it; each it leaves out, with the
//! value the run uses, marked `# default` or `# profile NAME`; a key
//! whose absence means "none" (no ECN marking, no delay limit) as a
//! comment saying so. The text is TOML a user can paste back as a
//! scenario file, and it runs exactly as the file does (tests/filled.rs
//! runs every example both ways).
//!
//! A value is taken from the file, else from the profile's own text,
//! else from what resolution built ([`Resolved`]), so that it is the
//! one the run uses. A left-out key that the file's other keys make
//! refused (`timeout_hold` under go-back-n) is written as a comment
//! saying so: each written default is tried.

use std::fmt::Write as _;

use toml::{Table, Value};
use udrma_fabric::LinkParams;
use udrma_nic::{AckMode, CcConfig, NicConfig, RegistrationMode, RetransmitMode, TombstoneMode};
use udrma_proto::Duration;

use crate::file::keys::{model_needs, needs_of, Need};
use crate::file::schema::{OrderKind, RoutingKind, TopologyKind};
use crate::file::source::Locate;
use crate::plan::profile::PROFILES;
use crate::plan::resolved::{plan, BackendKind, Resolved};
use crate::{Scenario, ScenarioError};

/// What one line says: the file's value, the profile's, a default the
/// run uses, or that the key means nothing here when left out.
enum Source {
    File(Value),
    Profile(Value),
    Default(String),
    None(String),
}

/// A section being written: its lines, and the keys the file gave.
struct Section<'a> {
    lines: Vec<(String, Source)>,
    given: Option<&'a Table>,
    profile: Option<&'a Table>,
}

impl<'a> Section<'a> {
    fn new(given: Option<&'a Table>, profile: Option<&'a Table>) -> Self {
        Section {
            lines: Vec::new(),
            given,
            profile,
        }
    }

    /// `key`: the file's value, else the profile's, else `default` (a
    /// TOML value), else a note that it is none.
    fn key(&mut self, key: &str, default: impl FnOnce() -> Result<String, String>) {
        let src = if let Some(v) = self.given.and_then(|t| t.get(key)) {
            Source::File(v.clone())
        } else if let Some(v) = self.profile.and_then(|t| t.get(key)) {
            Source::Profile(v.clone())
        } else {
            match default() {
                Ok(v) => Source::Default(v),
                Err(words) => Source::None(words),
            }
        };
        self.lines.push((key.to_string(), src));
    }

    /// Only what the file gives (a key with no default worth writing).
    fn given_only(&mut self, key: &str) {
        if let Some(v) = self.given.and_then(|t| t.get(key)) {
            self.lines.push((key.to_string(), Source::File(v.clone())));
        }
    }
}

/// A time as TOML, in the largest unit that holds it exactly.
fn time(d: Duration) -> String {
    let ps = d.as_ps();
    let units = [
        (1_000_000_000_000, "s"),
        (1_000_000_000, "ms"),
        (1_000_000, "us"),
        (1_000, "ns"),
    ];
    for (per, unit) in units {
        if ps > 0 && ps % per == 0 {
            return format!("\"{}{unit}\"", ps / per);
        }
    }
    format!("\"{ps}ps\"")
}

/// A size as TOML, in binary units when they hold it exactly.
fn size(b: u64) -> String {
    for (per, unit) in [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")] {
        if b > 0 && b % per == 0 {
            return format!("\"{}{unit}\"", b / per);
        }
    }
    format!("\"{b}B\"")
}

/// A rate as TOML, in the largest unit that holds it exactly.
fn rate(bps: u64) -> String {
    for (per, unit) in [
        (1_000_000_000_000u64, "Tbps"),
        (1_000_000_000, "Gbps"),
        (1_000_000, "Mbps"),
        (1_000, "Kbps"),
    ] {
        if bps > 0 && bps % per == 0 {
            return format!("\"{}{unit}\"", bps / per);
        }
    }
    format!("\"{bps}bps\"")
}

fn quoted(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// The scenario `sc` as it runs at `seed` (the file's when `None`), every
/// key filled in; an error if the file would not run.
pub fn filled(sc: &Scenario, seed: Option<u64>) -> Result<String, ScenarioError> {
    let seed = seed.unwrap_or(sc.file.seed);
    // Planned whole, as a run at this seed is: the flows it draws are
    // bounded, its collective's sizes checked.
    let r = plan(sc, seed, BackendKind::Sim)?.resolved;
    let raw: Table = toml::from_str(sc.text()).map_err(|e| sc.error_at("name", e.to_string()))?;
    let profile: Option<Table> = sc
        .file
        .profile
        .as_ref()
        .and_then(|name| PROFILES.iter().find(|(n, _)| n == name))
        .and_then(|(_, text)| toml::from_str(text).ok());
    let sub = |t: &Option<Table>, k: &str| {
        t.as_ref()
            .and_then(|t| t.get(k))
            .and_then(Value::as_table)
            .cloned()
    };
    let table = |k: &str| raw.get(k).and_then(Value::as_table);
    let link = sub(&profile, "link");
    let mut nic_profile = sub(&profile, "nic").unwrap_or_default();
    if let Some(m) = profile.as_ref().and_then(|p| p.get("mtu_payload")) {
        nic_profile.insert("mtu_payload".into(), m.clone());
    }
    let cost_profile = sub(&profile, "cost");
    let name = sc.file.profile.clone().unwrap_or_default();

    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {}: the scenario as it runs at seed {seed}, every key filled in.\n\
         # `# default` marks a value the file leaves out, `# profile NAME` one its\n\
         # profile gives; a commented key is one that means \"none\" left out.\n\
         # Paste it back as a scenario file: it runs the same.",
        sc.path()
    );
    top(&mut out, sc, &raw, seed);
    let mut sections: Vec<(String, Section)> = vec![
        (
            "topology".into(),
            topology(sc, table("topology"), link.as_ref(), &r),
        ),
        ("nic".into(), nic(table("nic"), Some(&nic_profile), &r.nic)),
        ("cost".into(), cost(table("cost"), cost_profile.as_ref())),
        ("security".into(), security(table("security"))),
        ("messaging".into(), messaging(table("messaging"), &r)),
    ];
    let list = |k: &str| {
        raw.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let workloads = list("workload");
    let faults = list("fault");
    let pauses = list("pause");
    for (i, w) in workloads.iter().enumerate() {
        sections.push((
            "[workload]".into(),
            workload(w.as_table(), &sc.file.workloads[i].kind),
        ));
    }
    for (i, f) in faults.iter().enumerate() {
        sections.push((
            "[fault]".into(),
            fault(f.as_table(), sc.file.faults[i].model),
        ));
    }
    for p in &pauses {
        sections.push(("[pause]".into(), given_all(p.as_table())));
    }
    sections.push(("checks".into(), checks(table("checks"))));
    sections.push(("outputs".into(), outputs(table("outputs"))));
    prune(sc, &raw, &mut sections);
    for (title, s) in &sections {
        write_section(&mut out, title, s, &name);
    }
    Ok(out)
}

/// The keys before any table: name, description, seed, time limit, profile.
fn top(out: &mut String, sc: &Scenario, raw: &Table, seed: u64) {
    let f = &sc.file;
    let _ = writeln!(out, "name = {}", quoted(&f.name));
    let mark = |k: &str| {
        if raw.contains_key(k) {
            ""
        } else {
            "  # default"
        }
    };
    let _ = writeln!(
        out,
        "description = {}{}",
        quoted(&f.description),
        mark("description")
    );
    let seed_mark = if seed != f.seed {
        "  # --seed"
    } else {
        mark("seed")
    };
    // Above TOML's signed integers a seed is written as a string.
    let seed_text = i64::try_from(seed).map_or_else(|_| format!("\"{seed}\""), |s| s.to_string());
    let _ = writeln!(out, "seed = {seed_text}{seed_mark}");
    match raw.get("time_limit") {
        Some(v) => {
            let _ = writeln!(out, "time_limit = {v}");
        }
        None => {
            let _ = writeln!(out, "time_limit = {}  # default", time(f.time_limit.0));
        }
    }
    if let Some(p) = &f.profile {
        let _ = writeln!(out, "profile = {}", quoted(p));
    }
}

fn topology<'a>(
    sc: &Scenario,
    given: Option<&'a Table>,
    link: Option<&'a Table>,
    r: &Resolved,
) -> Section<'a> {
    let t = &sc.file.topology;
    let d = LinkParams::default();
    let mut s = Section::new(given, None);
    s.given_only("kind");
    let kind = t.kind;
    if matches!(
        kind,
        TopologyKind::Star | TopologyKind::Dumbbell | TopologyKind::Ring | TopologyKind::KaryNtree
    ) {
        s.given_only("hosts");
    }
    if matches!(kind, TopologyKind::FatTree | TopologyKind::KaryNtree) {
        s.given_only("k");
    }
    if kind == TopologyKind::KaryNtree {
        let (k, hosts) = (t.k.unwrap_or(2), t.hosts.unwrap_or(2));
        s.key("levels", || {
            Ok(crate::plan::build::kary_levels(k, hosts).to_string())
        });
    }
    // The link: the file's, else the profile's (marked), else the default.
    for (key, v) in [
        ("bandwidth", rate(d.bandwidth_bps)),
        ("latency", time(d.latency)),
    ] {
        let mut one = Section::new(given, link);
        one.key(key, || Ok(v));
        s.lines.extend(one.lines);
    }
    s.key("mtu", || Ok(d.mtu.to_string()));
    s.key("queue", || Ok(size(d.queue_bytes)));
    s.key("ecn_threshold", || Err("none: no ECN marking".into()));
    s.key(
        "ecn_max",
        || Err("none: no ramp above the threshold".into()),
    );
    s.key("trim", || Ok("false".into()));
    s.key("control_priority", || Ok("false".into()));
    if kind == TopologyKind::Dumbbell {
        s.key("bottleneck", || {
            Err("none: the bottleneck runs at `bandwidth`".into())
        });
    }
    s.key("routing", || {
        Ok(quoted(match RoutingKind::default() {
            RoutingKind::Shortest => "shortest",
            RoutingKind::Ecmp => "ecmp",
            RoutingKind::Spray => "spray",
        }))
    });
    s.key("phantom", || Ok("false".into()));
    s.key("order", || {
        Ok(quoted(match OrderKind::default() {
            OrderKind::Time => "time",
            OrderKind::Windows => "windows",
        }))
    });
    s.key("pfc", || Ok("false".into()));
    if let Some(p) = &r.pfc {
        s.key("pfc_xoff", || Ok(size(p.xoff_bytes)));
        s.key("pfc_xon", || Ok(size(p.xon_bytes)));
        s.key("pfc_headroom", || {
            Err("the least that is safe, worked out per link (a round trip at line rate)".into())
        });
        s.key("pfc_data_priority", || Ok(p.data_priority.to_string()));
        s.key("pfc_control_priority", || {
            Ok(p.control_priority.to_string())
        });
    }
    s
}

fn nic<'a>(given: Option<&'a Table>, profile: Option<&'a Table>, n: &NicConfig) -> Section<'a> {
    let mut s = Section::new(given, profile);
    let int = |v: u64| move || Ok::<_, String>(v.to_string());
    let flag = |v: bool| move || Ok::<_, String>(v.to_string());
    s.key("mtu_payload", || Ok(size(u64::from(n.mtu_payload))));
    s.key("segment_threshold", || Ok(size(n.segment_threshold)));
    s.key("segment_size", || Ok(size(u64::from(n.segment_size))));
    s.key("op_table", int(u64::from(n.op_table_capacity)));
    s.key("command_queue", int(n.command_queue_capacity as u64));
    s.key("registry", int(n.registry_capacity as u64));
    s.key("registry_timeout", || Ok(time(n.registry_timeout)));
    s.key("escape_entries", int(n.escape_capacity as u64));
    s.key("escape_bytes", || Ok(size(n.escape_bytes as u64)));
    s.key("escape_timeout", || Ok(time(n.escape_timeout)));
    s.key("tombstones", flag(n.tombstones));
    s.key("tombstone_capacity", int(n.tombstone_capacity as u64));
    s.key("tombstone_mode", || {
        Ok(quoted(match n.tombstone_mode {
            TombstoneMode::Window => "window",
            TombstoneMode::Fifo => "fifo",
        }))
    });
    s.key("registration", || {
        Ok(quoted(match n.registration {
            RegistrationMode::FirstOnly => "first-only",
            RegistrationMode::SelfDescribing => "self-describing",
        }))
    });
    let (ack, sack_delay) = match n.ack_mode {
        AckMode::PerPacket => ("per-packet", None),
        AckMode::Selective { delay } => ("selective", Some(delay)),
    };
    s.key("ack", || Ok(quoted(ack)));
    if let Some(d) = sack_delay {
        s.key("sack_delay", || Ok(time(d)));
    }
    s.key("completion_acks", flag(n.completion_acks));
    s.key("rto_restart", flag(n.rto_restart));
    s.key("tail_probe", flag(n.tail_probe));
    s.key("timeout_hold", flag(n.timeout_hold));
    s.key("credit_repair", flag(n.credit_repair));
    s.key("retransmit", || {
        Ok(quoted(match n.retransmit {
            RetransmitMode::Selective => "selective",
            RetransmitMode::GoBackN => "go-back-n",
        }))
    });
    s.key("loss_window", flag(n.loss_window));
    s.key("fast_retransmit", flag(n.fast_retransmit));
    s.key("spurious_by_timing", flag(n.spurious_by_timing));
    s.key("rto_initial", || Ok(time(n.rto_initial)));
    s.key("rto_min", || Ok(time(n.rto_min)));
    s.key("rto_max", || Ok(time(n.rto_max)));
    s.key("max_retries", int(u64::from(n.max_retries)));
    s.key("rnr_delay", || Ok(time(n.rnr_delay)));
    s.key("max_rnr_retries", int(u64::from(n.max_rnr_retries)));
    s.key("recv_queue", int(n.recv_queue_capacity as u64));
    s.key("transmit_queue", int(n.transmit_queue_capacity as u64));
    s.key("read_window", || match n.read_window {
        u64::MAX => Err("none: no limit".into()),
        w => Ok(size(w)),
    });
    s.key("descriptor_ring", int(n.descriptor_ring as u64));
    s.key("ring_low_water", int(n.ring_low_water as u64));
    s.key("max_sge", int(n.max_sge as u64));
    s.key("translation_sets", int(u64::from(n.translation.sets)));
    s.key("translation_ways", int(u64::from(n.translation.ways)));
    s.key(
        "translation_entries_per_line",
        int(u64::from(n.translation.entries_per_line)),
    );
    s.key("reduce_data_limit", || Ok(size(n.reduce_data_limit as u64)));
    s.key("reduce_chunks", int(n.reduce_chunks as u64));
    cc_keys(&mut s, &n.cc);
    s.key("multipath", || {
        Ok(quoted(match n.multipath {
            udrma_nic::Multipath::Single => "single",
            udrma_nic::Multipath::Spray => "spray",
            udrma_nic::Multipath::Reps => "reps",
        }))
    });
    s.key("entropies", int(u64::from(n.entropies)));
    s
}

fn cc_keys(s: &mut Section<'_>, cc: &CcConfig) {
    s.key("cc", || Ok(quoted(cc.algorithm.name())));
    s.key("cc_base_rtt", || Ok(time(cc.base_rtt)));
    s.key("cc_target_delay", || Ok(time(cc.target_delay)));
    s.key("cc_unscheduled", || Ok(size(cc.unscheduled)));
}

/// `[cost]`: each key the file or the profile gives; the rest cost nothing.
fn cost<'a>(given: Option<&'a Table>, profile: Option<&'a Table>) -> Section<'a> {
    const KEYS: [&str; 19] = [
        "doorbell",
        "descriptor_fetch",
        "per_sge",
        "dma_setup",
        "dma_bandwidth",
        "nic_per_packet",
        "host_copy_bandwidth",
        "interrupt",
        "host_copy_per_block",
        "host_reduce_bandwidth",
        "translate_hit",
        "translate_miss",
        "translate_search",
        "key_create",
        "recv_fetch",
        "reduce_trigger",
        "alu_per_operand",
        "aead_per_packet",
        "aead_bandwidth",
    ];
    let mut s = Section::new(given, profile);
    for key in KEYS {
        if key.ends_with("_bandwidth") {
            s.key(key, || Err("none: free (no time per byte)".into()));
        } else {
            s.key(key, || Ok(time(Duration::ZERO)));
        }
    }
    s
}

fn security(given: Option<&Table>) -> Section<'_> {
    let mut s = Section::new(given, None);
    s.key("mode", || Ok(quoted("none")));
    s
}

fn messaging<'a>(given: Option<&'a Table>, r: &Resolved) -> Section<'a> {
    let m = r.msg.base();
    let mut s = Section::new(given, None);
    s.key("vbuf_size", || Ok(size(u64::from(m.vbuf_size))));
    s.key("vbufs_per_peer", || Ok(m.vbufs_per_peer.to_string()));
    s.key("send_vbufs", || Ok(m.send_vbufs.to_string()));
    s.key("credit_notify_threshold", || {
        Ok(m.credit_notify_threshold.to_string())
    });
    s.key("credit_preserve", || Ok(m.credit_preserve.to_string()));
    s.key("rendezvous_threshold", || Ok(size(m.rendezvous_threshold)));
    s.key("rendezvous", || {
        Ok(quoted(match m.rendezvous {
            udrma_proto::Protocol::Rget => "rget",
            udrma_proto::Protocol::Rput => "rput",
            _ => "r3",
        }))
    });
    s.key("noop_interval", || Ok(time(m.noop_interval)));
    s.key("unexpected_bytes", || Ok(size(m.unexpected_bytes)));
    s.key("registration", || Ok(quoted("ok")));
    s
}

/// A `[[workload]]`: its kind, then each key of its kind (`needs_of`).
fn workload<'a>(given: Option<&'a Table>, kind: &crate::file::schema::WorkloadKind) -> Section<'a> {
    let mut s = Section::new(given, None);
    s.given_only("kind");
    for (key, need) in needs_of(*kind) {
        match need {
            Need::Default(v) => s.key(key, || Ok(v.to_string())),
            Need::Else(words) => s.key(key, || Err(words.to_string())),
            Need::Required | Need::Or(_) => s.given_only(key),
        }
    }
    s
}

/// A `[[fault]]`: its name, model and keys (`model_needs`), then the
/// targeting keys it gives.
fn fault(given: Option<&Table>, model: crate::file::schema::ModelKind) -> Section<'_> {
    let mut s = Section::new(given, None);
    s.given_only("name");
    s.given_only("model");
    for (key, need) in model_needs(model) {
        match need {
            Need::Default(v) => s.key(key, || Ok(v.to_string())),
            Need::Else(words) => s.key(key, || Err(words.to_string())),
            Need::Required | Need::Or(_) => s.given_only(key),
        }
    }
    for key in crate::file::keys::TARGETING {
        // A registration failure names its own `src`, `from`, `until`.
        if !s.lines.iter().any(|(k, _)| k == key) {
            s.given_only(key);
        }
    }
    s
}

/// A table written as the file gives it.
fn given_all(given: Option<&Table>) -> Section<'_> {
    let mut s = Section::new(given, None);
    if let Some(t) = given {
        for k in t.keys() {
            s.given_only(k);
        }
    }
    s
}

fn checks(given: Option<&Table>) -> Section<'_> {
    let mut s = Section::new(given, None);
    s.key("skip", || Ok("[]".into()));
    s.key("expect_failures", || Ok("false".into()));
    s
}

fn outputs(given: Option<&Table>) -> Section<'_> {
    let mut s = Section::new(given, None);
    s.key("pcap", || Err("none: no capture".into()));
    s.key("pcap_links", || Ok("[]".into()));
    s.key("trace", || Err("none: no trace file".into()));
    s
}

/// Turns each written default that the file's other keys make refused
/// into a comment saying so: all are tried at once, and when that fails
/// one at a time.
fn prune(sc: &Scenario, raw: &Table, sections: &mut [(String, Section)]) {
    let parses = |sections: &[(String, Section)]| {
        let text = render_plain(raw, sections);
        Scenario::parse(sc.path(), &text).is_ok()
    };
    if parses(sections) {
        return;
    }
    for i in 0..sections.len() {
        let mut j = 0;
        while j < sections[i].1.lines.len() {
            if !matches!(
                sections[i].1.lines[j].1,
                Source::Default(_) | Source::Profile(_)
            ) {
                j += 1;
                continue;
            }
            // Kept only if the file still parses with it alone added.
            let alone = only_with(sections, i, j);
            if !parses(&alone) {
                let key = &sections[i].1.lines[j].0;
                let words = format!("not set: the file's other keys refuse `{key}` here");
                sections[i].1.lines[j].1 = Source::None(words);
            }
            j += 1;
        }
    }
    // Each alone was taken; together they may still clash: then none is
    // written (the file's own keys always parse).
    if !parses(sections) {
        for (_, s) in sections.iter_mut() {
            for (key, src) in s.lines.iter_mut() {
                if let Source::Default(v) = src {
                    let words = format!("{v} when left out (not written: with every default filled in, the file's other keys refuse `{key}`)");
                    *src = Source::None(words);
                }
            }
        }
    }
}

/// `sections` with only the file's own values, and line `j` of section
/// `i`.
fn only_with<'a>(
    sections: &[(String, Section<'a>)],
    i: usize,
    j: usize,
) -> Vec<(String, Section<'a>)> {
    sections
        .iter()
        .enumerate()
        .map(|(si, (title, s))| {
            let lines = s
                .lines
                .iter()
                .enumerate()
                .filter(|(lj, (_, src))| matches!(src, Source::File(_)) || (si, *lj) == (i, j))
                .map(|(_, (k, src))| (k.clone(), src.clone_value()))
                .collect();
            (
                title.clone(),
                Section {
                    lines,
                    given: s.given,
                    profile: s.profile,
                },
            )
        })
        .collect()
}

impl Source {
    fn clone_value(&self) -> Source {
        match self {
            Source::File(v) => Source::File(v.clone()),
            Source::Profile(v) => Source::Profile(v.clone()),
            Source::Default(v) => Source::Default(v.clone()),
            Source::None(v) => Source::None(v.clone()),
        }
    }
}

/// The sections as plain TOML (no comments), after the file's top keys.
fn render_plain(raw: &Table, sections: &[(String, Section)]) -> String {
    let mut out = String::new();
    for (k, v) in raw {
        if !v.is_table() && !v.is_array() || k == "profile" {
            let _ = writeln!(out, "{k} = {v}");
        }
    }
    for (title, s) in sections {
        let _ = writeln!(out, "\n[{title}]");
        for (k, src) in &s.lines {
            match src {
                Source::File(v) | Source::Profile(v) => {
                    let _ = writeln!(out, "{k} = {v}");
                }
                Source::Default(v) => {
                    let _ = writeln!(out, "{k} = {v}");
                }
                Source::None(_) => {}
            }
        }
    }
    out
}

fn write_section(out: &mut String, title: &str, s: &Section, profile: &str) {
    let _ = writeln!(out, "\n[{title}]");
    for (k, src) in &s.lines {
        let _ = match src {
            Source::File(v) => writeln!(out, "{k} = {v}"),
            Source::Profile(v) => writeln!(out, "{k} = {v}  # profile {profile}"),
            Source::Default(v) => writeln!(out, "{k} = {v}  # default"),
            Source::None(words) => writeln!(out, "# {k}: {words}"),
        };
    }
}
