//! The TCP side of a server: an acceptor and one reader thread per connection, feeding the
//! [`Router`]. The router is also registered for in-process connections.

use crate::frame::read_frame;
use crate::router::Router;
use crate::service::{Incoming, ReplySink, ServicePool};
use crate::{local, NetError};
use nacre_types::limits::BULK_BYTES_MAX;
use nacre_wire::Service;
use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One address a server listens on, and the CPU partitions serving its connections (the
/// partitions its network interface is bound to, as `networks="tcp0(eth0)[0]"` says; empty:
/// connections are spread over all partitions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen {
    /// Address (port 0: any free port).
    pub addr: SocketAddr,
    /// CPU partitions of the interface.
    pub cpts: Vec<usize>,
}

/// A listening server: one or more addresses (interfaces), any number of services.
pub struct Server {
    addrs: Vec<SocketAddr>,
    router: Arc<Router>,
    stopping: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    acceptors: Mutex<Vec<JoinHandle<()>>>,
    /// The listening sockets (clones), shut down to wake the acceptors.
    listeners: Mutex<Vec<TcpListener>>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port) and starts accepting. The router is also
    /// registered for in-process connections.
    pub fn bind(addr: SocketAddr, bulk_len_max: u32) -> Result<Arc<Server>, NetError> {
        Server::bind_all(
            &[Listen {
                addr,
                cpts: Vec::new(),
            }],
            bulk_len_max,
        )
    }

    /// Binds every address of `listens` (a port 0 after the first takes the first's port)
    /// and starts accepting on each.
    pub fn bind_all(listens: &[Listen], bulk_len_max: u32) -> Result<Arc<Server>, NetError> {
        Server::bind_with(listens, bulk_len_max, false)
    }

    /// Like [`Server::bind_all`] for a server that adds its services after binding: until
    /// `router().set_starting(false)`, requests for a service not added yet wait for it
    /// instead of failing with ENOSYS (clients reconnecting to a restarted server at once).
    pub fn bind_starting(listens: &[Listen], bulk_len_max: u32) -> Result<Arc<Server>, NetError> {
        Server::bind_with(listens, bulk_len_max, true)
    }

    fn bind_with(
        listens: &[Listen],
        bulk_len_max: u32,
        starting: bool,
    ) -> Result<Arc<Server>, NetError> {
        assert!(!listens.is_empty(), "a server needs an address");
        let mut listeners = Vec::new();
        let mut port = 0;
        for l in listens {
            let mut addr = l.addr;
            if addr.port() == 0 {
                addr.set_port(port);
            }
            let listener = TcpListener::bind(addr)?;
            port = listener.local_addr()?.port();
            listeners.push((listener, l.cpts.clone()));
        }
        let addrs = listeners
            .iter()
            .map(|(l, _)| l.local_addr())
            .collect::<Result<Vec<_>, _>>()?;
        let router = Arc::new(Router::default());
        router.set_starting(starting);
        for a in &addrs {
            local::register(*a, &router);
        }
        let server = Arc::new(Server {
            addrs,
            router: router.clone(),
            stopping: Arc::new(AtomicBool::new(false)),
            conns: Arc::new(Mutex::new(Vec::new())),
            acceptors: Mutex::new(Vec::new()),
            listeners: Mutex::new(Vec::new()),
        });
        let bulk_len_max = bulk_len_max.min(BULK_BYTES_MAX);
        for (listener, cpts) in listeners {
            if let Ok(clone) = listener.try_clone() {
                server.listeners.lock().expect("listeners").push(clone);
            }
            let (router, stopping, conns) = (
                router.clone(),
                server.stopping.clone(),
                server.conns.clone(),
            );
            let t = std::thread::Builder::new()
                .name("acceptor".into())
                .spawn(move || accept_loop(listener, cpts, router, stopping, conns, bulk_len_max))
                .expect("spawn acceptor");
            server.acceptors.lock().expect("acceptors").push(t);
        }
        Ok(server)
    }

    /// The first bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Every bound address.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The request router (rotor setting).
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// Adds a service.
    pub fn add_service(&self, service: Service, pool: Arc<ServicePool>) {
        self.router.add(service, pool);
    }

    /// Serves the requests of `opcodes` by `pool` (a separate portal of a service).
    pub fn add_portal(&self, opcodes: &[u16], pool: Arc<ServicePool>) {
        self.router.add_portal(opcodes, pool);
    }

    /// Stops accepting, closes connections and stops the service threads.
    pub fn shutdown(&self) {
        if self.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        for a in &self.addrs {
            local::unregister(*a);
        }
        // Shutting a listening socket down wakes its accept() at once, even when its address
        // has gone (an interface removed): connecting to it would fail and leave the acceptor
        // blocked forever.
        for l in self.listeners.lock().expect("listeners").drain(..) {
            use std::os::fd::AsRawFd;
            // SAFETY: a valid listening socket fd owned by `l`.
            unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR) };
        }
        for t in self.acceptors.lock().expect("acceptors").drain(..) {
            let _ = t.join();
        }
        for c in self.conns.lock().expect("conns").drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        self.router.stop();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(
    listener: TcpListener,
    cpts: Vec<usize>,
    router: Arc<Router>,
    stopping: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    bulk_len_max: u32,
) {
    let mut partition = 0usize;
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        let Ok(clone) = stream.try_clone() else {
            continue;
        };
        {
            let mut list = conns.lock().expect("conns");
            list.retain(|c| c.peer_addr().is_ok());
            list.push(clone);
        }
        let router = router.clone();
        // An interface bound to partitions has its connections' bulk buffers taken from
        // their partition's pools; otherwise they come from the shared ones.
        let (cpt, bound) = if cpts.is_empty() {
            (partition, false)
        } else {
            (cpts[partition % cpts.len()], true)
        };
        partition = partition.wrapping_add(1);
        let spawned = std::thread::Builder::new()
            .name("conn-reader".into())
            .spawn(move || {
                nacre_types::buf::set_thread_partition(bound.then_some(cpt));
                serve_connection(stream, peer, router, cpt, bulk_len_max)
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start a connection thread: {e}");
        }
    }
}

fn serve_connection(
    stream: TcpStream,
    peer: String,
    router: Arc<Router>,
    cpt: usize,
    bulk_len_max: u32,
) {
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let writer = Arc::new(Mutex::new(write_half));
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    loop {
        match read_frame(&mut reader, bulk_len_max) {
            Ok(Some(frame)) if !frame.header.is_reply() => {
                let req = Incoming {
                    header: frame.header,
                    body: frame.body,
                    bulk: frame.bulk.map(Arc::new),
                    peer: peer.clone(),
                    reply_to: ReplySink::Tcp(writer.clone()),
                };
                router.route(req, cpt);
            }
            Ok(Some(_)) => {
                tracing::warn!("{peer}: unexpected reply frame; dropping connection");
                break;
            }
            Ok(None) => break,
            Err(e) => {
                tracing::warn!("{peer}: {e}; dropping connection");
                break;
            }
        }
    }
    let _ = writer
        .lock()
        .expect("writer")
        .shutdown(std::net::Shutdown::Both);
}
