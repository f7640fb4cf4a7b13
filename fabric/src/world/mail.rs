//! Mail: the packets one shard hands another between windows (for the
//! ports whose far end the other runs), and how a shard takes them in
//! (on the lines, or ahead of the queues with the keys their arrivals
//! would have had on one thread). Threads pass it as it is; ranks write
//! it as bytes (`ranks::wire`).

use super::*;
use crate::queue::pack;
use events::CODE_ARRIVE;
use port_state::InFlight;

/// Packets handed from one shard to another, with the ports they cross.
#[derive(Debug, Default)]
pub(super) struct Mail {
    /// For the ports' lines, in the order they were given.
    pub(super) line: Vec<(PortId, InFlight)>,
    /// Sent ahead of the ports' queues, with the keys of their arrivals.
    pub(super) ahead: Vec<(PortId, u128, InFlight)>,
}

impl Mail {
    /// Bytes of room its lists hold.
    pub(super) fn room(&self) -> usize {
        self.line.capacity() * std::mem::size_of::<(PortId, InFlight)>()
            + self.ahead.capacity() * std::mem::size_of::<(PortId, u128, InFlight)>()
    }

    /// The mail, emptied, its room kept if it is at most `most` bytes.
    pub(super) fn spare(mut self, most: usize) -> Mail {
        if self.room() > most {
            return Mail::default();
        }
        self.line.clear();
        self.ahead.clear();
        self
    }

    /// The earliest arrival among the packets.
    pub(super) fn first_arrival(&self) -> Option<Instant> {
        let line = self.line.iter().map(|(_, f)| f.arrive);
        line.chain(self.ahead.iter().map(|(_, _, f)| f.arrive))
            .min()
    }
}

impl World {
    /// Puts the packets other shards gave to this shard's lines on them,
    /// filing the arrival of any that heads its line.
    /// Hands back the emptied lists, one per shard.
    pub(super) fn take_mail(&mut self, mut inbox: Vec<Mail>) -> Vec<Mail> {
        let shards = self.shard.as_ref().map_or(0, |s| s.outbox.len());
        inbox.resize_with(shards, Mail::default);
        for (port, f) in inbox.iter_mut().flat_map(|m| m.line.drain(..)) {
            self.take_line(port, f);
        }
        for (port, key, f) in inbox.iter_mut().flat_map(|m| m.ahead.drain(..)) {
            self.take_ahead(port, key, f);
        }
        inbox
    }

    /// Takes a packet another shard gave to `port`: on its line, or ahead
    /// of its queue with `key`.
    pub(super) fn take(&mut self, port: PortId, key: Option<u128>, f: InFlight) {
        match key {
            None => self.take_line(port, f),
            Some(k) => self.take_ahead(port, k, f),
        }
    }

    /// Puts a packet another shard gave to `port`'s line on it, filing
    /// its arrival if it heads the line.
    pub(super) fn take_line(&mut self, port: PortId, f: InFlight) {
        let arrive = f.arrive;
        let st = &mut self.ports[port as usize];
        st.flight.push_back(f);
        if st.flight.len() == 1 {
            let slot = self.code(EvKind::Arrive(port));
            debug_assert_eq!(slot & !events::CODE_INDEX, CODE_ARRIVE);
            self.queue.insert_key(pack(arrive, 0, slot));
        }
    }

    /// Puts a packet another shard sent ahead of `port`'s queue in its
    /// ahead line, with the key its sender gave its arrival.
    pub(super) fn take_ahead(&mut self, port: PortId, key: u128, f: InFlight) {
        self.file_ahead(port, f);
        self.queue.insert_key(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An emptied outbox keeps its lists' room for the next window only
    /// up to a bound (80 bytes a packet on a line, 96 ahead of a queue).
    #[test]
    fn an_outbox_keeps_its_room_only_up_to_the_bound() {
        let mail = || Mail {
            line: Vec::with_capacity(1000),
            ahead: Vec::with_capacity(10),
        };
        assert_eq!(mail().room(), 1000 * 80 + 10 * 96);
        let kept = mail().spare(80_960);
        assert!(kept.line.capacity() >= 1000 && kept.ahead.capacity() >= 10);
        let dropped = mail().spare(80_959);
        assert_eq!((dropped.line.capacity(), dropped.ahead.capacity()), (0, 0));
    }
}
