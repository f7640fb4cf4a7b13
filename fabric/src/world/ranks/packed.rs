//! Messages laid end to end in one buffer, as one all-to-all with
//! counts moves them between ranks.

/// Messages laid end to end: the one for (or from) rank `r` is
/// [`Packed::part`]`(r)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Packed {
    /// The messages, one after the other.
    pub bytes: Vec<u8>,
    /// Each message's length, by rank.
    pub lens: Vec<usize>,
}

impl Packed {
    /// Most room kept between windows for messages, each way: enough for
    /// k=32's windows (about 1.3 MiB), while k=64's (about 10 MiB) are
    /// made afresh, so that a rank's peak memory does not grow by what it
    /// keeps.
    pub const SPARE_BYTES: usize = 4 << 20;

    /// `room`, kept for the next message if it is at most
    /// [`Packed::SPARE_BYTES`]; otherwise nothing.
    pub fn spare(room: Vec<u8>) -> Vec<u8> {
        if room.capacity() <= Packed::SPARE_BYTES {
            room
        } else {
            Vec::new()
        }
    }

    /// Rank `r`'s message (empty past the end).
    pub fn part(&self, r: usize) -> &[u8] {
        let start: usize = self.lens.iter().take(r).sum();
        let len = self.lens.get(r).copied().unwrap_or(0);
        self.bytes.get(start..start + len).unwrap_or(&[])
    }

    /// One message per rank.
    pub fn split(&self) -> Vec<Vec<u8>> {
        (0..self.lens.len())
            .map(|r| self.part(r).to_vec())
            .collect()
    }

    /// The messages laid end to end.
    pub fn join(parts: Vec<Vec<u8>>) -> Packed {
        Packed {
            lens: parts.iter().map(Vec::len).collect(),
            bytes: parts.concat(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Room for messages is kept between windows only while it is small:
    /// a rank's peak memory must not grow by what it keeps.
    #[test]
    fn only_small_room_is_kept_for_the_next_message() {
        let small = Vec::<u8>::with_capacity(Packed::SPARE_BYTES);
        assert_eq!(Packed::spare(small).capacity(), Packed::SPARE_BYTES);
        let big = Vec::<u8>::with_capacity(Packed::SPARE_BYTES + 1);
        assert_eq!(Packed::spare(big).capacity(), 0);
    }

    /// Messages laid end to end come apart where they were joined, an
    /// empty one included, and a rank past the end reads as nothing.
    #[test]
    fn packed_messages_come_apart_as_they_were_joined() {
        let parts = vec![b"ab".to_vec(), Vec::new(), b"cde".to_vec()];
        let p = Packed::join(parts.clone());
        assert_eq!(p.bytes, b"abcde");
        assert_eq!(p.lens, [2, 0, 3]);
        assert_eq!(p.part(0), b"ab");
        assert_eq!(p.part(1), b"");
        assert_eq!(p.part(2), b"cde");
        assert_eq!(p.part(3), b"");
        assert_eq!(p.split(), parts);
        let short = Packed {
            bytes: b"ab".to_vec(),
            lens: vec![1, 4],
        };
        assert_eq!(
            short.part(1),
            b"",
            "a length past the bytes reads as nothing"
        );
    }
}
