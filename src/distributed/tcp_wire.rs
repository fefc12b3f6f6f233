//! The wire of [`TcpStore`](super::TcpStore): the limits a server keeps, the handshake by which a
//! client proves it knows the job's secret, and size-capped, length-prefixed messages.
//!
//! - **Handshake.** On accepting, the server writes [`MAGIC`] and a status byte: [`BUSY`] (its
//!   connection limit is reached; it closes) or [`WELCOME`] followed by a random 32-byte nonce
//!   and its limits (the message cap in bytes, the idle timeout in ms, both `u64` LE). The client
//!   answers HMAC-SHA256(secret, [`MAGIC`] ‖ nonce) (32 bytes); the server compares it in constant
//!   time and writes [`ACCEPTED`], or [`REFUSED`] and closes. Nothing before that reads or writes a
//!   key, and nothing the client sends before it is longer than 32 bytes.
//! - **Messages** (both ways): a `u64` LE length, then that many bytes. A length above the cap is
//!   refused before anything is allocated, and a body is read as its bytes arrive, so memory grows
//!   only with what a client really sent. Inside a body, byte strings are a `u64` LE length and the
//!   bytes, numbers `u64`/`i64` LE; so values of any length up to the cap travel whole.

use crate::error::{Error, Result};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The variable that carries the job's secret to its ranks (`cudasem run` sets it).
pub(crate) const SECRET_ENV: &str = "CUDASEM_STORE_SECRET";
/// The first bytes a server sends: the protocol and its version.
pub(crate) const MAGIC: &[u8; 8] = b"cdsmst01";
/// The server's status after [`MAGIC`]: the nonce and limits follow.
pub(crate) const WELCOME: u8 = 0;
/// The server's status after [`MAGIC`]: its connection limit is reached.
pub(crate) const BUSY: u8 = 1;
/// The server's verdict on a client's proof.
pub(crate) const ACCEPTED: u8 = 0;
/// The server's verdict on a client's proof: wrong secret.
pub(crate) const REFUSED: u8 = 1;
/// Bytes of a nonce and of a proof (HMAC-SHA256).
pub(crate) const NONCE: usize = 32;

/// The largest message (request or reply body) a server takes by default: 4 GiB.
pub(crate) const MAX_MESSAGE: u64 = 1 << 32;
/// The most connections a server serves at once by default.
pub(crate) const MAX_CONNECTIONS: usize = 4096;
/// How long a server keeps a connection that sends nothing (no request, no wait in progress).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a client has to answer the challenge.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a server allows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The largest message body, in bytes.
    pub max_message: u64,
    /// The most connections served at once; more are answered [`BUSY`] and closed.
    pub max_connections: usize,
    /// How long a connection may send nothing before it is closed.
    pub idle: Duration,
    /// How long a client has to prove the secret.
    pub handshake: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_message: MAX_MESSAGE,
            max_connections: MAX_CONNECTIONS,
            idle: IDLE_TIMEOUT,
            handshake: HANDSHAKE_TIMEOUT,
        }
    }
}

/// `now + d`, or `None` when that is past what an [`Instant`] can hold (no deadline).
pub(crate) fn deadline_after(d: Duration) -> Option<Instant> {
    Instant::now().checked_add(d)
}

/// `d` in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Random bytes from the operating system.
pub(crate) fn random<const N: usize>() -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| io::Error::other(format!("no random bytes from the system: {e}")))?;
    Ok(b)
}

/// A new secret for a job: 32 random bytes as hex text (fit for an environment variable).
pub(crate) fn new_secret() -> Result<Vec<u8>> {
    let b = random::<32>().map_err(|e| Error::Store { op: "listen", reason: e.to_string() })?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect::<String>().into_bytes())
}

fn mac(secret: &[u8], nonce: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length.
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).unwrap_or_else(|_| unreachable!());
    m.update(MAGIC);
    m.update(nonce);
    m
}

/// The proof that a client knows `secret`: HMAC-SHA256 of the challenge.
pub(crate) fn proof(secret: &[u8], nonce: &[u8]) -> [u8; NONCE] {
    mac(secret, nonce).finalize().into_bytes().into()
}

/// Whether `proof` is the right one for `nonce` (compared in constant time).
pub(crate) fn verify(secret: &[u8], nonce: &[u8], proof: &[u8]) -> bool {
    mac(secret, nonce).verify_slice(proof).is_ok()
}

/// The secret from [`SECRET_ENV`], when set; empty is an error.
pub(crate) fn env_secret() -> Result<Option<Vec<u8>>> {
    match crate::config::env_var(SECRET_ENV)? {
        Some(s) if s.is_empty() => Err(Error::InvalidConfig {
            key: SECRET_ENV.into(),
            value: String::new(),
            reason: "the store's secret must not be empty (unset it, or give every rank the same secret)".into(),
        }),
        s => Ok(s.map(String::into_bytes)),
    }
}

/// The secrets of the servers of this process, by port: a client of this process that has no
/// secret of its own (no [`SECRET_ENV`]) proves these.
fn local_secrets() -> &'static Mutex<HashMap<u16, Vec<u8>>> {
    static SECRETS: OnceLock<Mutex<HashMap<u16, Vec<u8>>>> = OnceLock::new();
    SECRETS.get_or_init(Default::default)
}

/// Makes `secret` the one this process's clients of `port` prove.
pub(crate) fn register_local(port: u16, secret: &[u8]) {
    local_secrets().lock().unwrap_or_else(|e| e.into_inner()).insert(port, secret.to_vec());
}

/// Forgets the secret of `port` (its server stopped).
pub(crate) fn unregister_local(port: u16) {
    local_secrets().lock().unwrap_or_else(|e| e.into_inner()).remove(&port);
}

/// The secret of this process's server on `port`, if any.
pub(crate) fn local_secret(port: u16) -> Option<Vec<u8>> {
    local_secrets().lock().unwrap_or_else(|e| e.into_inner()).get(&port).cloned()
}

/// Why a message was not read.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The peer declared a message longer than the cap.
    TooLarge(u64),
    /// Reading failed (including a timeout or a close mid-message).
    Io(io::Error),
}

/// Writes one message: its length, then `body`.
pub(crate) fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let mut msg = Vec::with_capacity(8 + body.len());
    msg.extend_from_slice(&(body.len() as u64).to_le_bytes());
    msg.extend_from_slice(body);
    w.write_all(&msg)?;
    w.flush()
}

/// Reads one message of at most `max` bytes; `None` when the peer closed before its first byte.
pub(crate) fn read_frame(r: &mut impl Read, max: u64) -> std::result::Result<Option<Vec<u8>>, FrameError> {
    let mut len = [0u8; 8];
    let first = loop {
        match r.read(&mut len[..1]) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FrameError::Io(e)),
        }
    };
    if first == 0 {
        return Ok(None);
    }
    r.read_exact(&mut len[1..]).map_err(FrameError::Io)?;
    let len = u64::from_le_bytes(len);
    if len > max {
        return Err(FrameError::TooLarge(len));
    }
    // Grows with the bytes that arrive, never with the declared length alone.
    let mut body = Vec::with_capacity(len.min(64 * 1024) as usize);
    r.take(len).read_to_end(&mut body).map_err(FrameError::Io)?;
    if (body.len() as u64) < len {
        return Err(FrameError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "the message ended early")));
    }
    Ok(Some(body))
}

/// A message body being written.
#[derive(Default)]
pub(crate) struct Enc(pub Vec<u8>);

impl Enc {
    pub fn new(first: u8) -> Enc {
        Enc(vec![first])
    }
    pub fn u8(mut self, b: u8) -> Enc {
        self.0.push(b);
        self
    }
    pub fn u64(mut self, n: u64) -> Enc {
        self.0.extend_from_slice(&n.to_le_bytes());
        self
    }
    pub fn bytes(mut self, b: &[u8]) -> Enc {
        self.0.extend_from_slice(&(b.len() as u64).to_le_bytes());
        self.0.extend_from_slice(b);
        self
    }
    pub fn keys<S: AsRef<str>>(self, keys: &[S]) -> Enc {
        keys.iter().fold(self.u64(keys.len() as u64), |e, k| e.bytes(k.as_ref().as_bytes()))
    }
}

/// A message body being read; every read checks the bytes are there.
pub(crate) struct Dec<'a>(pub &'a [u8]);

fn malformed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("malformed store message: {what}"))
}

impl<'a> Dec<'a> {
    fn take(&mut self, n: u64) -> io::Result<&'a [u8]> {
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.0.len())
            .ok_or_else(|| malformed("a field runs past the end"))?;
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    pub fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u64(&mut self) -> io::Result<u64> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }
    pub fn bytes(&mut self) -> io::Result<&'a [u8]> {
        let n = self.u64()?;
        self.take(n)
    }
    pub fn string(&mut self) -> io::Result<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| malformed("a key is not UTF-8"))
    }
    pub fn keys(&mut self) -> io::Result<Vec<String>> {
        let n = self.u64()?;
        // Each key takes at least its 8-byte length, so the count is bounded by the body.
        if n > self.0.len() as u64 / 8 {
            return Err(malformed("more keys than the message holds"));
        }
        (0..n).map(|_| self.string()).collect()
    }
    pub fn rest(self) -> &'a [u8] {
        self.0
    }
}
