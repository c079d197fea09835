//! Extended attributes: the virtual ones Nacre's tools use (a file's layout and a
//! directory's default striping `user.nacre.lov`, usage `user.nacre.df`, remote and striped
//! mkdir `user.nacre.mkdir`, directory stripes `user.nacre.lmv` and their default
//! `user.nacre.lmv_default`, migration `user.nacre.migrate`, the inode's FID
//! `user.nacre.fid`, its project `user.nacre.project`), and the stored ones.

use super::*;
use crate::xattr_json;

impl Shared {
    pub(super) fn layout_json(&self, fid: Fid) -> Result<Vec<u8>, ClientError> {
        let info = self.client.get_layout(fid)?;
        Ok(xattr_json::lov_value(&info).to_string().into_bytes())
    }

    pub(super) fn df_json(&self) -> Result<Vec<u8>, ClientError> {
        let targets: Vec<_> = self
            .client
            .df()?
            .into_iter()
            .map(|t| {
                serde_json::json!({
                    "name": t.name,
                    "bytes_total": t.statfs.bytes_total,
                    "bytes_free": t.statfs.bytes_free,
                    "bytes_avail": t.statfs.bytes_avail,
                    "files_total": t.statfs.files_total,
                    "files_free": t.statfs.files_free,
                })
            })
            .collect();
        // Pools as the MGS has them now (an admin command right after `nacre pool` sees
        // the change even if the MGS's event has not arrived yet).
        if let Err(e) = self.client.refresh_config() {
            tracing::debug!("configuration refresh for df: {e}");
        }
        let pools: Vec<_> = self
            .client
            .fs_config()
            .pools
            .iter()
            .map(|p| serde_json::json!({ "name": p.name.as_str(), "osts": p.osts }))
            .collect();
        Ok(serde_json::json!({
            "version": xattr_json::XATTR_JSON_VERSION,
            "fsname": self.client.fsname(),
            "mgs": self.client.mgs_nid().to_string(),
            "targets": targets,
            "pools": pools,
        })
        .to_string()
        .into_bytes())
    }

    pub(super) fn virtual_xattr(
        &self,
        fid: Fid,
        name: &OsStr,
    ) -> Option<Result<Vec<u8>, ClientError>> {
        match name.as_bytes() {
            n if n == XATTR_LOV.as_bytes() => Some(self.layout_json(fid)),
            n if n == XATTR_DF.as_bytes() => Some(self.df_json()),
            n if n == XATTR_API.as_bytes() => self
                .api
                .get()
                .map(|p| Ok(p.as_os_str().as_bytes().to_vec())),
            n if n == XATTR_LMV.as_bytes() => Some(self.lmv_json(fid)),
            n if n == XATTR_LMV_DEFAULT.as_bytes() => Some(self.lmv_default_json(fid)),
            n if n == XATTR_FID.as_bytes() => Some(Ok(fid.to_string().into_bytes())),
            n if n == XATTR_PROJECT.as_bytes() => Some(self.client.getattr(fid).map(|a| {
                let inherit = if a.proj_inherit { " inherit" } else { "" };
                format!("{}{inherit}", a.project).into_bytes()
            })),
            _ => None,
        }
    }

    /// Sets an inode's project (and a directory's inheritance) from `ID`, `ID inherit` or
    /// `ID noinherit` (the MDT lets only root change it).
    fn set_project(&self, fid: Fid, value: &[u8]) -> Result<(), ClientError> {
        let bad = || {
            ClientError::Config(format!(
                "bad {XATTR_PROJECT} value (ID [inherit|noinherit])"
            ))
        };
        let text = std::str::from_utf8(value).map_err(|_| bad())?;
        let mut words = text.split_whitespace();
        let project: u32 = words.next().and_then(|w| w.parse().ok()).ok_or_else(bad)?;
        let proj_inherit = match words.next() {
            None => None,
            Some("inherit") => Some(true),
            Some("noinherit") => Some(false),
            Some(_) => return Err(bad()),
        };
        if words.next().is_some() {
            return Err(bad());
        }
        let set = nacre_types::SetAttr {
            project: Some(project),
            proj_inherit,
            ..Default::default()
        };
        self.client.setattr(fid, set).map(|_| ())
    }

    pub(super) fn mkdir_on(
        &self,
        parent: Fid,
        value: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<(), ClientError> {
        let bad = |why: &str| ClientError::Config(format!("bad {XATTR_MKDIR} value: {why}"));
        let v = xattr_json::parse_set(XATTR_MKDIR, value, xattr_json::MKDIR_SET_KEYS)?;
        let name = v["name"].as_str().ok_or_else(|| bad("no name"))?;
        let mdt = match v["mdt"].as_i64() {
            Some(-1) => nacre_wire::mds::MDT_INDEX_ANY,
            Some(m) => u32::try_from(m).map_err(|_| bad("bad mdt"))?,
            None => return Err(bad("no mdt")),
        };
        let mode = v["mode"].as_u64().unwrap_or(0o755) as u32 & 0o7777;
        if let Some(count) = v["count"].as_u64() {
            let count = u32::try_from(count).map_err(|_| bad("bad count"))?;
            let hash = match v["hash"].as_str() {
                Some(h) => h.parse().map_err(|e: String| bad(&e))?,
                None => nacre_types::dirstripe::DirHash::Fnv1a64,
            };
            let r = self.client.mkdir_striped(
                parent,
                name.as_bytes(),
                mode,
                uid,
                gid,
                count,
                mdt,
                hash,
            );
            self.forget_entry_later(parent, name);
            return r.map(|_| ());
        }
        let r = self
            .client
            .mkdir_on(parent, name.as_bytes(), mode, uid, gid, mdt);
        self.forget_entry_later(parent, name);
        r.map(|_| ())
    }

    /// A change made behind the kernel's back (through a virtual xattr) to `parent`/`name`:
    /// this mount's own locks were not called back by it, so the kernel's entry (a negative
    /// one, or the directory's old FID) is invalidated once the kernel lets go of the
    /// directory (it holds it for the xattr call).
    pub(super) fn forget_entry_later(&self, parent: Fid, name: &str) {
        if let Some(inval) = self.inval.get() {
            inval.entry_later(crate::ino_of(parent), name.into());
        }
    }

    /// This mount's change of directories `dirs`, under way until the guard is dropped
    /// (after the reply): entry invalidations in them wait for its end (inval.rs).
    pub(super) fn changing(&self, dirs: &[INodeNo]) -> Option<crate::inval::Changing> {
        let inos: Vec<u64> = dirs.iter().map(|d| d.0).collect();
        self.inval.get().map(|inval| inval.changing(&inos))
    }

    /// Pages of file `fid` the kernel cached without a data lock of this mount covering
    /// them (read or written through unlocked: refused, contended) go once the kernel lets
    /// go of them.
    pub(super) fn drop_pages_later(&self, fid: Fid, offset: u64, len: u64) {
        if let Some(inval) = self.inval.get() {
            inval.data_later(crate::ino_of(fid), offset, len);
        }
    }

    pub(super) fn migrate(&self, parent: Fid, value: &[u8]) -> Result<(), ClientError> {
        let bad = |why: &str| ClientError::Config(format!("bad {XATTR_MIGRATE} value: {why}"));
        let v = xattr_json::parse_set(XATTR_MIGRATE, value, xattr_json::MIGRATE_SET_KEYS)?;
        let name = v["name"].as_str().ok_or_else(|| bad("no name"))?;
        let mdt = v["mdt"]
            .as_u64()
            .and_then(|m| u32::try_from(m).ok())
            .ok_or_else(|| bad("no mdt"))?;
        let r = self.client.migrate(parent, name.as_bytes(), mdt);
        self.forget_entry_later(parent, name);
        let (fid, moved, kept) = r?;
        tracing::info!(
            "migrated {name} to MDT{mdt:04x} as {fid}: {moved} inodes moved, {kept} kept"
        );
        Ok(())
    }

    pub(super) fn lmv_default_json(&self, fid: Fid) -> Result<Vec<u8>, ClientError> {
        let default = self.client.dir_default(fid)?;
        Ok(xattr_json::lmv_default_value(default.as_ref())
            .to_string()
            .into_bytes())
    }

    pub(super) fn set_lmv_default(&self, fid: Fid, value: &[u8]) -> Result<(), ClientError> {
        let bad = |why: &str| ClientError::Config(format!("bad {XATTR_LMV_DEFAULT}: {why}"));
        let v = xattr_json::parse_set(XATTR_LMV_DEFAULT, value, xattr_json::LMV_DEFAULT_SET_KEYS)?;
        let default = match v["count"].as_i64() {
            None => None,
            Some(count) => Some(nacre_types::dirstripe::DirDefault {
                count: i32::try_from(count).map_err(|_| bad("count"))?,
                start: match v["start"].as_i64().unwrap_or(-1) {
                    -1 => u32::MAX,
                    s => u32::try_from(s).map_err(|_| bad("start"))?,
                },
                hash: v["hash"]
                    .as_str()
                    .unwrap_or("fnv_1a_64")
                    .parse()
                    .map_err(|e: String| bad(&e))?,
                max_inherit: v["max_inherit"]
                    .as_i64()
                    .map_or(Ok(nacre_types::dirstripe::DIR_DEFAULT_MAX_INHERIT), |m| {
                        i32::try_from(m).map_err(|_| bad("max_inherit"))
                    })?,
            }),
        };
        self.client.set_dir_default(fid, default)
    }

    pub(super) fn lmv_json(&self, fid: Fid) -> Result<Vec<u8>, ClientError> {
        let stripe = self.client.dir_stripe(fid)?;
        Ok(xattr_json::lmv_value(fid, stripe.as_deref())
            .to_string()
            .into_bytes())
    }

    /// Sets a file's layout or a directory's default from a `user.nacre.lov` value (keys
    /// `stripe_count`, `stripe_size`, `start_ost`, `pool`, or `components`; `kind` and
    /// `pattern` checked when given): anything else is refused (xattr_json).
    pub(super) fn set_lov(&self, fid: Fid, value: &[u8]) -> Result<(), ClientError> {
        let v = xattr_json::parse_set(XATTR_LOV, value, xattr_json::LOV_SET_KEYS)?;
        xattr_json::check_word(XATTR_LOV, &v, "kind", xattr_json::LOV_KINDS)?;
        xattr_json::check_word(XATTR_LOV, &v, "pattern", xattr_json::LOV_PATTERNS)?;
        let spec = xattr_json::lov_spec(&v)?;
        self.client.set_layout(fid, spec).map(|_| ())
    }
}

#[allow(clippy::too_many_arguments)]
impl Shared {
    pub(super) fn setxattr(
        &self,
        req: &Caller,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.enter(req);
        let fid = match fid_of(ino) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        self.caps.changed(fid);
        let r = if name.as_bytes() == XATTR_LOV.as_bytes() {
            self.set_lov(fid, value)
        } else if [XATTR_DF, XATTR_FID, XATTR_API]
            .iter()
            .any(|x| name.as_bytes() == x.as_bytes())
        {
            Err(ClientError::from(Status::Perm))
        } else if name.as_bytes() == XATTR_PROJECT.as_bytes() {
            self.set_project(fid, value)
        } else if name.as_bytes() == XATTR_MKDIR.as_bytes() {
            self.mkdir_on(fid, value, req.uid(), req.gid())
        } else if name.as_bytes() == XATTR_LMV_DEFAULT.as_bytes() {
            self.set_lmv_default(fid, value)
        } else if name.as_bytes() == XATTR_MIGRATE.as_bytes() {
            if req.uid() == 0 {
                self.migrate(fid, value)
            } else {
                Err(ClientError::from(Status::Perm))
            }
        } else {
            self.client
                .setxattr(fid, name.as_bytes(), value, flags as u32)
        };
        match r {
            Ok(()) => reply.ok(),
            Err(ClientError::Config(msg)) => {
                tracing::warn!("{msg}");
                reply.error(Errno::EINVAL)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn getxattr(
        &self,
        req: &Caller,
        ino: INodeNo,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        self.enter(req);
        let fid = match fid_of(ino) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let caps = name.as_bytes() == crate::caps::XATTR_CAPS;
        if caps && self.caps.known_absent(fid) {
            return reply.error(Errno::from_i32(libc::ENODATA));
        }
        let generation = if caps {
            self.caps.generation(fid)
        } else {
            None
        };
        let value = match self.virtual_xattr(fid, name) {
            Some(v) => v,
            None => self.client.getxattr(fid, name.as_bytes()),
        };
        if let (Some(g), Err(e)) = (generation, &value) {
            if e.errno() == libc::ENODATA {
                self.caps.learned_absent(fid, g);
            }
        }
        match value {
            Ok(v) if size == 0 => reply.size(v.len() as u32),
            Ok(v) if v.len() > size as usize => reply.error(status_errno(Status::Range)),
            Ok(v) => reply.data(&v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn listxattr(&self, req: &Caller, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.enter(req);
        let fid = match fid_of(ino) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        match self.client.listxattr(fid) {
            Ok(names) => {
                let mut buf = Vec::new();
                for n in names {
                    buf.extend_from_slice(&n);
                    buf.push(0);
                }
                if size == 0 {
                    reply.size(buf.len() as u32)
                } else if buf.len() > size as usize {
                    reply.error(Errno::ERANGE)
                } else {
                    reply.data(&buf)
                }
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn removexattr(&self, req: &Caller, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.enter(req);
        empty(
            reply,
            fid_of(ino).and_then(|f| {
                self.caps.changed(f);
                ok(self.client.removexattr(f, name.as_bytes()))
            }),
        );
    }
}
