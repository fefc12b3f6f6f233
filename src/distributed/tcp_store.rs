//! [`TcpStore`]: c10d's `TCPStore` — one process (the master, rank 0) serves the keys over TCP,
//! every rank (the master too) is a client. Clients retry connecting until the timeout (the
//! master may start later), keep a few connections so that a rank's threads (the host and a
//! stream's collective) do not queue behind each other's waits, and report a closed server as
//! [`Error::RankFailed`] of rank 0.
//!
//! Unlike PyTorch's `TCPStore`, which serves anyone who reaches its port, the server lets in only
//! clients that prove the job's secret (an HMAC-SHA256 challenge-response, before any key is read
//! or written), caps the size of a message, limits its connections and closes idle ones; the
//! wire ([`tcp_wire`](super::tcp_wire)) is this crate's own. Waits are served by the server (its
//! thread per connection sleeps on the table, and gives up when the client hangs up), so a
//! timeout is exact and needs no second round trip.

use super::store::{timed_out, Store};
use super::tcp_server::{self as server, Server};
use super::tcp_wire::{self as wire, Dec, Enc, FrameError, Limits};
use crate::error::{Error, Result};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Extra time a client waits for a reply beyond the wait it asked the server for.
const REPLY_MARGIN: Duration = Duration::from_secs(5);
/// Connections a client keeps for later calls.
const POOLED: usize = 4;

/// A TCP key-value store (`torch.distributed.TCPStore`) that lets in only the ranks of its job.
///
/// **Authentication.** Every connection proves the job's secret before it can read or write a
/// key: the server sends a random nonce, the client answers HMAC-SHA256(secret, nonce), and a
/// wrong answer is refused ([`Error::Store`] on the client). The secret is, first hit wins:
/// - the variable `CUDASEM_STORE_SECRET` (`cudasem run` makes a random one per job and gives it
///   to its ranks in their environment, never on a command line; for several nodes, or ranks
///   started by hand, set the same value for every rank);
/// - else, for the master, a random secret made when it starts, which clients *in the same
///   process* (ranks that are threads, tests) use; a client in another process without the
///   variable is refused with an error that names it.
///
/// **Limits.** A message (a request or a reply, with a value of any length) may be at most
/// 4 GiB: a larger `set` is [`Error::Store`] naming the cap, and a peer that declares a larger
/// message is answered with that error and disconnected before anything is allocated. The
/// server serves at most 4096 connections at once (more are turned away, and their clients retry
/// until the timeout), closes a connection that sends nothing for 10 minutes, gives up a wait whose
/// client hung up, and gives a client 10 s to answer its challenge.
///
/// These are differences from PyTorch's `TCPStore`, which has no authentication, no message cap
/// and no idle timeout; the wire is this crate's own, so the two do not talk to each other.
pub struct TcpStore {
    addr: SocketAddr,
    timeout: Duration,
    /// This client's secret; `None`: the secret of this process's server on the port, if any.
    secret: Option<Vec<u8>>,
    idle: Mutex<Vec<Conn>>,
    /// The server, when this store is the master's.
    server: Option<Server>,
}

impl fmt::Debug for TcpStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret is never printed.
        f.debug_struct("TcpStore")
            .field("addr", &self.addr)
            .field("timeout", &self.timeout)
            .field("is_master", &self.server.is_some())
            .finish_non_exhaustive()
    }
}

/// An authenticated connection and what its server allows.
struct Conn {
    stream: TcpStream,
    max_message: u64,
    /// The server's idle timeout: a pooled connection older than half of it is not reused.
    idle_limit: Duration,
    since: Instant,
}

/// Why a connection attempt failed: worth retrying (nothing listens yet, the server is busy) or not.
enum Attempt {
    Retry(String),
    Fatal(Error),
}

impl TcpStore {
    /// A store at `host:port`. The master (`is_master`, rank 0) binds the port (0: any free port,
    /// see [`TcpStore::port`]) and serves it until dropped; the others connect, retrying until
    /// `timeout` ([`Error::DistributedTimeout`]). `timeout` also bounds [`Store::get`]; a
    /// `timeout` too long for the clock (`Duration::MAX`) means no deadline. The secret comes
    /// from `CUDASEM_STORE_SECRET` (see the type's docs); a client whose secret is wrong or missing
    /// is [`Error::Store`], an empty variable [`Error::InvalidConfig`].
    pub fn new(host: &str, port: u16, is_master: bool, timeout: Duration) -> Result<TcpStore> {
        TcpStore::with_parts(host, port, is_master, timeout, wire::env_secret()?, Limits::default())
    }

    /// [`TcpStore::new`] with an explicit secret (`None`: the process's own) and limits.
    pub(crate) fn with_parts(
        host: &str,
        port: u16,
        is_master: bool,
        timeout: Duration,
        secret: Option<Vec<u8>>,
        limits: Limits,
    ) -> Result<TcpStore> {
        let server = match is_master {
            true => Some(Server::start(host, port, secret.clone().map_or_else(wire::new_secret, Ok)?, limits)?),
            false => None,
        };
        let addr = match &server {
            Some(s) => s.addr,
            None => resolve(host, port)?,
        };
        let store = TcpStore { addr, timeout, secret, idle: Mutex::new(Vec::new()), server };
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

    /// Connections the server serves now (the master's only).
    #[cfg(test)]
    pub(crate) fn server_connections(&self) -> Option<usize> {
        self.server.as_ref().map(Server::connections)
    }

    fn connect(&self) -> Result<Conn> {
        let deadline = wire::deadline_after(self.timeout);
        let mut pause = Duration::from_millis(10);
        loop {
            let attempt = TcpStream::connect_timeout(&self.addr, pause.max(Duration::from_millis(100)))
                .map_err(|e| Attempt::Retry(e.to_string()))
                .and_then(|s| self.handshake(s));
            match attempt {
                Ok(c) => return Ok(c),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(e)) if deadline.is_some_and(|d| Instant::now() + pause >= d) => {
                    return Err(Error::DistributedTimeout {
                        what: format!("the store at {} to accept a connection (last error: {e})", self.addr),
                        timeout_ms: wire::millis(self.timeout),
                    })
                }
                Err(Attempt::Retry(_)) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
            }
        }
    }

    /// Answers the server's challenge on a new connection.
    fn handshake(&self, stream: TcpStream) -> std::result::Result<Conn, Attempt> {
        let retry = |e: io::Error| Attempt::Retry(format!("the handshake failed: {e}"));
        let _ = stream.set_nodelay(true);
        stream.set_read_timeout(Some(wire::HANDSHAKE_TIMEOUT)).map_err(retry)?;
        let mut hello = [0u8; 9];
        (&stream).read_exact(&mut hello).map_err(retry)?;
        if &hello[..8] != wire::MAGIC {
            return Err(Attempt::Fatal(Error::Store {
                op: "connect",
                reason: format!("{} is not a cudasem store (or one of another version)", self.addr),
            }));
        }
        if hello[8] == wire::BUSY {
            return Err(Attempt::Retry("the store serves its maximum of connections".into()));
        }
        let mut challenge = [0u8; wire::NONCE + 16];
        (&stream).read_exact(&mut challenge).map_err(retry)?;
        let (nonce, limits) = challenge.split_at(wire::NONCE);
        let secret = self.secret.clone().or_else(|| wire::local_secret(self.addr.port())).ok_or_else(|| {
            Attempt::Fatal(Error::Store {
                op: "connect",
                reason: format!(
                    "no secret for the store at {}: set {} to the job's secret (`cudasem run` sets it for its ranks; \
                     every rank of a job started by hand needs the same value)",
                    self.addr,
                    wire::SECRET_ENV
                ),
            })
        })?;
        (&stream).write_all(&wire::proof(&secret, nonce)).map_err(retry)?;
        let mut verdict = [0u8; 1];
        (&stream).read_exact(&mut verdict).map_err(retry)?;
        if verdict[0] != wire::ACCEPTED {
            return Err(Attempt::Fatal(Error::Store {
                op: "connect",
                reason: format!(
                    "the store at {} refused this client: its secret does not match the job's (check that {} is \
                     the same for every rank)",
                    self.addr,
                    wire::SECRET_ENV
                ),
            }));
        }
        let mut d = Dec(limits);
        let (max_message, idle_ms) = (d.u64().map_err(retry)?, d.u64().map_err(retry)?);
        let idle_limit = Duration::from_millis(idle_ms / 2);
        Ok(Conn { stream, max_message, idle_limit, since: Instant::now() })
    }

    fn give_back(&self, mut conn: Conn) {
        conn.since = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < POOLED {
            idle.push(conn);
        }
    }

    /// A pooled connection the server has not closed for idleness, or a new one.
    fn take(&self) -> Result<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(c) = idle.pop() {
            if c.since.elapsed() < c.idle_limit {
                return Ok(c);
            }
        }
        drop(idle);
        self.connect()
    }

    /// Sends `request`, reads the reply (given up to `wait` plus a margin): its body after an
    /// `OK`, or the keys still missing after a timed-out wait.
    fn call(
        &self,
        op: &'static str,
        request: Enc,
        wait: Duration,
    ) -> Result<std::result::Result<Vec<u8>, Vec<String>>> {
        let conn = self.take()?;
        if request.0.len() as u64 > conn.max_message {
            let n = request.0.len();
            let cap = conn.max_message;
            self.give_back(conn);
            return Err(Error::Store {
                op,
                reason: format!("a message of {n} bytes exceeds the store's cap of {cap} bytes; store smaller values"),
            });
        }
        let gone = |e: io::Error| Error::RankFailed {
            rank: 0,
            reason: format!("the store's server at {} did not answer {op}: {e}", self.addr),
        };
        conn.stream.set_read_timeout(Some(wait.saturating_add(REPLY_MARGIN))).map_err(gone)?;
        wire::write_frame(&mut &conn.stream, &request.0).map_err(gone)?;
        let reply = match wire::read_frame(&mut &conn.stream, conn.max_message.saturating_add(1024)) {
            Ok(Some(b)) => b,
            Ok(None) => return Err(gone(io::ErrorKind::UnexpectedEof.into())),
            Err(FrameError::Io(e)) => return Err(gone(e)),
            Err(FrameError::TooLarge(n)) => {
                return Err(Error::Store { op, reason: format!("the server sent a reply of {n} bytes, above its cap") })
            }
        };
        let bad = |e: io::Error| Error::Store { op, reason: e.to_string() };
        let mut d = Dec(&reply);
        let value = match d.u8().map_err(bad)? {
            server::OK => Ok(d.rest().to_vec()),
            server::TIMED_OUT => Err(d.keys().map_err(bad)?),
            _ => {
                let why = String::from_utf8_lossy(d.bytes().map_err(bad)?).into_owned();
                return Err(Error::Store { op, reason: format!("the store refused the request: {why}") });
            }
        };
        // A reply read in full leaves the connection clean for the next call.
        self.give_back(conn);
        Ok(value)
    }

    /// A call whose reply is a result only (no wait).
    fn result(&self, op: &'static str, request: Enc) -> Result<Vec<u8>> {
        self.call(op, request, Duration::ZERO)?.map_err(|_| Error::Store {
            op,
            reason: "the server answered a timeout to a call that does not wait".into(),
        })
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| Error::Store { op: "connect", reason: format!("cannot resolve {host}:{port}") })
}

fn decode<T>(op: &'static str, body: &[u8], f: impl FnOnce(&mut Dec) -> io::Result<T>) -> Result<T> {
    f(&mut Dec(body)).map_err(|e| Error::Store { op, reason: e.to_string() })
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.result("set", Enc::new(server::SET).bytes(key.as_bytes()).bytes(value)).map(|_| ())
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let req = Enc::new(server::GET).bytes(key.as_bytes()).u64(wire::millis(self.timeout));
        match self.call("get", req, self.timeout)? {
            Ok(body) => decode("get", &body, |d| d.bytes().map(<[u8]>::to_vec)),
            Err(missing) => Err(timed_out(&missing, self.timeout)),
        }
    }

    fn add(&self, key: &str, amount: i64) -> Result<i64> {
        let body = self.result("add", Enc::new(server::ADD).bytes(key.as_bytes()).u64(amount as u64))?;
        decode("add", &body, |d| d.u64().map(|v| v as i64))
    }

    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<()> {
        let req = Enc::new(server::WAIT).keys(keys).u64(wire::millis(timeout));
        self.call("wait", req, timeout)?.map(|_| ()).map_err(|missing| timed_out(&missing, timeout))
    }

    fn check(&self, keys: &[&str]) -> Result<bool> {
        let body = self.result("check", Enc::new(server::CHECK).keys(keys))?;
        decode("check", &body, |d| d.u8().map(|b| b == 1))
    }

    fn delete_key(&self, key: &str) -> Result<bool> {
        let body = self.result("delete_key", Enc::new(server::DELETE).bytes(key.as_bytes()))?;
        decode("delete_key", &body, |d| d.u8().map(|b| b == 1))
    }

    fn num_keys(&self) -> Result<usize> {
        let body = self.result("num_keys", Enc::new(server::NUM_KEYS))?;
        decode("num_keys", &body, |d| d.u64().map(|v| v as usize))
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }
}

#[cfg(test)]
#[path = "tcp_store_tests.rs"]
mod tests;
