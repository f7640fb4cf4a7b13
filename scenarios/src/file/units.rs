//! Sizes, times and rates written as strings: `"1MiB"`, `"4000"`, `"2us"`,
//! `"1.5ms"`, `"100Gbps"`. Bare numbers are bytes, picoseconds are never
//! implied: a time needs a unit.

use core::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use udrma_proto::Duration;

fn split(s: &str) -> (&str, &str) {
    let s = s.trim();
    let at = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    (s[..at].trim(), s[at..].trim())
}

fn number(n: &str, whole: &str) -> Result<f64, String> {
    let clean: String = n.chars().filter(|c| *c != '_').collect();
    clean
        .parse::<f64>()
        .map_err(|_| format!("{whole:?} does not start with a number"))
}

/// Parses a size: `4096`, `4KiB`, `1MiB`, `2GiB`, `10KB`, `1MB`, `1GB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    if s.trim_start().starts_with('-') {
        return Err(format!(
            "{s:?} is negative: a size is a whole number of bytes, 0 or more"
        ));
    }
    let (n, unit) = split(s);
    let v = number(n, s)?;
    let mult: f64 = match unit {
        "" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        other => {
            return Err(format!(
                "unknown size unit {other:?} in {s:?} (expected B, KiB, MiB, GiB, TiB, KB, MB, GB or TB){}",
                near(other, &["B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB"])
            ))
        }
    };
    let bytes = v * mult;
    if bytes.fract() != 0.0 || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("{s:?} is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// " (did you mean `X`?)" for a unit that is one of `units` but for
/// case, or a letter or two away; empty if none is near.
fn near(unit: &str, units: &[&str]) -> String {
    units
        .iter()
        .find(|u| u.eq_ignore_ascii_case(unit))
        .map(|u| u.to_string())
        .or_else(|| udrma_faults::closest(unit, units))
        .map_or_else(String::new, |u| format!(" (did you mean `{u}`?)"))
}

/// Parses a time: `500ps`, `10ns`, `2us`, `1.5ms`, `1s`.
pub fn parse_time(s: &str) -> Result<Duration, String> {
    let (n, unit) = split(s);
    let v = number(n, s)?;
    let ps: f64 = match unit {
        "ps" => 1.0,
        "ns" => 1e3,
        "us" | "µs" => 1e6,
        "ms" => 1e9,
        "s" => 1e12,
        "" => return Err(format!("{s:?} needs a unit (ps, ns, us, ms or s)")),
        other => {
            return Err(format!(
                "unknown time unit {other:?} in {s:?} (expected ps, ns, us, ms or s){}",
                near(other, &["ps", "ns", "us", "ms", "s"])
            ))
        }
    };
    let total = (v * ps).round();
    if !(0.0..=u64::MAX as f64).contains(&total) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(Duration(total as u64))
}

/// Parses a rate: `100Gbps`, `25Gbps`, `400Mbps`, `1Tbps`, `1000bps`.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let (n, unit) = split(s);
    let v = number(n, s)?;
    let mult: f64 = match unit {
        "bps" => 1.0,
        "Kbps" | "kbps" => 1e3,
        "Mbps" => 1e6,
        "Gbps" => 1e9,
        "Tbps" => 1e12,
        other => {
            return Err(format!(
                "unknown rate unit {other:?} in {s:?} (expected bps, Kbps, Mbps, Gbps or Tbps){}",
                near(other, &["bps", "Kbps", "Mbps", "Gbps", "Tbps"])
            ))
        }
    };
    let bps = (v * mult).round();
    if bps < 1.0 || bps > u64::MAX as f64 {
        return Err(format!("{s:?} is not a positive rate"));
    }
    Ok(bps as u64)
}

macro_rules! string_unit {
    ($name:ident, $ty:ty, $parse:path, $what:literal) => {
        #[doc = concat!("A ", $what, " read from a string (or, for sizes, a bare integer).")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name(pub $ty);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($what)
                    }
                    fn visit_str<E: de::Error>(self, s: &str) -> Result<$name, E> {
                        $parse(s).map($name).map_err(E::custom)
                    }
                    fn visit_i64<E: de::Error>(self, n: i64) -> Result<$name, E> {
                        self.visit_str(&n.to_string())
                    }
                    fn visit_u64<E: de::Error>(self, n: u64) -> Result<$name, E> {
                        self.visit_str(&n.to_string())
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

string_unit!(Size, u64, parse_size, "a size such as \"4KiB\" or 4096");
string_unit!(Time, Duration, parse_time, "a time such as \"2us\"");
string_unit!(Rate, u64, parse_rate, "a rate such as \"100Gbps\"");

/// A retransmission timer's floor (`[nic] rto_min`): a time, or
/// `"full-queues"`, worked out from the topology as the time every queue
/// on a longest round trip takes to drain when full (so the timer only
/// fires on a packet that cannot still be queued: a last resort, as
/// Ultra Ethernet's simulator sets its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtoFloor {
    /// This long.
    Fixed(Duration),
    /// Every queue of a longest round trip, drained.
    FullQueues,
}

impl<'de> Deserialize<'de> for RtoFloor {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RtoFloor;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a time such as \"20us\", or \"full-queues\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<RtoFloor, E> {
                if s.trim() == "full-queues" {
                    return Ok(RtoFloor::FullQueues);
                }
                parse_time(s)
                    .map(RtoFloor::Fixed)
                    .map_err(|e| E::custom(format!("{e} (or \"full-queues\", from the topology)")))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse_and_errors_say_what_was_expected() {
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("4000"), Ok(4000));
        assert_eq!(parse_size("2 GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size("3TB"), Ok(3_000_000_000_000));
        assert!(parse_size("-8").unwrap_err().contains("is negative"));
        assert_eq!(parse_time("2us"), Ok(Duration::from_micros(2)));
        assert_eq!(parse_time("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse_rate("100Gbps"), Ok(100_000_000_000));
        assert_eq!(
            parse_size("1MIB").unwrap_err(),
            "unknown size unit \"MIB\" in \"1MIB\" (expected B, KiB, MiB, GiB, TiB, KB, MB, GB or TB) (did you mean `MiB`?)"
        );
        // A near miss is named: by case, or by a letter.
        assert!(parse_rate("10gbps")
            .unwrap_err()
            .ends_with("(did you mean `Gbps`?)"));
        assert!(parse_time("3msec")
            .unwrap_err()
            .ends_with("(did you mean `ms`?)"));
        assert!(parse_size("4Kib")
            .unwrap_err()
            .ends_with("(did you mean `KiB`?)"));
        assert!(!parse_size("4parsecs").unwrap_err().contains("did you mean"));
        assert_eq!(
            parse_time("5").unwrap_err(),
            "\"5\" needs a unit (ps, ns, us, ms or s)"
        );
        assert!(parse_rate("fast")
            .unwrap_err()
            .contains("does not start with a number"));
        assert!(parse_size("1.5").is_err());
    }
}
