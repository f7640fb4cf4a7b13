//! VIA-style endpoints (VIs) and completion queues over one [`Nic`].
//!
//! A VI is an endpoint number with a send work queue and a receive work
//! queue; each queue reports to a completion queue (CQ), and several VIs
//! may share one CQ (VIA's "completion queue" model, which MVICH uses to
//! poll every connection in one place). Posting rings the NIC's doorbell
//! ([`Nic::post`] charges the doorbell and descriptor fetch of the cost
//! model, and keeps the descriptor ring with its host overflow ring).
//!
//! The NIC raises one event stream; [`Via::dispatch`] routes each
//! completion to the CQ of the VI whose queue held the request, and hands
//! back events that are not completions (control messages, credits,
//! arrivals) for the caller.

use std::collections::{BTreeMap, VecDeque};

use udrma_nic::{Event, MrKey, Nic, PostError, WcError, WorkRequest, WrId, WrKind};
use udrma_proto::time::Instant;

/// A completion queue id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct CqId(pub u32);

/// One completion on a CQ.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Completion {
    /// The VI (endpoint number) whose queue held the request.
    pub vi: u16,
    /// The request.
    pub wr: WrId,
    /// Its kind (`Recv` for the receive queue).
    pub kind: WrKind,
    /// Bytes (for a receive: bytes received).
    pub len: u64,
    /// Outcome.
    pub result: Result<(), WcError>,
    /// When the NIC completed it.
    pub at: Instant,
}

#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Vi {
    send_cq: u32,
    recv_cq: u32,
    /// Requests on the send queue, not yet completed.
    send_wq: usize,
    /// Receive descriptors posted, not yet completed.
    recv_wq: usize,
}

/// Why a VIA call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub enum ViaError {
    /// The VI does not exist.
    #[error("no VI {0}")]
    NoSuchVi(u16),
    /// The CQ does not exist.
    #[error("no completion queue {0}")]
    NoSuchCq(u32),
    /// The VI number is taken.
    #[error("VI {0} exists already")]
    ViExists(u16),
    /// The NIC refused the post.
    #[error(transparent)]
    Post(#[from] PostError),
}

/// The VIs and CQs of one host.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Via {
    vis: BTreeMap<u16, Vi>,
    cqs: Vec<VecDeque<Completion>>,
    /// Which VI's queue each outstanding request is on.
    owner: BTreeMap<WrId, u16>,
    cq_peak: usize,
}

impl Via {
    /// No VIs, no CQs.
    pub fn new() -> Via {
        Via::default()
    }

    /// Creates a completion queue.
    pub fn create_cq(&mut self) -> CqId {
        self.cqs.push(VecDeque::new());
        CqId(self.cqs.len() as u32 - 1)
    }

    /// Creates VI `ep` reporting sends to `send_cq` and receives to
    /// `recv_cq` (which may be the same CQ, and may be shared with other
    /// VIs).
    pub fn create_vi(&mut self, ep: u16, send_cq: CqId, recv_cq: CqId) -> Result<(), ViaError> {
        for cq in [send_cq, recv_cq] {
            if cq.0 as usize >= self.cqs.len() {
                return Err(ViaError::NoSuchCq(cq.0));
            }
        }
        if self.vis.contains_key(&ep) {
            return Err(ViaError::ViExists(ep));
        }
        self.vis.insert(
            ep,
            Vi {
                send_cq: send_cq.0,
                recv_cq: recv_cq.0,
                ..Vi::default()
            },
        );
        Ok(())
    }

    /// Whether VI `ep` exists.
    pub fn has_vi(&self, ep: u16) -> bool {
        self.vis.contains_key(&ep)
    }

    /// Posts `wr` on VI `ep`'s send queue (the request's source endpoint
    /// becomes `ep`) and rings the doorbell.
    pub fn post_send(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        ep: u16,
        mut wr: WorkRequest,
    ) -> Result<WrId, ViaError> {
        let vi = self.vis.get_mut(&ep).ok_or(ViaError::NoSuchVi(ep))?;
        wr.src_ep = ep;
        let id = nic.post(now, wr)?;
        vi.send_wq += 1;
        self.owner.insert(id, ep);
        Ok(id)
    }

    /// Posts a receive descriptor on VI `ep`.
    pub fn post_recv(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        ep: u16,
        mr: MrKey,
        addr: u64,
        len: u64,
    ) -> Result<WrId, ViaError> {
        let vi = self.vis.get_mut(&ep).ok_or(ViaError::NoSuchVi(ep))?;
        let id = nic.post_recv(now, ep, mr, addr, len)?;
        vi.recv_wq += 1;
        self.owner.insert(id, ep);
        Ok(id)
    }

    /// Routes one NIC event: a completion of a request posted through a
    /// VI goes to its CQ (and `None` comes back); anything else comes back
    /// to the caller.
    pub fn dispatch(&mut self, e: Event) -> Option<Event> {
        let Event::Completed {
            wr,
            kind,
            len,
            result,
            at,
        } = e
        else {
            return Some(e);
        };
        let Some(ep) = self.owner.remove(&wr) else {
            return Some(Event::Completed {
                wr,
                kind,
                len,
                result,
                at,
            });
        };
        let vi = self.vis.get_mut(&ep).expect("owner names a VI");
        let cq = if kind == WrKind::Recv {
            vi.recv_wq -= 1;
            vi.recv_cq
        } else {
            vi.send_wq -= 1;
            vi.send_cq
        };
        let q = &mut self.cqs[cq as usize];
        q.push_back(Completion {
            vi: ep,
            wr,
            kind,
            len,
            result,
            at,
        });
        self.cq_peak = self.cq_peak.max(q.len());
        None
    }

    /// Takes the oldest completion of CQ `cq`.
    pub fn poll_cq(&mut self, cq: CqId) -> Option<Completion> {
        self.cqs.get_mut(cq.0 as usize)?.pop_front()
    }

    /// Requests outstanding on VI `ep`: (send queue, receive queue).
    pub fn queue_depths(&self, ep: u16) -> Option<(usize, usize)> {
        self.vis.get(&ep).map(|v| (v.send_wq, v.recv_wq))
    }

    /// The most completions any CQ held at once.
    pub fn cq_peak(&self) -> usize {
        self.cq_peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use udrma_nic::pair::Pair;
    use udrma_nic::{Access, NicConfig};
    use udrma_proto::NodeAddr;

    #[test]
    fn two_vis_share_one_cq_and_each_completion_names_its_vi() {
        let mut pair = Pair::new(NicConfig::default());
        let src = pair.nics[0].register(0x1000, 4096, Access::ALL);
        let dst = pair.nics[1].register(0x9000, 4096, Access::ALL);
        let (mut a, mut b) = (Via::new(), Via::new());
        let cq = a.create_cq();
        a.create_vi(7, cq, cq).unwrap();
        a.create_vi(8, cq, cq).unwrap();
        assert_eq!(a.create_vi(8, cq, cq), Err(ViaError::ViExists(8)));
        assert_eq!(a.create_vi(9, CqId(5), cq), Err(ViaError::NoSuchCq(5)));
        let bcq = b.create_cq();
        b.create_vi(7, bcq, bcq).unwrap();
        let now = pair.now;
        let r = b
            .post_recv(now, &mut pair.nics[1], 7, dst, 0x9000, 1024)
            .unwrap();
        let w1 = a
            .post_send(
                now,
                &mut pair.nics[0],
                7,
                WorkRequest::send(NodeAddr(1), src, 0x1000, 100).endpoints(0, 7),
            )
            .unwrap();
        let w2 = a
            .post_send(
                now,
                &mut pair.nics[0],
                8,
                WorkRequest::write(NodeAddr(1), src, 0x1000, 64, dst.0, 0x9400),
            )
            .unwrap();
        assert_eq!(a.queue_depths(7), Some((1, 0)));
        pair.run();
        for (i, via) in [&mut a, &mut b].into_iter().enumerate() {
            for e in pair.events_of(i).cloned().collect::<Vec<_>>() {
                via.dispatch(e);
            }
        }
        let got: Vec<(u16, WrId)> = std::iter::from_fn(|| a.poll_cq(cq))
            .map(|c| (c.vi, c.wr))
            .collect();
        assert_eq!(got.len(), 2);
        assert!(got.contains(&(7, w1)) && got.contains(&(8, w2)));
        let rc = b.poll_cq(bcq).unwrap();
        assert_eq!((rc.vi, rc.wr, rc.kind, rc.len), (7, r, WrKind::Recv, 100));
        assert_eq!(a.queue_depths(7), Some((0, 0)));
    }
}
