//! Key-value stores for the rendezvous (c10d's `Store`): [`Store`] is the interface,
//! [`HashStore`] the in-process one (the groups of [`ProcessGroup::from_devices`](super::ProcessGroup::from_devices)),
//! [`TcpStore`](super::TcpStore) the one over TCP; both keep their keys in one [`Table`].
//!
//! As in c10d: values are bytes, `add` keeps its counter as decimal text (so `get` of a counter
//! reads `b"3"`), `get` and `wait` block until the keys exist or the timeout passes
//! ([`Error::DistributedTimeout`] naming the missing keys).

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A key-value store shared by the ranks of a group (`torch.distributed.Store`).
pub trait Store: Send + Sync + fmt::Debug {
    /// Sets `key` to `value`, waking every rank waiting for it.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// The value of `key`, waiting up to [`Store::timeout`] for it to be set.
    fn get(&self, key: &str) -> Result<Vec<u8>>;
    /// Adds `amount` to the counter `key` (0 when unset) and returns the new value.
    fn add(&self, key: &str, amount: i64) -> Result<i64>;
    /// Waits until every key of `keys` is set, at most `timeout`.
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()>;
    /// Whether every key of `keys` is set now.
    fn check(&self, keys: &[&str]) -> Result<bool>;
    /// Removes `key`; whether it was set.
    fn delete_key(&self, key: &str) -> Result<bool>;
    /// How many keys are set.
    fn num_keys(&self) -> Result<usize>;
    /// How long [`Store::get`] waits.
    fn timeout(&self) -> Duration;
}

/// The keys of a store and the condition its waiters sleep on (the engine of both stores).
#[derive(Debug, Default)]
pub(crate) struct Table {
    keys: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
}

/// How often a served wait asks whether its client is still there.
pub(crate) const ABANDON_TICK: Duration = Duration::from_millis(250);

/// What a wait found when its time ran out: the keys still missing.
pub(crate) struct Missing(pub Vec<String>);

impl Table {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<u8>>> {
        self.keys.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set(&self, key: &str, value: &[u8]) {
        self.lock().insert(key.to_owned(), value.to_vec());
        self.changed.notify_all();
    }

    /// Adds to the counter; a value that is not decimal text counts as 0 (c10d overwrites too).
    pub fn add(&self, key: &str, amount: i64) -> i64 {
        let mut keys = self.lock();
        let old = keys.get(key).and_then(|v| std::str::from_utf8(v).ok()?.parse::<i64>().ok()).unwrap_or(0);
        let new = old.wrapping_add(amount);
        keys.insert(key.to_owned(), new.to_string().into_bytes());
        drop(keys);
        self.changed.notify_all();
        new
    }

    /// Waits for `keys`; the value of the first when they are all set. A `timeout` too long for
    /// the clock (`Duration::MAX`) waits without a deadline.
    pub fn wait(&self, keys: &[&str], timeout: Duration) -> std::result::Result<Option<Vec<u8>>, Missing> {
        self.wait_until(keys, super::tcp_wire::deadline_after(timeout), None)
    }

    /// Waits for `keys` until `deadline` (`None`: none). With `abandoned`, wakes every
    /// [`ABANDON_TICK`] to ask it whether the waiter is gone (a store client that hung up), and
    /// gives up (the keys still missing) when it is: so no thread waits forever for no one.
    pub fn wait_until(
        &self,
        keys: &[&str],
        deadline: Option<Instant>,
        abandoned: Option<&dyn Fn() -> bool>,
    ) -> std::result::Result<Option<Vec<u8>>, Missing> {
        let mut map = self.lock();
        loop {
            let missing: Vec<String> = keys.iter().filter(|k| !map.contains_key(**k)).map(|k| k.to_string()).collect();
            if missing.is_empty() {
                return Ok(keys.first().and_then(|k| map.get(*k).cloned()));
            }
            let now = Instant::now();
            let left = match deadline {
                Some(d) if now >= d => return Err(Missing(missing)),
                Some(d) => d - now,
                None => Duration::MAX,
            };
            let Some(abandoned) = abandoned else {
                map = match deadline {
                    Some(_) => self.changed.wait_timeout(map, left).unwrap_or_else(|e| e.into_inner()).0,
                    None => self.changed.wait(map).unwrap_or_else(|e| e.into_inner()),
                };
                continue;
            };
            map = self.changed.wait_timeout(map, left.min(ABANDON_TICK)).unwrap_or_else(|e| e.into_inner()).0;
            drop(map);
            if abandoned() {
                return Err(Missing(missing));
            }
            map = self.lock();
        }
    }

    pub fn check(&self, keys: &[&str]) -> bool {
        let map = self.lock();
        keys.iter().all(|k| map.contains_key(*k))
    }

    pub fn delete(&self, key: &str) -> bool {
        self.lock().remove(key).is_some()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The timeout error of a wait that found `missing` keys still unset.
pub(crate) fn timed_out(missing: &[String], timeout: Duration) -> Error {
    Error::DistributedTimeout {
        what: format!("store key(s) {missing:?} to be set"),
        timeout_ms: super::tcp_wire::millis(timeout),
    }
}

/// A store in this process's memory (`torch.distributed.HashStore`): for groups whose ranks are
/// threads of one process.
#[derive(Debug)]
pub struct HashStore {
    table: Table,
    timeout: Duration,
}

impl HashStore {
    /// An empty store whose `get` waits at most `timeout`.
    pub fn new(timeout: Duration) -> HashStore {
        HashStore { table: Table::default(), timeout }
    }
}

impl Store for HashStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.table.set(key, value);
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        match self.table.wait(&[key], self.timeout) {
            Ok(v) => Ok(v.unwrap_or_default()),
            Err(Missing(m)) => Err(timed_out(&m, self.timeout)),
        }
    }

    fn add(&self, key: &str, amount: i64) -> Result<i64> {
        Ok(self.table.add(key, amount))
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        self.table.wait(keys, timeout).map(|_| ()).map_err(|Missing(m)| timed_out(&m, timeout))
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        Ok(self.table.check(keys))
    }

    fn delete_key(&self, key: &str) -> Result<bool> {
        Ok(self.table.delete(key))
    }

    fn num_keys(&self) -> Result<usize> {
        Ok(self.table.len())
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn get_waits_for_a_set_from_another_thread() {
        let store = Arc::new(HashStore::new(Duration::from_secs(10)));
        let setter = store.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            setter.set("k", b"v").unwrap();
        });
        assert_eq!(store.get("k").unwrap(), b"v");
        t.join().unwrap();
    }

    #[test]
    fn the_longest_timeouts_wait_without_panicking() {
        // `Instant::now() + Duration::MAX` would panic: such a wait has no deadline instead.
        let store = Arc::new(HashStore::new(Duration::MAX));
        let setter = store.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            setter.set("late", b"x").unwrap();
        });
        store.wait(&["late"], Duration::MAX).unwrap();
        assert_eq!(store.get("late").unwrap(), b"x");
        t.join().unwrap();
        // A served wait gives up once its waiter is gone.
        let table = Table::default();
        let asked = std::sync::atomic::AtomicUsize::new(0);
        let gone = || asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= 1;
        match table.wait_until(&["never"], None, Some(&gone)) {
            Err(Missing(keys)) => assert_eq!(keys, ["never"]),
            Ok(v) => panic!("an abandoned wait returned {v:?}"),
        }
    }

    #[test]
    fn counters_are_decimal_text_and_waits_time_out_naming_keys() {
        let store = HashStore::new(Duration::from_millis(30));
        assert_eq!(store.add("n", 2).unwrap(), 2);
        assert_eq!(store.add("n", -5).unwrap(), -3);
        assert_eq!(store.get("n").unwrap(), b"-3");
        match store.wait(&["n", "absent"], Duration::from_millis(10)) {
            Err(Error::DistributedTimeout { what, .. }) => assert!(what.contains("absent") && !what.contains("\"n\"")),
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(matches!(store.get("absent"), Err(Error::DistributedTimeout { .. })));
        assert!(store.check(&["n"]).unwrap() && !store.check(&["n", "absent"]).unwrap());
        assert!(store.delete_key("n").unwrap() && !store.delete_key("n").unwrap());
        assert_eq!(store.num_keys().unwrap(), 0);
    }
}
