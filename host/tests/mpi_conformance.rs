//! Conformance with a real MPI: random nested derived datatypes and
//! reductions, computed by udrma and by the MPI library that `mpicc`
//! links (MPICH from the distribution's packages in CI), compared byte for
//! byte.
//!
//! Each datatype is built from one description twice: by udrma's
//! constructors here and by MPI's in `tools/mpi/conformance.c`. Size,
//! bounds, extent, the packed bytes of 0 to 3 elements and the buffer
//! after unpacking them must be equal. Reductions run every operation on
//! every type udrma has that MPI has too, through udrma's ALU (what the
//! NIC computes) and `MPI_Reduce_local`, over edge values (±0, NaN,
//! infinities, integer limits and wrap, ties).
//!
//! Where udrma differs from MPI on purpose (docs/noncontig.md and
//! docs/collectives.md), the cases are set aside and counted, not
//! compared:
//! - no alignment padding in a struct: the C side resizes every struct to
//!   its fields' bounds;
//! - a struct field of an empty type is ignored where MPI implementations
//!   count its displacement: such fields are drawn with no copies (MPICH
//!   4.0.2 also misbehaves on them: its true extent counts them, and
//!   packing some such structs dies of an integer division by zero);
//! - a type with no data: MPICH 4 gives blocks of length zero in a vector
//!   the bounds of a point at their displacement, a subarray of an empty
//!   type the whole array's bounds, and copies of an empty type whose
//!   bounds were set by `resized` none, where udrma gives an empty type
//!   bounds only from bounds set outright: its size and packing are
//!   compared, its bounds counted as `bounded differently`;
//! - MINLOC/MAXLOC order −0 below +0 where MPI calls them equal, so the
//!   location differs: counted as `signed zeros`;
//! - locations are u32 where MPI's are int: drawn below 2^31;
//! - MINLOC/MAXLOC of unsigned types: MPI has no pair type for them.
//!
//! Where MPI leaves the result undefined (MIN/MAX/MINLOC/MAXLOC with a
//! NaN; which NaN a sum of NaNs gives), the case is counted as undefined
//! or compared as "both NaN".
//!
//! Known MPI bugs a comparison meets are named here, not copied: MPICH
//! 4.0.x (Debian 12's) gives MPI_MIN and MPI_MAX of MPI_UINT32_T and
//! MPI_UINT64_T as if the values were signed (the maximum of 0xffffffff
//! and 1 is 1). Those cases count as `MPI bugs` and udrma must give the
//! unsigned answer.
//!
//! Without `mpicc` on PATH the test says SKIPPED on stderr and passes,
//! unless `UDRMA_REQUIRE_MPI=1` (CI sets it), when it fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use udrma_host::datatype::pack::{pack, unpack};
use udrma_host::datatype::{Datatype, Order};
use udrma_nic::reduce::alu::combine_one;
use udrma_proto::{ReduceOp, ReduceType};

/// Random types with data compared (the issue asks for at least 2,000);
/// the empty types drawn on the way are compared too.
const TYPES_WITH_DATA: usize = 2_000;
/// Reduction lines per (operation, type), of [`ELEMENTS`] elements each.
const REDUCE_LINES: usize = 40;
const ELEMENTS: usize = 16;

struct Gen(ChaCha8Rng);

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        udrma_proto::rng::below(&mut self.0, n)
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo) as u64) as i64
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

/// A random type (its description for the C side, and udrma's), `depth`
/// constructors deep at most. `None` when udrma refuses the arguments.
fn random_type(g: &mut Gen, depth: u32) -> Option<(String, Datatype)> {
    if depth == 0 || g.chance(4) {
        let size = [1u64, 2, 4, 8][g.below(4) as usize];
        return Some((format!("p {size}"), Datatype::primitive(size).ok()?));
    }
    let (inner_s, inner) = random_type(g, depth - 1)?;
    let blocks = |g: &mut Gen, lo: i64, hi: i64| -> Vec<(u64, i64)> {
        (0..g.below(4))
            .map(|_| (g.below(3), g.range(lo, hi)))
            .collect()
    };
    let list = |v: &[(u64, i64)]| {
        v.iter()
            .map(|(b, d)| format!("{b} {d}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    Some(match g.below(9) {
        0 => {
            let n = g.below(4);
            (
                format!("c {n} {inner_s}"),
                Datatype::contiguous(n, &inner).ok()?,
            )
        }
        1 => {
            let (c, b, s) = (g.below(4), g.below(3), g.range(-3, 4));
            (
                format!("v {c} {b} {s} {inner_s}"),
                Datatype::vector(c, b, s, &inner).ok()?,
            )
        }
        2 => {
            let (c, b, s) = (g.below(4), g.below(3), g.range(-24, 40));
            (
                format!("hv {c} {b} {s} {inner_s}"),
                Datatype::hvector(c, b, s, &inner).ok()?,
            )
        }
        3 => {
            let v = blocks(g, -4, 6);
            let (b, d): (Vec<u64>, Vec<i64>) = v.iter().copied().unzip();
            (
                format!("i {} {} {inner_s}", v.len(), list(&v)),
                Datatype::indexed(&b, &d, &inner).ok()?,
            )
        }
        4 => {
            let v = blocks(g, -16, 32);
            let (b, d): (Vec<u64>, Vec<i64>) = v.iter().copied().unzip();
            (
                format!("hi {} {} {inner_s}", v.len(), list(&v)),
                Datatype::hindexed(&b, &d, &inner).ok()?,
            )
        }
        5 => {
            let b = g.below(3);
            let d: Vec<i64> = (0..g.below(4)).map(|_| g.range(-4, 6)).collect();
            let ds = d.iter().map(|d| format!(" {d}")).collect::<String>();
            (
                format!("ib {} {b}{ds} {inner_s}", d.len()),
                Datatype::indexed_block(b, &d, &inner).ok()?,
            )
        }
        6 => {
            // Fields of their own types; an empty field gets no copies
            // (the documented difference).
            let mut fields = vec![(g.below(3), g.range(-16, 32), inner_s, inner)];
            for _ in 0..g.below(3) {
                let (s, t) = random_type(g, depth - 1)?;
                fields.push((g.below(3), g.range(-16, 32), s, t));
            }
            let mut desc = format!("s {}", fields.len());
            let mut udrma = Vec::new();
            for (b, d, s, t) in fields {
                let b = if t.size() == 0 { 0 } else { b };
                desc += &format!(" {b} {d} {s}");
                udrma.push((b, d, t));
            }
            (desc, Datatype::structure(&udrma).ok()?)
        }
        7 => {
            let nd = 1 + g.below(3) as usize;
            let sizes: Vec<u64> = (0..nd).map(|_| 1 + g.below(4)).collect();
            let subs: Vec<u64> = sizes.iter().map(|&n| 1 + g.below(n)).collect();
            let starts: Vec<u64> = sizes
                .iter()
                .zip(&subs)
                .map(|(&n, &s)| g.below(n - s + 1))
                .collect();
            let c = g.chance(2);
            let join = |v: &[u64]| {
                v.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            (
                format!(
                    "sa {nd} {} {} {} {} {inner_s}",
                    if c { "c" } else { "f" },
                    join(&sizes),
                    join(&subs),
                    join(&starts)
                ),
                Datatype::subarray(
                    &sizes,
                    &subs,
                    &starts,
                    if c { Order::C } else { Order::Fortran },
                    &inner,
                )
                .ok()?,
            )
        }
        _ => {
            let (lb, e) = (g.range(-8, 8), g.range(0, 24));
            (
                format!("r {lb} {e} {inner_s}"),
                Datatype::resized(&inner, lb, e).ok()?,
            )
        }
    })
}

/// What udrma says of `count` elements of `t` in a buffer just large
/// enough: the case line for the C side and the answer expected back.
fn type_case(desc: &str, t: &Datatype, count: u64) -> Option<(String, String)> {
    let layout = t.commit().ok()?.repeat(count).ok()?;
    let lo = layout
        .blocks()
        .iter()
        .map(|b| b.offset)
        .min()
        .unwrap_or(0)
        .min(0);
    let hi = layout
        .blocks()
        .iter()
        .map(|b| b.offset + b.len as i64)
        .max()
        .unwrap_or(1)
        .max(1);
    let (len, origin) = ((hi - lo) as usize, (-lo) as usize);
    if len > 1 << 14 {
        return None;
    }
    let buf: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    let mut packed = Vec::new();
    pack(&layout, &buf, origin, &mut packed).ok()?;
    let mut back = vec![0xA5u8; len];
    unpack(&layout, &packed, &mut back, origin).ok()?;
    let hex = |b: &[u8]| {
        if b.is_empty() {
            "-".to_string()
        } else {
            b.iter().map(|x| format!("{x:02x}")).collect()
        }
    };
    Some((
        format!("T {count} {len} {origin} {desc}"),
        format!(
            "T {} {} {} {} {}",
            t.size(),
            t.lb(),
            t.extent(),
            hex(&packed),
            hex(&back)
        ),
    ))
}

/// Edge values of `ty` as bits, and random ones.
fn value(g: &mut Gen, ty: ReduceType, logical: bool) -> u64 {
    if logical && g.chance(2) {
        return g.below(3);
    }
    let r = g.0.next_u64();
    let edges: &[u64] = match ty {
        ReduceType::F32 => &[
            0,
            0x8000_0000,
            1f32.to_bits() as u64,
            (-1f32).to_bits() as u64,
            0x7fc0_0000,
            0xffc0_0001,
            f32::INFINITY.to_bits() as u64,
            f32::NEG_INFINITY.to_bits() as u64,
            f32::MAX.to_bits() as u64,
            1,
        ],
        ReduceType::F64 => &[
            0,
            0x8000_0000_0000_0000,
            1f64.to_bits(),
            (-1f64).to_bits(),
            0x7ff8_0000_0000_0000,
            0xfff8_0000_0000_0001,
            f64::INFINITY.to_bits(),
            f64::NEG_INFINITY.to_bits(),
            f64::MAX.to_bits(),
            1,
        ],
        ReduceType::I32 | ReduceType::U32 => &[0, 1, 0xffff_ffff, 0x7fff_ffff, 0x8000_0000],
        _ => &[0, 1, u64::MAX, i64::MAX as u64, 1 << 63],
    };
    let v = if g.chance(2) {
        edges[g.below(edges.len() as u64) as usize]
    } else {
        match ty {
            // Small numbers too, so sums round and ties happen.
            ReduceType::F32 if g.chance(2) => ((r % 200) as f32 - 100.0).to_bits() as u64,
            ReduceType::F64 if g.chance(2) => ((r % 200) as f64 / 8.0 - 12.0).to_bits(),
            _ => r,
        }
    };
    if ty.width() == Some(4) {
        v & 0xffff_ffff
    } else {
        v
    }
}

fn is_float(ty: ReduceType) -> bool {
    matches!(ty, ReduceType::F32 | ReduceType::F64)
}

fn is_signed(ty: ReduceType) -> bool {
    matches!(ty, ReduceType::I32 | ReduceType::I64)
}

fn is_nan(ty: ReduceType, v: u64) -> bool {
    match ty {
        ReduceType::F32 => f32::from_bits(v as u32).is_nan(),
        ReduceType::F64 => f64::from_bits(v).is_nan(),
        _ => false,
    }
}

fn float(ty: ReduceType, v: u64) -> f64 {
    match ty {
        ReduceType::F32 => f64::from(f32::from_bits(v as u32)),
        _ => f64::from_bits(v),
    }
}

#[derive(Default, Debug)]
struct Tally {
    compared: u64,
    undefined: u64,
    signed_zeros: u64,
    mpi_bugs: u64,
    failures: Vec<String>,
}

/// Judges one element: `a` first, `b` second, `m` MPI's answer.
fn judge(op: ReduceOp, ty: ReduceType, a: (u64, u32), b: (u64, u32), m: (u64, u32), t: &mut Tally) {
    let u = combine_one(op, ty, a, b).expect("the operation applies to the type");
    let fl = is_float(ty);
    let minmax = matches!(
        op,
        ReduceOp::Min | ReduceOp::Max | ReduceOp::MinLoc | ReduceOp::MaxLoc
    );
    let loc = op.has_locations();
    let mut fail = |why: &str| {
        t.failures.push(format!(
            "{op} {ty}: a={:x}/{} b={:x}/{} udrma={:x}/{} mpi={:x}/{} ({why})",
            a.0, a.1, b.0, b.1, u.0, u.1, m.0, m.1
        ))
    };
    if fl && minmax && (is_nan(ty, a.0) || is_nan(ty, b.0)) {
        t.undefined += 1;
        return;
    }
    if fl && minmax && float(ty, a.0) == float(ty, b.0) && a.0 != b.0 {
        // −0 and +0: MPI calls them equal.
        if loc {
            t.signed_zeros += 1;
        } else {
            t.compared += 1;
            if float(ty, u.0) != float(ty, m.0) {
                fail("signed zeros");
            }
        }
        return;
    }
    if fl && op == ReduceOp::Sum && is_nan(ty, u.0) && is_nan(ty, m.0) {
        t.compared += 1;
        return;
    }
    if !fl && !is_signed(ty) && matches!(op, ReduceOp::Min | ReduceOp::Max) {
        let truth = if op == ReduceOp::Min {
            a.0.min(b.0)
        } else {
            a.0.max(b.0)
        };
        t.compared += 1;
        if u.0 != truth {
            fail("udrma is not the unsigned answer");
        } else if m.0 != truth {
            t.mpi_bugs += 1;
        }
        return;
    }
    t.compared += 1;
    if u.0 != m.0 || (loc && u.1 != m.1) {
        fail("bits differ");
    }
}

fn mpicc() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("mpicc"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var_os("UDRMA_REQUIRE_MPI").is_some_and(|v| v == "1") {
            panic!("mpicc is required (UDRMA_REQUIRE_MPI=1) but was not found on PATH");
        }
        // Written past the test harness's capture: a skip must be seen.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: mpicc not found on PATH; install MPICH (apt-get install mpich libmpich-dev) to compare with a real MPI"
        );
    }
    found
}

/// Builds the C side once into `dir`.
fn build(mpicc: &Path, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/mpi/conformance.c");
    let exe = dir.join("conformance");
    let out = Command::new(mpicc)
        .arg("-O1")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("mpicc runs");
    assert!(
        out.status.success(),
        "mpicc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs the C side on `input` (kept as `name` beside it, to rerun by hand
/// with `conformance < FILE`); its answer lines.
fn ask(exe: &Path, name: &str, input: &str) -> Vec<String> {
    let file = exe.with_file_name(name);
    std::fs::write(&file, input).unwrap();
    let mut child = Command::new(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the MPI program starts");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("the MPI program runs");
    let written = writer.join().unwrap();
    assert!(
        out.status.success(),
        "the MPI program failed ({}) on {}: {}",
        out.status,
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    written.expect("the MPI program reads its cases");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn random_datatypes_and_reductions_agree_with_mpi() {
    let Some(mpicc) = mpicc() else { return };
    let dir = std::env::temp_dir().join(format!("udrma-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = build(&mpicc, &dir);
    let mut g = Gen(ChaCha8Rng::seed_from_u64(0x6d70_6963_6800));

    // Datatypes.
    let (mut input, mut want) = (String::new(), Vec::new());
    let mut with_data = 0;
    while with_data < TYPES_WITH_DATA {
        let Some((desc, t)) = random_type(&mut g, 3) else {
            continue;
        };
        let count = g.below(4);
        let Some((case, answer)) = type_case(&desc, &t, count) else {
            continue;
        };
        with_data += usize::from(t.size() > 0);
        input += &case;
        input.push('\n');
        want.push((case, answer));
    }
    let got = ask(&exe, "types.txt", &input);
    assert_eq!(got.len(), want.len(), "one answer a case");
    // A type with no data: only what packing gives is compared (see
    // `empty_bounds`).
    let mut empty_bounds = 0;
    let mut differ = Vec::new();
    for ((case, w), g) in want.iter().zip(&got) {
        let fields = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        let (wf, gf) = (fields(w), fields(g));
        let same = if wf.len() == 6 && gf.len() == 6 && wf[1] == "0" && gf[1] == "0" {
            empty_bounds += usize::from(wf[2..4] != gf[2..4]);
            wf[4..] == gf[4..]
        } else {
            w == g
        };
        if !same {
            differ.push(format!("{case}\n  udrma: {w}\n  mpi:   {g}"));
        }
    }
    let summary = format!(
        "mpi conformance: {} types, {with_data} with data; {} differ; {empty_bounds} empty types bounded differently (set aside)",
        want.len(),
        differ.len()
    );
    let _ = writeln!(std::io::stderr(), "{summary}");
    shown_in("docs/noncontig.md", &summary);
    assert!(
        differ.is_empty(),
        "{} of {} types differ from MPI; the first:\n{}",
        differ.len(),
        want.len(),
        differ[..differ.len().min(5)].join("\n")
    );

    // Reductions.
    let mut tally = Tally::default();
    let mut combos = 0;
    for op in ReduceOp::ALL {
        for ty in ReduceType::ALL {
            if !op.applies_to(ty) || (op.has_locations() && !is_signed(ty) && !is_float(ty)) {
                continue;
            }
            combos += 1;
            let logical = matches!(op, ReduceOp::Land | ReduceOp::Lor | ReduceOp::Lxor);
            let (mut input, mut cases) = (String::new(), Vec::new());
            for _ in 0..REDUCE_LINES {
                let side = |g: &mut Gen| -> Vec<(u64, u32)> {
                    (0..ELEMENTS)
                        .map(|_| (value(g, ty, logical), g.below(6) as u32))
                        .collect()
                };
                let a = side(&mut g);
                let mut b = side(&mut g);
                for (i, e) in b.iter_mut().enumerate() {
                    if g.chance(4) {
                        e.0 = a[i].0; // a tie
                    }
                }
                let mut line = format!("R {} {} {ELEMENTS}", op.name(), ty.name());
                for s in [&a, &b] {
                    s.iter().for_each(|e| line += &format!(" {:x}", e.0));
                    if op.has_locations() {
                        s.iter().for_each(|e| line += &format!(" {:x}", e.1));
                    }
                }
                input += &line;
                input.push('\n');
                cases.push((a, b));
            }
            for (line, (a, b)) in ask(&exe, &format!("{op}-{ty}.txt"), &input)
                .iter()
                .zip(&cases)
            {
                let words: Vec<u64> = line
                    .split(' ')
                    .skip(1)
                    .map(|w| u64::from_str_radix(w, 16).unwrap())
                    .collect();
                for i in 0..ELEMENTS {
                    let m = (
                        words[i],
                        if op.has_locations() {
                            words[ELEMENTS + i] as u32
                        } else {
                            0
                        },
                    );
                    let (a, b) = (a[i], b[i]);
                    let strip = |e: (u64, u32)| (e.0, if op.has_locations() { e.1 } else { 0 });
                    judge(op, ty, strip(a), strip(b), m, &mut tally);
                }
            }
        }
    }
    let summary = format!(
        "mpi conformance: {combos} (operation, type) pairs, {} elements compared, {} undefined by MPI, {} signed zeros (MINLOC/MAXLOC), {} MPI bugs",
        tally.compared,
        tally.undefined,
        tally.signed_zeros,
        tally.mpi_bugs
    );
    let _ = writeln!(std::io::stderr(), "{summary}");
    assert!(
        tally.failures.is_empty(),
        "{} reduction elements differ from MPI; the first:\n{}",
        tally.failures.len(),
        tally.failures[..tally.failures.len().min(8)].join("\n")
    );
    shown_in("docs/collectives.md", &summary);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The docs show this run's summary line as it is printed (the counts
/// come from a fixed seed, so they cannot drift unseen).
fn shown_in(doc: &str, line: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(doc);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.lines().any(|l| l == line),
        "{doc} does not show this run's line:\n{line}"
    );
}
