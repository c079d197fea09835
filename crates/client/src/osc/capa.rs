//! The capability each OST request carries, and its renewal (a layout fetch from the MDT,
//! in the background past half its life).

use crate::{Client, Result};
use nacre_wire::oss::OssRequest;

impl Client {
    /// The capability `req` to OST `ost` carries: past half its life it is renewed in the
    /// background (the request goes with the one it has, still good: a write-behind flush
    /// never waits on the MDT for it); expired, it is renewed first (a request with it
    /// would be refused) — or sent as it is if the MDT cannot give a new one now.
    pub(crate) fn capa_for(&self, ost: u32, req: &OssRequest) -> Option<nacre_wire::capa::Capa> {
        use crate::capas::Freshness;
        let (capa, state) = self.capas.lookup(ost, req)?;
        match state {
            Freshness::Fresh => Some(capa),
            Freshness::Due => {
                self.renew_capas_later(capa.fid);
                Some(capa)
            }
            Freshness::Expired => {
                if let Err(e) = self.renew_capas(capa.fid) {
                    tracing::debug!("renewing the capabilities of {}: {e}", capa.fid);
                }
                self.capas.for_request(ost, req).or(Some(capa))
            }
        }
    }

    /// Fetches `fid`'s layout from its MDT, whose answer carries fresh capabilities while
    /// this client holds the file open (noted as every answer's are).
    pub(super) fn renew_capas(&self, fid: nacre_types::Fid) -> Result<()> {
        self.md(nacre_wire::mds::MdsOp::GetLayout { fid })
            .map(|_| ())
    }

    /// [`Client::renew_capas`] on a thread of its own, once at a time per file.
    fn renew_capas_later(&self, fid: nacre_types::Fid) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        if !self.capas.start_renewal(fid) {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("capa-renew".into())
            .spawn(move || {
                if let Err(e) = me.renew_capas(fid) {
                    tracing::debug!("renewing the capabilities of {fid}: {e}");
                }
                me.capas.end_renewal(fid);
            });
        if spawned.is_err() {
            self.capas.end_renewal(fid);
        }
    }
}
