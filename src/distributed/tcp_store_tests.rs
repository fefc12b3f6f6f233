//! The TCP store's tests: clients through the master, and raw clients that try what an intruder
//! or a broken peer would (no secret, huge lengths, idling, too many connections, endless waits).

use super::*;
use crate::distributed::tcp_server::{OK, REFUSED_REQUEST, SET, WAIT};
use rand::{RngExt, SeedableRng};
use std::net::TcpListener;

const SECRET: &[u8] = b"the job's secret";

fn master(limits: Limits, timeout: Duration) -> TcpStore {
    TcpStore::with_parts("127.0.0.1", 0, true, timeout, Some(SECRET.to_vec()), limits).unwrap()
}

/// A raw connection to `port`: the server's hello (status byte, then nonce and limits if welcome).
fn hello(port: u16) -> (TcpStream, u8, Vec<u8>) {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = [0u8; 9];
    (&s).read_exact(&mut head).unwrap();
    assert_eq!(&head[..8], wire::MAGIC);
    let mut rest = vec![0u8; if head[8] == wire::WELCOME { wire::NONCE + 16 } else { 0 }];
    (&s).read_exact(&mut rest).unwrap();
    (s, head[8], rest)
}

/// A raw connection that proved `secret`; the server's verdict.
fn raw_client(port: u16, secret: &[u8]) -> (TcpStream, u8) {
    let (s, status, rest) = hello(port);
    assert_eq!(status, wire::WELCOME);
    (&s).write_all(&wire::proof(secret, &rest[..wire::NONCE])).unwrap();
    let mut verdict = [0u8; 1];
    (&s).read_exact(&mut verdict).unwrap();
    (s, verdict[0])
}

/// Whether the peer closed `s` (reads until the end or a reset; bounded by the read timeout).
fn closed_by_peer(s: &TcpStream) -> bool {
    let mut sink = Vec::new();
    match (&*s).read_to_end(&mut sink) {
        Ok(_) => true,
        Err(e) => !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
    }
}

/// Polls `f` until it holds, for up to 20 s.
fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..2000 {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{what} did not happen within 20 s");
}

#[test]
fn clients_share_keys_through_the_master() {
    let master = TcpStore::new("127.0.0.1", 0, true, Duration::from_secs(10)).unwrap();
    let port = master.port();
    let worker = std::thread::spawn(move || {
        // Same process, no secret given: the master's own.
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
    assert!(!format!("{master:?}").contains("secret"), "Debug never shows the secret");
}

#[test]
fn a_client_of_no_server_times_out() {
    // Bind and drop a port so that nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let err = TcpStore::new("127.0.0.1", port, false, Duration::from_millis(150)).unwrap_err();
    assert!(matches!(err, Error::DistributedTimeout { .. }), "{err}");
}

#[test]
fn a_client_without_the_secret_is_refused_before_touching_a_key() {
    let master = master(Limits::default(), Duration::from_secs(10));
    master.set("k", b"master's").unwrap();
    // A wrong secret: a typed error naming the variable, at connection time.
    let err = TcpStore::with_parts(
        "127.0.0.1",
        master.port(),
        false,
        Duration::from_secs(5),
        Some(b"guess".to_vec()),
        Limits::default(),
    )
    .unwrap_err();
    match &err {
        Error::Store { op: "connect", reason } => {
            assert!(reason.contains("refused") && reason.contains(wire::SECRET_ENV), "{reason}")
        }
        other => panic!("expected a refused connection, got {other:?}"),
    }
    // No secret at all (another process's view: the master's is not registered here).
    wire::unregister_local(master.port());
    let err = TcpStore::with_parts("127.0.0.1", master.port(), false, Duration::from_secs(5), None, Limits::default())
        .unwrap_err();
    assert!(
        matches!(&err, Error::Store { op: "connect", reason } if reason.contains("no secret") && reason.contains(wire::SECRET_ENV)),
        "{err}"
    );
    // A raw client that skips the proof and sends a `set` at once: its first 32 bytes are taken as
    // the (wrong) proof, it is refused and disconnected, and the key is untouched.
    let (s, _, _) = hello(master.port());
    let set = Enc::new(SET).bytes(b"k").bytes(b"intruder's").0;
    let mut frame = (set.len() as u64).to_le_bytes().to_vec();
    frame.extend_from_slice(&set);
    frame.resize(frame.len().max(64), 0);
    (&s).write_all(&frame).unwrap();
    let mut verdict = [0u8; 1];
    (&s).read_exact(&mut verdict).unwrap();
    assert_eq!(verdict[0], wire::REFUSED);
    assert!(closed_by_peer(&s));
    assert_eq!(master.get("k").unwrap(), b"master's");
    assert_eq!(master.num_keys().unwrap(), 1);
    // The right secret works, from a raw client and a store.
    let (s, verdict) = raw_client(master.port(), SECRET);
    assert_eq!(verdict, wire::ACCEPTED);
    wire::write_frame(&mut &s, &Enc::new(SET).bytes(b"raw").bytes(b"ok").0).unwrap();
    assert_eq!(wire::read_frame(&mut &s, 1024).unwrap().unwrap(), [OK]);
    let client = TcpStore::with_parts(
        "127.0.0.1",
        master.port(),
        false,
        Duration::from_secs(5),
        Some(SECRET.to_vec()),
        Limits::default(),
    )
    .unwrap();
    assert_eq!(client.get("raw").unwrap(), b"ok");
}

#[test]
fn a_huge_declared_length_is_refused_naming_the_cap_without_allocating() {
    let master = master(Limits::default(), Duration::from_secs(10));
    // Lengths past 4 GiB, past u32::MAX (where a 32-bit length would truncate) and u64::MAX: each
    // would abort the process if allocated up front.
    for declared in [u64::MAX, u32::MAX as u64 + 2, wire::MAX_MESSAGE + 1] {
        let (s, verdict) = raw_client(master.port(), SECRET);
        assert_eq!(verdict, wire::ACCEPTED);
        (&s).write_all(&declared.to_le_bytes()).unwrap();
        let reply = wire::read_frame(&mut &s, 1 << 20).unwrap().expect("an error reply");
        let mut d = Dec(&reply);
        assert_eq!(d.u8().unwrap(), REFUSED_REQUEST);
        let why = String::from_utf8(d.bytes().unwrap().to_vec()).unwrap();
        assert!(why.contains(&declared.to_string()) && why.contains(&wire::MAX_MESSAGE.to_string()), "{why}");
        assert!(closed_by_peer(&s), "the connection is closed after a refused length");
    }
    // A field that claims more than its message holds is refused too (not read past, not truncated).
    let (s, _) = raw_client(master.port(), SECRET);
    let mut body = vec![SET];
    body.extend_from_slice(&(u32::MAX as u64 + 1).to_le_bytes());
    body.extend_from_slice(b"short");
    wire::write_frame(&mut &s, &body).unwrap();
    let reply = wire::read_frame(&mut &s, 1 << 20).unwrap().unwrap();
    assert_eq!(reply[0], REFUSED_REQUEST);
    // The server still serves.
    master.set("after", b"fine").unwrap();
    assert_eq!(master.get("after").unwrap(), b"fine");
}

#[test]
fn values_of_any_length_up_to_the_cap_travel_whole_and_larger_ones_are_a_typed_error() {
    let cap = 1 << 20;
    let master = master(Limits { max_message: cap, ..Limits::default() }, Duration::from_secs(10));
    let mut rng = rand::rngs::StdRng::seed_from_u64(36);
    // The largest `set` that fits: its command, the key and the two 8-byte lengths.
    let key = "v";
    let largest = cap as usize - 1 - 8 - key.len() - 8;
    for len in [0, 1, 65_537, rng.random_range(0..largest), largest] {
        let mut value = vec![0u8; len];
        rng.fill(&mut value[..]);
        master.set(key, &value).unwrap();
        assert!(master.get(key).unwrap() == value, "a value of {len} bytes");
    }
    match master.set(key, &vec![1u8; largest + 1]) {
        Err(Error::Store { op: "set", reason }) => assert!(reason.contains(&format!("cap of {cap} bytes")), "{reason}"),
        other => panic!("expected the cap's error, got {other:?}"),
    }
    // The refused set changed nothing, and the store goes on.
    assert_eq!(master.get(key).unwrap().len(), largest);
    // Lengths are 64-bit on the wire: one past u32::MAX is written whole, not truncated.
    let n = u32::MAX as u64 + 1;
    assert_eq!(Dec(&Enc::default().u64(n).0).u64().unwrap(), n);
}

#[test]
fn idle_connections_are_closed_and_clients_reconnect() {
    let idle = Duration::from_millis(300);
    let master = master(Limits { idle, ..Limits::default() }, Duration::from_secs(10));
    let (s, verdict) = raw_client(master.port(), SECRET);
    assert_eq!(verdict, wire::ACCEPTED);
    // A silent client is disconnected by the server (the read sees the close, not its own timeout).
    assert!(closed_by_peer(&s), "an idle connection was closed by the server");
    // One that never answers the challenge too.
    let handshake = Duration::from_millis(300);
    let strict = master_with(Limits { handshake, ..Limits::default() });
    let (s, status, _) = hello(strict.port());
    assert_eq!(status, wire::WELCOME);
    assert!(closed_by_peer(&s), "a client that did not prove the secret was closed");
    eventually("the server's connections closing", || master.server_connections() == Some(0));
    // The store's own pooled connection idled out too; it reconnects.
    master.set("k", b"v").unwrap();
    assert_eq!(master.get("k").unwrap(), b"v");
}

fn master_with(limits: Limits) -> TcpStore {
    master(limits, Duration::from_secs(10))
}

#[test]
fn the_connection_limit_holds() {
    let master = master_with(Limits { max_connections: 3, ..Limits::default() });
    // The master's own pooled connection is one; two raw ones reach the limit.
    let held: Vec<TcpStream> = (0..2).map(|_| raw_client(master.port(), SECRET).0).collect();
    assert_eq!(master.server_connections(), Some(3));
    for _ in 0..3 {
        let (s, status, _) = hello(master.port());
        assert_eq!(status, wire::BUSY, "a connection past the limit is turned away");
        assert!(closed_by_peer(&s));
    }
    assert_eq!(master.server_connections(), Some(3));
    drop(held);
    eventually("the held connections closing", || master.server_connections() == Some(1));
    let (_s, verdict) = raw_client(master.port(), SECRET);
    assert_eq!(verdict, wire::ACCEPTED);
    master.set("k", b"v").unwrap();
}

#[test]
fn endless_timeouts_do_not_panic_and_abandoned_waits_end() {
    let master = master(Limits::default(), Duration::MAX);
    let client = TcpStore::with_parts(
        "127.0.0.1",
        master.port(),
        false,
        Duration::MAX,
        Some(SECRET.to_vec()),
        Limits::default(),
    )
    .unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            master.set("late", b"x").unwrap();
        });
        client.wait(&["late"], Duration::MAX).unwrap();
    });
    assert_eq!(client.get("late").unwrap(), b"x");
    // A raw client asks for an endless wait and hangs up: the server's thread does not wait forever.
    let before = master.server_connections().unwrap();
    let (s, _) = raw_client(master.port(), SECRET);
    wire::write_frame(&mut &s, &Enc::new(WAIT).keys(&["never"]).u64(u64::MAX).0).unwrap();
    eventually("the raw connection counted", || master.server_connections() == Some(before + 1));
    drop(s);
    eventually("the abandoned wait ending", || master.server_connections() == Some(before));
}
