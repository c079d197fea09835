//! Capabilities checked on an OST (crates/wire/src/capa.rs, docs/security.md): with a
//! file-system key, a client's read, write, punch, fallocate or extent-lock request on an
//! object is served only with a capability the MDT gave it for that object and operation
//! (the MDT gives them only with an open it permitted), or under a lock this OST granted
//! that client on the object (granted only with a capability): a write kept behind is never
//! held up by an expiry, and a lock cancelled takes the authority with it. Servers and
//! admins need none. Glimpses (sizes), syncs and the client's own locks need none.
//! Without a key nothing is checked: there is nothing to check with.

use nacre_net::Caller;
use nacre_types::Status;
use nacre_wire::capa::{holder_of, CAPA_READ, CAPA_WRITE};
use nacre_wire::oss::{OssCall, OssRequest};
use nacre_wire::roles::Role;

/// The operation a request needs a capability for, if any.
fn needs(req: &OssRequest) -> Option<u8> {
    match req {
        OssRequest::Read { .. } => Some(CAPA_READ),
        OssRequest::Write { .. }
        | OssRequest::WriteRuns { .. }
        | OssRequest::Punch { .. }
        | OssRequest::Fallocate { .. } => Some(CAPA_WRITE),
        OssRequest::Enqueue { write: true, .. } => Some(CAPA_WRITE),
        OssRequest::Enqueue { write: false, .. } => Some(CAPA_READ),
        _ => None,
    }
}

/// Whether `caller` may send `call` to `ost` (`EACCES` otherwise, counted and logged).
pub fn check(ost: &crate::OstTarget, caller: &Caller, call: &OssCall) -> Result<(), Status> {
    let Err(refusal) = allowed(ost, caller, call) else {
        return Ok(());
    };
    nacre_net::caller::refused(|| {
        let op = crate::stats::OST_OPS
            .get((call.req.opcode() & 0xff) as usize - 1)
            .unwrap_or(&"?");
        let object = call
            .req
            .key_object()
            .map_or(String::new(), |o| format!(" of object {}:{}", o.seq, o.id));
        format!(
            "{}: refused {op}{object} from {}: {refusal}",
            ost.label.name(),
            caller.describe()
        )
    });
    Err(Status::Access)
}

/// [`check`] without counting or logging: why not, if not.
pub fn allowed(ost: &crate::OstTarget, caller: &Caller, call: &OssCall) -> Result<(), String> {
    let (Some(ops), Some(object)) = (needs(&call.req), call.req.key_object()) else {
        return Ok(());
    };
    if matches!(caller.role(), Role::Server | Role::Admin) {
        return Ok(());
    }
    // The key in use and, during a rotation, those accepted beside it.
    let keys = nacre_net::sec::capability_keys(&ost.label.fsname);
    if keys.is_empty() {
        return Ok(());
    }
    // Under a lock granted with a capability: a write lock for a change, any for a read.
    let locked = call.client != crate::locks::NO_CLIENT
        && ost
            .locks
            .ns
            .holds_where(&call.client, &object, |e| e.write || ops == CAPA_READ);
    if locked {
        return Ok(());
    }
    let holder = holder_of(&caller.tenant());
    match &call.capa {
        None => Err("no capability".to_string()),
        Some(c) => keys
            .iter()
            .map(|key| c.allows(key, ost.label.index, object, ops, &holder))
            .find(|r| !matches!(r, Err(nacre_wire::capa::CapaRefusal::Forged)))
            .unwrap_or(Err(nacre_wire::capa::CapaRefusal::Forged))
            .map_err(|e| format!("a capability {e}")),
    }
}
