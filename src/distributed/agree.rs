//! What the ranks of a collective must agree on, and the check every rank runs over all the
//! ranks' descriptions ("fingerprints") of one call: before the call with `check_collectives`
//! (through the store), and inside the simulated backend's collectives.
//!
//! Most collectives agree when every rank describes its call identically. An
//! `all_to_all_single` with split sizes differs by rank: each rank states the elements it sends
//! to and receives from every rank ([`Exchange`]), and the ranks agree when the common part is the
//! same and every pair matches (what rank `s` sends to rank `d` is what `d` receives from `s`).
//! Every rank reads every rank's description and checks all the pairs in the same order, so a
//! disagreement is the same error on every rank.

use crate::error::{Error, Result};

/// One rank's `all_to_all_single`: the part every rank states alike (op and dtype) and its
/// element counts per peer, in rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exchange {
    /// `all_to_all_single(dtype=f32`: the same on every rank.
    pub common: String,
    /// Elements sent to each rank.
    pub send: Vec<usize>,
    /// Elements received from each rank.
    pub recv: Vec<usize>,
}

fn list(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

fn parse_list(s: &str) -> Option<Vec<usize>> {
    if s.is_empty() {
        return Some(Vec::new());
    }
    s.split(',').map(|x| x.parse().ok()).collect()
}

impl Exchange {
    /// The description other ranks read: `all_to_all_single(dtype=f32; send=6,0; recv=3,3)`.
    pub fn fingerprint(&self) -> String {
        format!("{}; send={}; recv={})", self.common, list(&self.send), list(&self.recv))
    }

    /// The exchange a [`fingerprint`](Exchange::fingerprint) describes; `None` for any other call.
    pub fn decode(fingerprint: &str) -> Option<Exchange> {
        let (common, rest) = fingerprint.split_once("; send=")?;
        let (send, recv) = rest.strip_suffix(')')?.split_once("; recv=")?;
        Some(Exchange { common: common.to_owned(), send: parse_list(send)?, recv: parse_list(recv)? })
    }
}

/// Checks that the ranks' descriptions `fingerprints` (in rank order) of collective `seq` agree,
/// as rank `rank` sees them: [`Error::CollectiveMismatch`] naming the first rank whose call differs
/// from this rank's, or [`Error::SplitMismatch`] naming the first pair of ranks whose exchanges do
/// not match.
pub(crate) fn agree(seq: u64, rank: usize, fingerprints: &[&str]) -> Result<()> {
    let world = fingerprints.len();
    let ours = fingerprints[rank];
    let mine = Exchange::decode(ours);
    let fits = |e: &Exchange| e.send.len() == world && e.recv.len() == world;
    for (peer, theirs) in fingerprints.iter().enumerate() {
        let compatible = *theirs == ours
            || match (&mine, Exchange::decode(theirs)) {
                (Some(a), Some(b)) => a.common == b.common && fits(a) && fits(&b),
                _ => false,
            };
        if !compatible {
            return Err(Error::CollectiveMismatch {
                seq,
                rank,
                peer,
                ours: ours.to_owned(),
                theirs: (*theirs).to_owned(),
            });
        }
    }
    if mine.is_none() {
        return Ok(());
    }
    // Every description is an exchange of this group's size (checked above): pair them up.
    let calls: Vec<Exchange> = fingerprints.iter().filter_map(|f| Exchange::decode(f)).collect();
    let op = "all_to_all_single";
    for (src, call) in calls.iter().enumerate() {
        for (dst, receiver) in calls.iter().enumerate() {
            let (sent, expected) = (call.send[dst], receiver.recv[src]);
            if sent != expected {
                return Err(Error::SplitMismatch { op, seq, rank, src, dst, sent, expected });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex(send: &[usize], recv: &[usize]) -> String {
        Exchange { common: "all_to_all_single(dtype=f32".into(), send: send.to_vec(), recv: recv.to_vec() }
            .fingerprint()
    }

    #[test]
    fn exchanges_round_trip_and_other_calls_are_not_exchanges() {
        let f = ex(&[6, 0, 3], &[3, 3, 0]);
        assert_eq!(f, "all_to_all_single(dtype=f32; send=6,0,3; recv=3,3,0)");
        let e = Exchange::decode(&f).unwrap();
        assert_eq!((e.send, e.recv), (vec![6, 0, 3], vec![3, 3, 0]));
        assert_eq!(Exchange::decode("all_reduce(dtype=f32, numel=4, op=sum)"), None);
    }

    #[test]
    fn identical_calls_and_paired_exchanges_agree() {
        assert!(agree(1, 0, &["x(1)", "x(1)"]).is_ok());
        // Rank 0 sends 2 to itself and 5 to rank 1; rank 1 sends 1 to rank 0 and 0 to itself.
        let (a, b) = (ex(&[2, 5], &[2, 1]), ex(&[1, 0], &[5, 0]));
        for rank in 0..2 {
            assert!(agree(3, rank, &[&a, &b]).is_ok());
        }
    }

    #[test]
    fn a_different_call_names_the_first_rank_that_differs() {
        let r = agree(4, 1, &["x(1)", "x(1)", "y(1)"]);
        assert!(matches!(r, Err(Error::CollectiveMismatch { seq: 4, rank: 1, peer: 2, .. })), "{r:?}");
        // An exchange of another dtype, or of another group size, is another call.
        let other = ex(&[1, 1], &[1, 1]).replace("f32", "f64");
        assert!(matches!(agree(1, 0, &[&ex(&[1, 1], &[1, 1]), &other]), Err(Error::CollectiveMismatch { .. })));
        assert!(matches!(
            agree(1, 0, &[&ex(&[1, 1], &[1, 1]), &ex(&[2], &[2])]),
            Err(Error::CollectiveMismatch { .. })
        ));
    }

    #[test]
    fn unpaired_splits_are_the_same_pair_on_every_rank() {
        // Rank 1 expects 4 elements from rank 0, which sends it 5; rank 2 is not involved.
        let calls = [
            ex(&[1, 5, 0], &[1, 1, 0]),
            ex(&[1, 0, 0], &[5, 0, 0]).replace("recv=5", "recv=4"),
            ex(&[0, 0, 0], &[0, 0, 0]),
        ];
        let refs: Vec<&str> = calls.iter().map(String::as_str).collect();
        for rank in 0..3 {
            match agree(7, rank, &refs) {
                Err(Error::SplitMismatch { seq: 7, rank: r, src: 0, dst: 1, sent: 5, expected: 4, .. }) => {
                    assert_eq!(r, rank)
                }
                other => panic!("rank {rank}: {other:?}"),
            }
        }
    }
}
