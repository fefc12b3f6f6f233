//! The server of [`TcpStore`](super::TcpStore): a listening thread and a thread per connection
//! over one [`Table`], within [`Limits`] (see [`tcp_wire`](super::tcp_wire) for the wire).
//!
//! Nothing here waits forever: a client has [`Limits::handshake`] to prove the secret, a
//! connection that sends nothing for [`Limits::idle`] is closed (as is one that does not read its
//! replies), a served wait ends at its deadline or when its client hangs up, connections past
//! [`Limits::max_connections`] are turned away at once, and a failing `accept` (out of file
//! descriptors) backs off instead of spinning.

use super::store::{Missing, Table};
use super::tcp_wire::{self as wire, Dec, Enc, FrameError, Limits};
use crate::error::{Error, Result};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(crate) const SET: u8 = 1;
pub(crate) const GET: u8 = 2;
pub(crate) const ADD: u8 = 3;
pub(crate) const WAIT: u8 = 4;
pub(crate) const CHECK: u8 = 5;
pub(crate) const DELETE: u8 = 6;
pub(crate) const NUM_KEYS: u8 = 7;

/// Reply status: the result follows.
pub(crate) const OK: u8 = 0;
/// Reply status: the wait timed out; the missing keys follow.
pub(crate) const TIMED_OUT: u8 = 1;
/// Reply status: the request was refused; a message follows, and the server closes.
pub(crate) const REFUSED_REQUEST: u8 = 2;

/// How long the accept loop pauses after a failed `accept` (e.g. no file descriptors left).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Stack of a connection's thread (it holds a message at a time on the heap).
const CONN_STACK: usize = 256 * 1024;

/// A running server; dropping it stops the listening (connections in progress finish).
#[derive(Debug)]
pub(crate) struct Server {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Connections being served (read by the tests).
    #[cfg_attr(not(test), allow(dead_code))]
    live: Arc<AtomicUsize>,
    accepting: Option<std::thread::JoinHandle<()>>,
}

/// Counts a connection as live until dropped.
struct Live(Arc<AtomicUsize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Server {
    /// Listens on `host:port` (0: any free port) for clients that prove `secret`.
    pub fn start(host: &str, port: u16, secret: Vec<u8>, limits: Limits) -> Result<Server> {
        let listener = TcpListener::bind((host, port)).map_err(|e| Error::Store {
            op: "listen",
            reason: format!("the master cannot listen on {host}:{port}: {e} (is MASTER_PORT taken?)"),
        })?;
        let addr = listener.local_addr().map_err(|e| Error::Store { op: "listen", reason: e.to_string() })?;
        let stop = Arc::new(AtomicBool::new(false));
        let live = Arc::new(AtomicUsize::new(0));
        let (stopping, counting) = (stop.clone(), live.clone());
        // This process's clients without a secret of their own prove this one.
        wire::register_local(addr.port(), &secret);
        let (table, secret) = (Arc::new(Table::default()), Arc::new(secret));
        let accepting = std::thread::Builder::new()
            .name("cudasem-tcpstore".into())
            .spawn(move || accept_loop(listener, &stopping, &counting, table, secret, limits))
            .map_err(|e| {
                wire::unregister_local(addr.port());
                Error::Store { op: "listen", reason: format!("cannot start the server thread: {e}") }
            })?;
        Ok(Server { addr, stop, live, accepting: Some(accepting) })
    }

    /// Connections being served now (handshakes included).
    #[cfg(test)]
    pub fn connections(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }
}

fn accept_loop(
    listener: TcpListener,
    stop: &AtomicBool,
    live: &Arc<AtomicUsize>,
    table: Arc<Table>,
    secret: Arc<Vec<u8>>,
    limits: Limits,
) {
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let conn = match conn {
            Ok(c) => c,
            Err(_) => {
                std::thread::sleep(ACCEPT_BACKOFF);
                continue;
            }
        };
        if live.load(Ordering::Acquire) >= limits.max_connections {
            let _ = conn.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = (&conn).write_all(&[&wire::MAGIC[..], &[wire::BUSY]].concat());
            continue;
        }
        live.fetch_add(1, Ordering::AcqRel);
        let guard = Live(live.clone());
        let (table, secret) = (table.clone(), secret.clone());
        // A thread that cannot start drops its closure, and with it the guard and the connection.
        let _ =
            std::thread::Builder::new().name("cudasem-tcpstore-conn".into()).stack_size(CONN_STACK).spawn(move || {
                let _guard = guard;
                let _ = serve(&conn, &table, &secret, &limits);
            });
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        wire::unregister_local(self.addr.port());
        // Wake the accept loop so that it sees the flag, and wait until it closed the port.
        if TcpStream::connect_timeout(&self.addr, Duration::from_millis(500)).is_ok() {
            if let Some(t) = self.accepting.take() {
                let _ = t.join();
            }
        }
    }
}

/// The challenge: whether the client proved the secret within the handshake timeout.
fn challenge(conn: &TcpStream, secret: &[u8], limits: &Limits) -> io::Result<bool> {
    conn.set_read_timeout(Some(limits.handshake))?;
    conn.set_write_timeout(Some(limits.handshake))?;
    let nonce = wire::random::<{ wire::NONCE }>()?;
    let mut hello = wire::MAGIC.to_vec();
    hello.push(wire::WELCOME);
    hello.extend_from_slice(&nonce);
    hello.extend_from_slice(&limits.max_message.to_le_bytes());
    hello.extend_from_slice(&wire::millis(limits.idle).to_le_bytes());
    (&*conn).write_all(&hello)?;
    let mut proof = [0u8; wire::NONCE];
    (&*conn).read_exact(&mut proof)?;
    let ok = wire::verify(secret, &nonce, &proof);
    (&*conn).write_all(&[if ok { wire::ACCEPTED } else { wire::REFUSED }])?;
    Ok(ok)
}

/// Serves one client: the challenge, then its requests until it hangs up or idles too long.
fn serve(conn: &TcpStream, table: &Table, secret: &[u8], limits: &Limits) -> io::Result<()> {
    let _ = conn.set_nodelay(true);
    if !challenge(conn, secret, limits)? {
        return Ok(());
    }
    conn.set_read_timeout(Some(limits.idle))?;
    conn.set_write_timeout(Some(limits.idle))?;
    loop {
        let body = match wire::read_frame(&mut &*conn, limits.max_message) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(()),
            Err(FrameError::TooLarge(n)) => {
                let why = format!(
                    "a message of {n} bytes exceeds the store's cap of {} bytes; the connection is closed",
                    limits.max_message
                );
                return wire::write_frame(&mut &*conn, &Enc::new(REFUSED_REQUEST).bytes(why.as_bytes()).0);
            }
            Err(FrameError::Io(e)) => return Err(e),
        };
        match handle(&body, table, conn) {
            Ok(reply) => wire::write_frame(&mut &*conn, &reply)?,
            Err(e) => {
                return wire::write_frame(&mut &*conn, &Enc::new(REFUSED_REQUEST).bytes(e.to_string().as_bytes()).0)
            }
        }
    }
}

/// Whether the client of `conn` hung up (looked at without blocking or consuming anything).
fn client_gone(conn: &TcpStream) -> bool {
    if conn.set_nonblocking(true).is_err() {
        return true;
    }
    let mut b = [0u8; 1];
    let gone = match conn.peek(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != io::ErrorKind::WouldBlock,
    };
    gone || conn.set_nonblocking(false).is_err()
}

/// Answers one request.
fn handle(body: &[u8], table: &Table, conn: &TcpStream) -> io::Result<Vec<u8>> {
    let mut d = Dec(body);
    let gone = || client_gone(conn);
    let reply = match d.u8()? {
        SET => {
            let k = d.string()?;
            table.set(&k, d.bytes()?);
            Enc::new(OK)
        }
        GET => {
            let k = d.string()?;
            let deadline = wire::deadline_after(Duration::from_millis(d.u64()?));
            match table.wait_until(&[&k], deadline, Some(&gone)) {
                Ok(v) => Enc::new(OK).bytes(&v.unwrap_or_default()),
                Err(Missing(keys)) => Enc::new(TIMED_OUT).keys(&keys),
            }
        }
        ADD => {
            let k = d.string()?;
            Enc::new(OK).u64(table.add(&k, d.u64()? as i64) as u64)
        }
        WAIT => {
            let keys = d.keys()?;
            let deadline = wire::deadline_after(Duration::from_millis(d.u64()?));
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            match table.wait_until(&refs, deadline, Some(&gone)) {
                Ok(_) => Enc::new(OK),
                Err(Missing(keys)) => Enc::new(TIMED_OUT).keys(&keys),
            }
        }
        CHECK => {
            let keys = d.keys()?;
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            Enc::new(OK).u8(table.check(&refs) as u8)
        }
        DELETE => Enc::new(OK).u8(table.delete(&d.string()?) as u8),
        NUM_KEYS => Enc::new(OK).u64(table.len() as u64),
        other => return Err(io::Error::new(io::ErrorKind::InvalidData, format!("unknown store command {other}"))),
    };
    Ok(reply.0)
}
