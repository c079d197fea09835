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

/// A listening server: one address, any number of services.
pub struct Server {
    addr: SocketAddr,
    router: Arc<Router>,
    stopping: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port) and starts accepting. The router is also
    /// registered for in-process connections.
    pub fn bind(addr: SocketAddr, bulk_len_max: u32) -> Result<Arc<Server>, NetError> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let router = Arc::new(Router::default());
        let selftest = crate::ServiceConfig {
            name: "selftest".into(),
            partitions: 1,
            threads_per_partition: 2,
            queue_depth: 64,
        };
        router.add(
            Service::Net,
            crate::ServicePool::start(selftest, Arc::new(crate::selftest::SelftestHandler)),
        );
        local::register(addr, &router);
        let server = Arc::new(Server {
            addr,
            router: router.clone(),
            stopping: Arc::new(AtomicBool::new(false)),
            conns: Arc::new(Mutex::new(Vec::new())),
            acceptor: Mutex::new(None),
        });
        let stopping = server.stopping.clone();
        let conns = server.conns.clone();
        let bulk_len_max = bulk_len_max.min(BULK_BYTES_MAX);
        let t = std::thread::Builder::new()
            .name("acceptor".into())
            .spawn(move || accept_loop(listener, router, stopping, conns, bulk_len_max))
            .expect("spawn acceptor");
        *server.acceptor.lock().expect("acceptor") = Some(t);
        Ok(server)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Adds a service.
    pub fn add_service(&self, service: Service, pool: Arc<ServicePool>) {
        self.router.add(service, pool);
    }

    /// Stops accepting, closes connections and stops the service threads.
    pub fn shutdown(&self) {
        if self.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        local::unregister(self.addr);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.acceptor.lock().expect("acceptor").take() {
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
        let cpt = partition;
        partition += 1;
        let spawned = std::thread::Builder::new()
            .name("conn-reader".into())
            .spawn(move || serve_connection(stream, peer, router, cpt, bulk_len_max));
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
