//! `init_process_group`'s rendezvous: torchrun's environment (`env://`) or an address
//! (`tcp://host:port`), a [`TcpStore`] served by rank 0, and a check that every rank of the world
//! arrived with the same world size before the backend joins. Every rank proves the job's secret to
//! the store: `CUDASEM_STORE_SECRET` (set by `cudasem run`), else — ranks that are threads of the
//! master's process — the secret the master made (see [`TcpStore`]).

use super::group::{Farewell, Parts, ProcessGroup};
use super::sim::{wait_ranks, SimRank};
use super::store::Store;
use super::tcp_store::TcpStore;
use super::InitOptions;
use crate::error::{Error, Result};
use std::sync::Arc;

/// torchrun's variables.
pub(crate) const RANK: &str = "RANK";
pub(crate) const WORLD_SIZE: &str = "WORLD_SIZE";
pub(crate) const LOCAL_RANK: &str = "LOCAL_RANK";
pub(crate) const MASTER_ADDR: &str = "MASTER_ADDR";
pub(crate) const MASTER_PORT: &str = "MASTER_PORT";

/// A variable of the environment, or `None` when unset.
fn var(key: &str) -> Result<Option<String>> {
    crate::config::env_var(key)
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T> {
    value.trim().parse().map_err(|_| Error::InvalidConfig {
        key: key.into(),
        value: value.into(),
        reason: "expected a non-negative integer".into(),
    })
}

/// `given`, else the variable `key` as a number; an error naming the variable when neither is set.
fn given_or_env<T: std::str::FromStr>(given: Option<T>, key: &str, method: &str) -> Result<T> {
    if let Some(v) = given {
        return Ok(v);
    }
    match var(key)? {
        Some(v) => number(key, &v),
        None => Err(Error::InvalidConfig {
            key: key.into(),
            value: String::new(),
            reason: format!("{method} needs {key} (set by `cudasem run` / torchrun, or pass it in InitOptions)"),
        }),
    }
}

/// Where the store is: `(host, port)` from `init_method`.
fn master(method: &str) -> Result<(String, u16)> {
    if method == "env://" {
        let host = var(MASTER_ADDR)?.unwrap_or_else(|| "127.0.0.1".into());
        let port = given_or_env::<u16>(None, MASTER_PORT, "env://")?;
        return Ok((host, port));
    }
    let bad =
        |reason: &str| Error::InvalidConfig { key: "init_method".into(), value: method.into(), reason: reason.into() };
    let rest = method.strip_prefix("tcp://").ok_or_else(|| bad("expected `env://` or `tcp://host:port`"))?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("expected `tcp://host:port`"))?;
    let port = port.parse::<u16>().map_err(|_| bad("the port is not a number below 65536"))?;
    Ok((host.trim_start_matches('[').trim_end_matches(']').to_owned(), port))
}

/// The device of this rank: `options.device`, else `LOCAL_RANK`, else the current device.
fn device(options: &InitOptions) -> Result<usize> {
    let wanted = match options.device {
        Some(d) => Some(d),
        None => var(LOCAL_RANK)?.map(|v| number::<usize>(LOCAL_RANK, &v)).transpose()?,
    };
    crate::runtime::resolve_device(wanted)
}

impl ProcessGroup {
    /// Joins a world through `options`' rendezvous, as [`init_process_group`](super::init_process_group)
    /// does, without making the group the process's default one (so that threads of one process
    /// can each be a rank of a world over TCP).
    pub fn new(options: &InitOptions) -> Result<ProcessGroup> {
        init(options)
    }
}

/// Rendezvous and join (see the module docs).
fn init(options: &InitOptions) -> Result<ProcessGroup> {
    let method = options.init_method.as_str();
    let rank: usize = given_or_env(options.rank, RANK, method)?;
    let world: usize = given_or_env(options.world_size, WORLD_SIZE, method)?;
    if world == 0 || rank >= world {
        return Err(Error::InvalidConfig {
            key: RANK.into(),
            value: rank.to_string(),
            reason: format!("the rank must be below the world size {world}"),
        });
    }
    let backend = options.resolved_backend()?;
    let device = device(options)?;
    // The rank serving the store leaves last, so that the others' last calls find it.
    let (store, farewell): (Arc<dyn Store>, Farewell) = match &options.store {
        Some(s) => (s.clone(), Farewell::Leave),
        None => {
            let (host, port) = master(method)?;
            let serves = if rank == 0 { Farewell::LeaveLast } else { Farewell::Leave };
            (Arc::new(TcpStore::new(&host, port, rank == 0, options.timeout)?), serves)
        }
    };
    let tag = "pg0".to_owned();
    rendezvous(&store, &tag, rank, world, options)?;
    ProcessGroup::join(Parts { rank, world, device, tag, store, farewell }, backend, options)
}

/// Every rank announces itself with its world size and waits for all the others.
fn rendezvous(store: &Arc<dyn Store>, tag: &str, rank: usize, world: usize, options: &InitOptions) -> Result<()> {
    let keys: Vec<String> = (0..world).map(|r| format!("{tag}/rendezvous/{r}")).collect();
    store.set(&keys[rank], world.to_string().as_bytes())?;
    let me = SimRank { store: store.clone(), tag: tag.into(), rank, world, timeout: options.timeout };
    let ranks: Vec<usize> = (0..world).collect();
    wait_ranks(&me, &keys, &ranks, "the rendezvous")?;
    for (r, key) in keys.iter().enumerate() {
        let theirs = store.get(key)?;
        if theirs != world.to_string().as_bytes() {
            return Err(Error::InvalidConfig {
                key: WORLD_SIZE.into(),
                value: world.to_string(),
                reason: format!("rank {r} joined with world size {}", String::from_utf8_lossy(&theirs)),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_init_methods_parse() {
        assert_eq!(master("tcp://10.0.0.2:29500").unwrap(), ("10.0.0.2".into(), 29500));
        assert_eq!(master("tcp://[::1]:1234").unwrap(), ("::1".into(), 1234));
        for bad in ["tcp://host", "tcp://host:99999", "file:///tmp/x", "udp://a:1"] {
            assert!(matches!(master(bad), Err(Error::InvalidConfig { .. })), "{bad}");
        }
    }
}
