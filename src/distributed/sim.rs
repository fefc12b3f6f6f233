//! The simulated backend: a test double with the real data movement and NCCL's stream semantics,
//! for machines with no GPU. A collective is a host job on the group's communication stream (the
//! driver's [`HostJob`]): when the stream reaches it, the job reads this rank's bytes from the
//! device, puts them in the group's store under the collective's sequence number, waits (at
//! most the group's timeout) for every rank's contribution, combines them on the host and writes
//! the result to the device. The same code runs for ranks that are threads of one process (a
//! [`HashStore`](super::HashStore)) and for ranks that are processes (a
//! [`TcpStore`](super::TcpStore)). Each contribution carries the collective's description, so
//! ranks that disagree fail with [`Error::CollectiveMismatch`] instead of mixing data.
//!
//! Point-to-point messages are keys per (sender, receiver, message number), read and deleted
//! by the receiver. Keys of a collective are deleted by the last rank to read them.

use super::agree::{agree, Exchange};
use super::reduce::reduce;
use super::store::Store;
use crate::driver::comm::{offsets, Collective, DeviceBytes, HostJob};
use crate::driver::DevicePtr;
use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// What a rank's jobs need: where the group's keys live and who this rank is.
#[derive(Debug, Clone)]
pub(crate) struct SimRank {
    pub store: Arc<dyn Store>,
    /// The group's key prefix.
    pub tag: String,
    pub rank: usize,
    pub world: usize,
    pub timeout: Duration,
}

/// One collective as a job: `seq` is its number in the group (or, for a point-to-point
/// message, the message's number between the pair), `fingerprint` what every rank must agree
/// on; `done` receives the outcome.
pub(crate) fn job(
    me: SimRank,
    seq: u64,
    op: Collective,
    fingerprint: String,
    done: impl FnOnce(Result<()>) + Send + 'static,
) -> HostJob {
    Box::new(move |mem: &dyn DeviceBytes| done(run(&me, seq, &op, &fingerprint, mem)))
}

fn read(mem: &dyn DeviceBytes, at: DevicePtr, len: usize) -> Result<Vec<u8>> {
    let mut v = vec![0u8; len];
    if len > 0 {
        mem.read(at, &mut v)?;
    }
    Ok(v)
}

fn write(mem: &dyn DeviceBytes, at: DevicePtr, data: &[u8]) -> Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    mem.write(at, data)
}

fn run(me: &SimRank, seq: u64, op: &Collective, fingerprint: &str, mem: &dyn DeviceBytes) -> Result<()> {
    match *op {
        Collective::AllReduce { send, recv, count, dtype, op } => {
            let parts = exchange(me, seq, fingerprint, read(mem, send, count * dtype.size())?)?;
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            write(mem, recv, &reduce(dtype, op, &refs)?)
        }
        Collective::Broadcast { send, recv, count, dtype, root } => {
            let mine = if me.rank == root { read(mem, send, count * dtype.size())? } else { Vec::new() };
            let mut parts = exchange(me, seq, fingerprint, mine)?;
            write(mem, recv, &parts.swap_remove(root))
        }
        Collective::AllGather { send, recv, count, dtype } => {
            let parts = exchange(me, seq, fingerprint, read(mem, send, count * dtype.size())?)?;
            write(mem, recv, &parts.concat())
        }
        Collective::ReduceScatter { send, recv, count, dtype, op } => {
            let chunk = count * dtype.size();
            let parts = exchange(me, seq, fingerprint, read(mem, send, chunk * me.world)?)?;
            let mine: Vec<&[u8]> = parts.iter().map(|p| &p[me.rank * chunk..][..chunk]).collect();
            write(mem, recv, &reduce(dtype, op, &mine)?)
        }
        Collective::AllToAll { send, recv, dtype, ref send_counts, .. } => {
            let total: usize = send_counts.iter().sum();
            let parts = exchange_described(me, seq, fingerprint, read(mem, send, total * dtype.size())?)?;
            write(mem, recv, &all_to_all_part(me.rank, fingerprint, &parts, dtype.size())?)
        }
        Collective::Send { buf, count, dtype, peer } => {
            let key = message_key(me, me.rank, peer, seq);
            me.store.set(&key, &framed(fingerprint, &read(mem, buf, count * dtype.size())?))
        }
        Collective::Recv { buf, count, dtype, peer } => {
            let key = message_key(me, peer, me.rank, seq);
            wait_ranks(me, std::slice::from_ref(&key), &[peer], &format!("the message #{seq} from rank {peer}"))?;
            let value = me.store.get(&key)?;
            me.store.delete_key(&key)?;
            let (theirs, data) = unframe(&value)?;
            if data.len() != count * dtype.size() || !same_message(theirs, fingerprint) {
                return Err(Error::CollectiveMismatch {
                    seq,
                    rank: me.rank,
                    peer,
                    ours: fingerprint.to_owned(),
                    theirs: theirs.to_owned(),
                });
            }
            write(mem, buf, data)
        }
    }
}

/// What rank `rank` receives in an all-to-all: from each rank `s` in rank order, the part of
/// `s`'s whole input that `s` sends to `rank`. `parts` are the ranks' descriptions and inputs,
/// which agree (checked by the exchange), so each describes the counts its input is cut by.
fn all_to_all_part(rank: usize, fingerprint: &str, parts: &[(String, Vec<u8>)], size: usize) -> Result<Vec<u8>> {
    let broken = || Error::Internal { op: "all_to_all_single", reason: "an exchange that does not decode".into() };
    let mine = Exchange::decode(fingerprint).ok_or_else(broken)?;
    let mut out = Vec::with_capacity(mine.recv.iter().sum::<usize>() * size);
    for (s, (theirs, data)) in parts.iter().enumerate() {
        let theirs = Exchange::decode(theirs).ok_or_else(broken)?;
        let start = offsets(&theirs.send)[rank] * size;
        let len = mine.recv[s] * size;
        out.extend_from_slice(data.get(start..start + len).ok_or_else(broken)?);
    }
    Ok(out)
}

/// A send and a receive match when they move the same dtype and count (the fingerprints differ
/// in their op name and peer).
fn same_message(send: &str, recv: &str) -> bool {
    let payload = |s: &str| s.split_once('(').map(|(_, rest)| rest.split(", peer").next().unwrap_or("").to_owned());
    payload(send) == payload(recv)
}

fn message_key(me: &SimRank, from: usize, to: usize, n: u64) -> String {
    format!("{}/p2p/{from}-{to}/{n}", me.tag)
}

/// `fingerprint` and `data` as one value: the fingerprint's length (`u32` little-endian), it, the data.
fn framed(fingerprint: &str, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + fingerprint.len() + data.len());
    v.extend_from_slice(&(fingerprint.len() as u32).to_le_bytes());
    v.extend_from_slice(fingerprint.as_bytes());
    v.extend_from_slice(data);
    v
}

fn unframe(value: &[u8]) -> Result<(&str, &[u8])> {
    let bad = || Error::Store { op: "get", reason: "a malformed collective contribution".into() };
    let n = u32::from_le_bytes(value.get(..4).ok_or_else(bad)?.try_into().map_err(|_| bad())?) as usize;
    let fp = std::str::from_utf8(value.get(4..4 + n).ok_or_else(bad)?).map_err(|_| bad())?;
    Ok((fp, &value[4 + n..]))
}

/// Waits for `keys` (those of `ranks`, in the same order); a timeout names the ranks missing.
pub(crate) fn wait_ranks(me: &SimRank, keys: &[String], ranks: &[usize], what: &str) -> Result<()> {
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    match me.store.wait(&refs, me.timeout) {
        Err(Error::DistributedTimeout { timeout_ms, .. }) => {
            let mut missing = Vec::new();
            for (k, r) in keys.iter().zip(ranks) {
                if !me.store.check(&[k])? {
                    missing.push(*r);
                }
            }
            Err(Error::DistributedTimeout {
                what: format!("{what}: rank(s) {missing:?} of {} did not arrive", me.world),
                timeout_ms,
            })
        }
        other => other,
    }
}

/// Every rank's `mine` for collective `seq`, in rank order, once all agree on `fingerprint`.
fn exchange(me: &SimRank, seq: u64, fingerprint: &str, mine: Vec<u8>) -> Result<Vec<Vec<u8>>> {
    Ok(exchange_described(me, seq, fingerprint, mine)?.into_iter().map(|(_, data)| data).collect())
}

/// [`exchange`], each contribution with its rank's description of the call.
fn exchange_described(me: &SimRank, seq: u64, fingerprint: &str, mine: Vec<u8>) -> Result<Vec<(String, Vec<u8>)>> {
    let keys: Vec<String> = (0..me.world).map(|r| format!("{}/sim/{seq}/{r}", me.tag)).collect();
    me.store.set(&keys[me.rank], &framed(fingerprint, &mine))?;
    let ranks: Vec<usize> = (0..me.world).collect();
    wait_ranks(me, &keys, &ranks, &format!("collective #{seq} ({fingerprint})"))?;
    let mut parts = Vec::with_capacity(me.world);
    for key in &keys {
        let value = me.store.get(key)?;
        let (theirs, data) = unframe(&value)?;
        parts.push((theirs.to_owned(), data.to_vec()));
    }
    // The last rank to read the contributions removes them.
    if me.store.add(&format!("{}/sim/{seq}/read", me.tag), 1)? == me.world as i64 {
        for key in &keys {
            me.store.delete_key(key)?;
        }
        me.store.delete_key(&format!("{}/sim/{seq}/read", me.tag))?;
    }
    let described: Vec<&str> = parts.iter().map(|(f, _)| f.as_str()).collect();
    agree(seq, me.rank, &described)?;
    Ok(parts)
}
