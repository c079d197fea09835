//! The in-process transport: servers register their router under each address they listen
//! on, and a [`crate::Connection`] to such an address skips the socket entirely. Requests and
//! replies move between threads as owned buffers: no copy, no checksum (there is no wire to
//! corrupt them).

use crate::router::Router;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};

fn registry() -> &'static Mutex<HashMap<SocketAddr, Weak<Router>>> {
    static REGISTRY: OnceLock<Mutex<HashMap<SocketAddr, Weak<Router>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Makes `router` reachable in-process at `addr`.
pub fn register(addr: SocketAddr, router: &Arc<Router>) {
    registry()
        .lock()
        .expect("local registry")
        .insert(addr, Arc::downgrade(router));
}

/// Removes the in-process entry for `addr`.
pub fn unregister(addr: SocketAddr) {
    registry().lock().expect("local registry").remove(&addr);
}

/// The router serving `addr` in this process, if any.
pub fn lookup(addr: SocketAddr) -> Option<Arc<Router>> {
    registry()
        .lock()
        .expect("local registry")
        .get(&addr)
        .and_then(Weak::upgrade)
}
