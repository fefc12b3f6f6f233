//! [`TcpStore`]: c10d's `TCPStore` — one process (the master, rank 0) serves the keys over TCP,
//! every rank (the master too) is a client. Clients retry connecting until the timeout (the
//! master may start later), keep a few connections so that a rank's threads (the host and a
//! stream's collective) do not queue behind each other's waits, and report a closed server as
//! [`Error::RankFailed`] of rank 0.
//!
//! The wire format is this crate's own: a request is a command byte and length-prefixed fields
//! (`u32` little-endian lengths, `i64`/`u64` little-endian numbers); a reply is a status byte
//! (0 ok, 1 timed out with the missing keys) and the command's result. Waits are served by the
//! server (its thread per connection sleeps on the table), so a timeout is exact and needs no
//! second round trip.

use super::store::{timed_out, Missing, Store, Table};
use crate::error::{Error, Result};
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SET: u8 = 1;
const GET: u8 = 2;
const ADD: u8 = 3;
const WAIT: u8 = 4;
const CHECK: u8 = 5;
const DELETE: u8 = 6;
const NUM_KEYS: u8 = 7;

const OK: u8 = 0;
const TIMED_OUT: u8 = 1;

/// Extra time a client waits for a reply beyond the wait it asked the server for.
const REPLY_MARGIN: Duration = Duration::from_secs(5);

/// A TCP key-value store (`torch.distributed.TCPStore`).
#[derive(Debug)]
pub struct TcpStore {
    addr: SocketAddr,
    timeout: Duration,
    idle: Mutex<Vec<TcpStream>>,
    /// The server, when this store is the master's.
    server: Option<Server>,
}

impl TcpStore {
    /// A store at `host:port`. The master (`is_master`, rank 0) binds the port (0: any free port,
    /// see [`TcpStore::port`]) and serves it until dropped; the others connect, retrying until
    /// `timeout` ([`Error::DistributedTimeout`]). `timeout` also bounds [`Store::get`].
    pub fn new(host: &str, port: u16, is_master: bool, timeout: Duration) -> Result<TcpStore> {
        let server = if is_master { Some(Server::start(host, port)?) } else { None };
        let addr = match &server {
            Some(s) => s.addr,
            None => resolve(host, port)?,
        };
        let store = TcpStore { addr, timeout, idle: Mutex::new(Vec::new()), server };
        // Connect once now, so that a store that cannot be reached fails here, not at first use.
        let conn = store.connect()?;
        store.give_back(conn);
        Ok(store)
    }

    /// The port the store listens on (the bound one when the master asked for port 0).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Whether this store serves the keys (the master's).
    pub fn is_master(&self) -> bool {
        self.server.is_some()
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn connect(&self) -> Result<TcpStream> {
        let deadline = Instant::now() + self.timeout;
        let mut pause = Duration::from_millis(10);
        loop {
            match TcpStream::connect_timeout(&self.addr, pause.max(Duration::from_millis(100))) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) if Instant::now() + pause >= deadline => {
                    return Err(Error::DistributedTimeout {
                        what: format!("the store at {} to accept a connection (last error: {e})", self.addr),
                        timeout_ms: self.timeout.as_millis() as u64,
                    })
                }
                Err(_) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
            }
        }
    }

    fn give_back(&self, conn: TcpStream) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < 4 {
            idle.push(conn);
        }
    }

    /// Sends `request`, reads the reply with `read` (given up to `wait` plus a margin).
    fn call<T>(
        &self,
        op: &'static str,
        request: &[u8],
        wait: Duration,
        read: impl FnOnce(&mut dyn Read) -> std::io::Result<T>,
    ) -> Result<T> {
        let pooled = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match pooled {
            Some(c) => c,
            None => self.connect()?,
        };
        let gone = |e: std::io::Error| Error::RankFailed {
            rank: 0,
            reason: format!("the store's server at {} did not answer {op}: {e}", self.addr),
        };
        conn.set_read_timeout(Some(wait + REPLY_MARGIN)).map_err(gone)?;
        (&conn).write_all(request).map_err(gone)?;
        let value = read(&mut BufReader::new(&conn)).map_err(gone)?;
        // A reply read in full leaves the connection clean for the next call.
        self.give_back(conn);
        Ok(value)
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| Error::Store { op: "connect", reason: format!("cannot resolve {host}:{port}") })
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn put_keys(out: &mut Vec<u8>, keys: &[&str]) {
    out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
    for k in keys {
        put_bytes(out, k.as_bytes());
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

fn read_u8(r: &mut dyn Read) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}

fn read_u64(r: &mut dyn Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

fn read_bytes(r: &mut dyn Read) -> std::io::Result<Vec<u8>> {
    let mut n = [0u8; 4];
    r.read_exact(&mut n)?;
    let mut v = vec![0u8; u32::from_le_bytes(n) as usize];
    r.read_exact(&mut v)?;
    Ok(v)
}

fn read_keys(r: &mut dyn Read) -> std::io::Result<Vec<String>> {
    let mut n = [0u8; 4];
    r.read_exact(&mut n)?;
    (0..u32::from_le_bytes(n))
        .map(|_| String::from_utf8(read_bytes(r)?).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
        .collect()
}

/// A reply that is either the value or the keys a wait is still missing.
fn read_waited<T>(
    r: &mut dyn Read,
    value: impl FnOnce(&mut dyn Read) -> std::io::Result<T>,
) -> std::io::Result<std::result::Result<T, Vec<String>>> {
    match read_u8(r)? {
        OK => Ok(Ok(value(r)?)),
        _ => Ok(Err(read_keys(r)?)),
    }
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut req = vec![SET];
        put_bytes(&mut req, key.as_bytes());
        put_bytes(&mut req, value);
        self.call("set", &req, Duration::ZERO, |r| read_u8(r).map(|_| ()))
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let mut req = vec![GET];
        put_bytes(&mut req, key.as_bytes());
        req.extend_from_slice(&millis(self.timeout).to_le_bytes());
        self.call("get", &req, self.timeout, |r| read_waited(r, read_bytes))?
            .map_err(|missing| timed_out(&missing, self.timeout))
    }

    fn add(&self, key: &str, amount: i64) -> Result<i64> {
        let mut req = vec![ADD];
        put_bytes(&mut req, key.as_bytes());
        req.extend_from_slice(&amount.to_le_bytes());
        self.call("add", &req, Duration::ZERO, |r| read_u64(r).map(|v| v as i64))
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let mut req = vec![WAIT];
        put_keys(&mut req, keys);
        req.extend_from_slice(&millis(timeout).to_le_bytes());
        self.call("wait", &req, timeout, |r| read_waited(r, |_| Ok(())))?
            .map_err(|missing| timed_out(&missing, timeout))
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        let mut req = vec![CHECK];
        put_keys(&mut req, keys);
        self.call("check", &req, Duration::ZERO, |r| read_u8(r).map(|b| b == 1))
    }

    fn delete_key(&self, key: &str) -> Result<bool> {
        let mut req = vec![DELETE];
        put_bytes(&mut req, key.as_bytes());
        self.call("delete_key", &req, Duration::ZERO, |r| read_u8(r).map(|b| b == 1))
    }

    fn num_keys(&self) -> Result<usize> {
        self.call("num_keys", &[NUM_KEYS], Duration::ZERO, |r| read_u64(r).map(|v| v as usize))
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// The master's server: a listening thread and a thread per connection over one [`Table`].
#[derive(Debug)]
struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accepting: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(host: &str, port: u16) -> Result<Server> {
        let listener = TcpListener::bind((host, port)).map_err(|e| Error::Store {
            op: "listen",
            reason: format!("the master cannot listen on {host}:{port}: {e} (is MASTER_PORT taken?)"),
        })?;
        let addr = listener.local_addr().map_err(|e| Error::Store { op: "listen", reason: e.to_string() })?;
        let stop = Arc::new(AtomicBool::new(false));
        let table = Arc::new(Table::default());
        let stopping = stop.clone();
        let accepting = std::thread::Builder::new()
            .name("cudasem-tcpstore".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stopping.load(Ordering::Acquire) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let table = table.clone();
                    let _ = std::thread::Builder::new().name("cudasem-tcpstore-conn".into()).spawn(move || {
                        let _ = serve(&conn, &table);
                    });
                }
            })
            .map_err(|e| Error::Store { op: "listen", reason: format!("cannot start the server thread: {e}") })?;
        Ok(Server { addr, stop, accepting: Some(accepting) })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wake the accept loop so that it sees the flag, and wait until it closed the port.
        if TcpStream::connect_timeout(&self.addr, Duration::from_millis(500)).is_ok() {
            if let Some(t) = self.accepting.take() {
                let _ = t.join();
            }
        }
    }
}

/// Answers one client's requests until it hangs up.
fn serve(conn: &TcpStream, table: &Table) -> std::io::Result<()> {
    let _ = conn.set_nodelay(true);
    let mut r = BufReader::new(conn);
    loop {
        let mut cmd = [0u8; 1];
        if r.read(&mut cmd)? == 0 {
            return Ok(());
        }
        let mut out = Vec::new();
        match cmd[0] {
            SET => {
                let (k, v) = (read_bytes(&mut r)?, read_bytes(&mut r)?);
                table.set(&String::from_utf8_lossy(&k), &v);
                out.push(OK);
            }
            GET => {
                let k = String::from_utf8_lossy(&read_bytes(&mut r)?).into_owned();
                let timeout = Duration::from_millis(read_u64(&mut r)?);
                waited(&mut out, table.wait(&[&k], timeout).map(|v| v.unwrap_or_default()), |o, v| put_bytes(o, &v));
            }
            ADD => {
                let k = String::from_utf8_lossy(&read_bytes(&mut r)?).into_owned();
                let amount = read_u64(&mut r)? as i64;
                out.extend_from_slice(&table.add(&k, amount).to_le_bytes());
            }
            WAIT => {
                let keys = read_keys(&mut r)?;
                let timeout = Duration::from_millis(read_u64(&mut r)?);
                let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
                waited(&mut out, table.wait(&refs, timeout).map(|_| ()), |_, ()| {});
            }
            CHECK => {
                let keys = read_keys(&mut r)?;
                let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
                out.push(table.check(&refs) as u8);
            }
            DELETE => {
                let k = String::from_utf8_lossy(&read_bytes(&mut r)?).into_owned();
                out.push(table.delete(&k) as u8);
            }
            NUM_KEYS => out.extend_from_slice(&(table.len() as u64).to_le_bytes()),
            other => {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("unknown command {other}")))
            }
        }
        let mut w = BufWriter::new(conn);
        w.write_all(&out)?;
        w.flush()?;
    }
}

/// Writes a wait's reply: `OK` and the value, or `TIMED_OUT` and the missing keys.
fn waited<T>(out: &mut Vec<u8>, result: std::result::Result<T, Missing>, value: impl FnOnce(&mut Vec<u8>, T)) {
    match result {
        Ok(v) => {
            out.push(OK);
            value(out, v);
        }
        Err(Missing(keys)) => {
            out.push(TIMED_OUT);
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            put_keys(out, &refs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_share_keys_through_the_master() {
        let master = TcpStore::new("127.0.0.1", 0, true, Duration::from_secs(10)).unwrap();
        let port = master.port();
        let worker = std::thread::spawn(move || {
            let client = TcpStore::new("127.0.0.1", port, false, Duration::from_secs(10)).unwrap();
            assert_eq!(client.get("from-master").unwrap(), b"hello", "get waits for the master's set");
            client.set("from-worker", &[0, 255, 7]).unwrap();
            client.add("count", 5).unwrap()
        });
        std::thread::sleep(Duration::from_millis(20));
        master.set("from-master", b"hello").unwrap();
        master.wait(&["from-worker"], Duration::from_secs(10)).unwrap();
        assert_eq!(master.get("from-worker").unwrap(), [0, 255, 7]);
        let worker_count = worker.join().unwrap();
        assert_eq!(master.add("count", 1).unwrap(), worker_count + 1);
        assert!(master.check(&["from-master", "from-worker"]).unwrap());
        assert!(master.delete_key("from-master").unwrap());
        assert_eq!(master.num_keys().unwrap(), 2);
        match master.wait(&["never"], Duration::from_millis(20)) {
            Err(Error::DistributedTimeout { what, timeout_ms: 20 }) => assert!(what.contains("never")),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    #[test]
    fn a_client_of_no_server_times_out() {
        // Bind and drop a port so that nothing listens there.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let err = TcpStore::new("127.0.0.1", port, false, Duration::from_millis(150)).unwrap_err();
        assert!(matches!(err, Error::DistributedTimeout { .. }), "{err}");
    }
}
