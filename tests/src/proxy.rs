//! A TCP fault proxy on loopback: delay, blackhole, hold back or reset the traffic between
//! a client and a real redis-server, per direction, and move it to another server.
//!
//! It runs on its own thread and Tokio runtime, so sync and async tests use it alike, and
//! stops when dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Which way the traffic goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to server (requests).
    Up,
    /// Server to client (replies).
    Down,
}

struct Faults {
    delay_up_ms: AtomicU64,
    delay_down_ms: AtomicU64,
    blackhole_up: AtomicBool,
    blackhole_down: AtomicBool,
    /// Whether bytes going each way are held back (kept, in order, until released).
    hold_up: watch::Sender<bool>,
    hold_down: watch::Sender<bool>,
    /// Whether server-to-client bytes of replication connections only are held back.
    hold_replication: watch::Sender<bool>,
    /// The server new connections go to (a port on 127.0.0.1).
    target_port: AtomicU16,
    /// Chunks read and not yet passed on (sleeping out a delay).
    held_back: AtomicUsize,
    /// Commands the clients sent through the proxy (top-level RESP arrays going up).
    requests: AtomicU64,
}

impl Faults {
    fn delay(&self, direction: Direction) -> Duration {
        let ms = match direction {
            Direction::Up => &self.delay_up_ms,
            Direction::Down => &self.delay_down_ms,
        };
        Duration::from_millis(ms.load(Ordering::SeqCst))
    }

    fn hold(&self, direction: Direction) -> &watch::Sender<bool> {
        match direction {
            Direction::Up => &self.hold_up,
            Direction::Down => &self.hold_down,
        }
    }

    fn blackholed(&self, direction: Direction) -> bool {
        match direction {
            Direction::Up => self.blackhole_up.load(Ordering::SeqCst),
            Direction::Down => self.blackhole_down.load(Ordering::SeqCst),
        }
    }
}

/// A running proxy to one target port on 127.0.0.1.
pub struct FaultProxy {
    port: u16,
    faults: Arc<Faults>,
    /// Bumped to reset every open connection.
    generation: watch::Sender<u64>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy to `127.0.0.1:target_port` on a free loopback port.
    pub fn start(target_port: u16) -> FaultProxy {
        let faults = Arc::new(Faults {
            delay_up_ms: AtomicU64::new(0),
            delay_down_ms: AtomicU64::new(0),
            blackhole_up: AtomicBool::new(false),
            blackhole_down: AtomicBool::new(false),
            hold_up: watch::channel(false).0,
            hold_down: watch::channel(false).0,
            hold_replication: watch::channel(false).0,
            target_port: AtomicU16::new(target_port),
            held_back: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
        });
        let (generation, generation_rx) = watch::channel(0u64);
        let (shutdown, shutdown_rx) = tokio::sync::oneshot::channel();
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let thread_faults = faults.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("proxy runtime");
            runtime.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy bind");
                port_tx
                    .send(listener.local_addr().expect("proxy addr").port())
                    .expect("report port");
                let accept = async {
                    while let Ok((client, _)) = listener.accept().await {
                        let port = thread_faults.target_port.load(Ordering::SeqCst);
                        let target: SocketAddr = ([127, 0, 0, 1], port).into();
                        tokio::spawn(relay(
                            client,
                            target,
                            thread_faults.clone(),
                            generation_rx.clone(),
                        ));
                    }
                };
                tokio::select! {
                    () = accept => {}
                    _ = shutdown_rx => {}
                }
            });
        });
        let port = port_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("proxy did not start");
        FaultProxy {
            port,
            faults,
            generation,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Delays every chunk going `direction` by `delay` (zero to stop).
    pub fn set_delay(&self, direction: Direction, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        match direction {
            Direction::Up => self.faults.delay_up_ms.store(ms, Ordering::SeqCst),
            Direction::Down => self.faults.delay_down_ms.store(ms, Ordering::SeqCst),
        }
    }

    /// Drops (true) or passes (false) everything going `direction`; connections stay open.
    pub fn set_blackhole(&self, direction: Direction, on: bool) {
        match direction {
            Direction::Up => self.faults.blackhole_up.store(on, Ordering::SeqCst),
            Direction::Down => self.faults.blackhole_down.store(on, Ordering::SeqCst),
        }
    }

    /// Holds back (true) everything going `direction`: it is read and kept, in order, and
    /// nothing reaches the other side until the hold ends (false), when what was kept is
    /// written out first. What a connection still keeps when it ends (either side closes,
    /// [`reset_all`](Self::reset_all)) is dropped with it: the bytes a server had sent but
    /// the network never delivered, as when a primary dies with its replication stream
    /// still in flight. Unlike a stalled receiver (SIGSTOP, `DEBUG SLEEP`), which has the
    /// bytes in its socket buffer, the peer never gets them.
    pub fn set_hold(&self, direction: Direction, on: bool) {
        self.faults.hold(direction).send_replace(on);
    }

    /// Like [`set_hold`](Self::set_hold) for [`Direction::Down`], but only on replication
    /// connections (those whose client sent `PSYNC`: a replica's link to its primary);
    /// clients' replies pass. For a primary whose one address serves both, as a cluster
    /// node announces one address to its replica and to clients.
    pub fn set_hold_replication(&self, on: bool) {
        self.faults.hold_replication.send_replace(on);
    }

    /// Sends new connections to `127.0.0.1:target_port` from now on (open ones stay where
    /// they are: [`reset_all`](Self::reset_all) moves them). A failover behind a fixed
    /// address: a virtual IP or a DNS name moved to the promoted replica.
    pub fn set_target(&self, target_port: u16) {
        self.faults.target_port.store(target_port, Ordering::SeqCst);
    }

    /// How many chunks are held back by a delay now (either direction): zero once the
    /// traffic delayed before a `set_delay(.., ZERO)` has been passed on.
    pub fn held_back(&self) -> usize {
        self.faults.held_back.load(Ordering::SeqCst)
    }

    /// How many commands clients have sent through the proxy so far (each command of a
    /// pipeline counts; commands a script runs on the server do not): what one client's
    /// traffic costs the server in requests, apart from every other client's.
    pub fn requests(&self) -> u64 {
        self.faults.requests.load(Ordering::SeqCst)
    }

    /// Resets (RST) every connection open now; new connections are accepted as before.
    pub fn reset_all(&self) {
        self.generation.send_modify(|generation| *generation += 1);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.reset_all();
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn relay(
    client: TcpStream,
    target: SocketAddr,
    faults: Arc<Faults>,
    mut generation: watch::Receiver<u64>,
) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    generation.mark_unchanged();
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    // Linger 0: dropping the sockets sends RST, as a reset connection does.
    let _ = client.set_zero_linger();
    let _ = server.set_zero_linger();
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let replication = Arc::new(AtomicBool::new(false));
    let up = pump(
        client_read,
        server_write,
        Direction::Up,
        faults.clone(),
        replication.clone(),
    );
    let down = pump(
        server_read,
        client_write,
        Direction::Down,
        faults,
        replication,
    );
    tokio::select! {
        () = up => {}
        () = down => {}
        _ = generation.changed() => {}
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    direction: Direction,
    faults: Arc<Faults>,
    replication: Arc<AtomicBool>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut hold = faults.hold(direction).subscribe();
    let mut hold_replication = faults.hold_replication.subscribe();
    // Whether this connection's bytes are held now: every connection's, or (server to
    // client) a replication connection's.
    let held = |hold: &watch::Receiver<bool>, hold_replication: &watch::Receiver<bool>| {
        *hold.borrow()
            || (direction == Direction::Down
                && replication.load(Ordering::SeqCst)
                && *hold_replication.borrow())
    };
    // Bytes held back while the hold is on, in order.
    let mut kept: Vec<u8> = Vec::new();
    let mut commands = CommandCounter::default();
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => match read {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            },
            changed = hold.changed() => {
                if changed.is_err() {
                    return;
                }
                hold.borrow_and_update();
                if !held(&hold, &hold_replication) && !kept.is_empty() {
                    if to.write_all(&kept).await.is_err() {
                        return;
                    }
                    kept.clear();
                }
                continue;
            }
            changed = hold_replication.changed() => {
                if changed.is_err() {
                    return;
                }
                hold_replication.borrow_and_update();
                if !held(&hold, &hold_replication) && !kept.is_empty() {
                    if to.write_all(&kept).await.is_err() {
                        return;
                    }
                    kept.clear();
                }
                continue;
            }
        };
        if direction == Direction::Up {
            let sent = commands.feed(&buffer[..read]);
            faults.requests.fetch_add(sent, Ordering::SeqCst);
        }
        let delay = faults.delay(direction);
        if !delay.is_zero() {
            let _held = HeldBack::new(&faults.held_back);
            tokio::time::sleep(delay).await;
        }
        if faults.blackholed(direction) {
            continue;
        }
        if direction == Direction::Up
            && !replication.load(Ordering::SeqCst)
            && buffer[..read]
                .windows(5)
                .any(|w| w.eq_ignore_ascii_case(b"PSYNC"))
        {
            replication.store(true, Ordering::SeqCst);
        }
        if held(&hold, &hold_replication) {
            kept.extend_from_slice(&buffer[..read]);
            continue;
        }
        if !kept.is_empty() {
            if to.write_all(&kept).await.is_err() {
                return;
            }
            kept.clear();
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

/// Counts a chunk as held back while it lives (also when its connection is reset meanwhile).
struct HeldBack<'a>(&'a AtomicUsize);

impl<'a> HeldBack<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        HeldBack(count)
    }
}

impl Drop for HeldBack<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts the commands in a client's byte stream: RESP arrays of bulk strings (what
/// redis-rs sends), read across chunk boundaries.
#[derive(Default)]
struct CommandCounter {
    /// The header line being read (`*n` or `$len`), without its `\r\n`.
    line: Vec<u8>,
    /// Bulk strings left in the current command.
    elements: u64,
    /// Bytes of the current bulk string (and its `\r\n`) still to skip.
    skip: u64,
}

impl CommandCounter {
    /// Reads `bytes`; returns how many commands began in them.
    fn feed(&mut self, mut bytes: &[u8]) -> u64 {
        let mut commands = 0;
        while !bytes.is_empty() {
            if self.skip > 0 {
                let taken = bytes
                    .len()
                    .min(usize::try_from(self.skip).unwrap_or(usize::MAX));
                self.skip -= taken as u64;
                bytes = &bytes[taken..];
                continue;
            }
            let Some(end) = bytes.iter().position(|&byte| byte == b'\n') else {
                self.line.extend_from_slice(bytes);
                break;
            };
            self.line.extend_from_slice(&bytes[..end]);
            bytes = &bytes[end + 1..];
            let line = std::mem::take(&mut self.line);
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            let number = |rest: &[u8]| {
                std::str::from_utf8(rest)
                    .ok()
                    .and_then(|text| text.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            match line.first() {
                Some(b'*') if self.elements == 0 => {
                    commands += 1;
                    self.elements = number(&line[1..]);
                }
                Some(b'$') if self.elements > 0 => {
                    self.elements -= 1;
                    self.skip = number(&line[1..]) + 2;
                }
                // An inline command (a plain line).
                Some(_) if self.elements == 0 => commands += 1,
                _ => {}
            }
        }
        commands
    }
}

#[cfg(test)]
mod tests {
    use super::CommandCounter;

    #[test]
    fn commands_are_counted_across_chunks_and_inside_bulk_strings_are_not() {
        let stream = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\n*2\r\n\r\n*1\r\n$4\r\nPING\r\n";
        for split in 0..stream.len() {
            let mut counter = CommandCounter::default();
            let (a, b) = stream.split_at(split);
            assert_eq!(counter.feed(a) + counter.feed(b), 2, "split at {split}");
        }
    }
}
