//! One file system for a test, in either form users run: embedded (`nacre up`: one process,
//! in-process transport between client and servers) or networked (an MGS+MDT server process,
//! OSS processes on their own loopback addresses, and a separate `nacre mount` client process,
//! everything over TCP). Tests written against [`TestFs`] run the same assertions on both;
//! [`on_both_forms!`](crate::on_both_forms) turns a `fn name(form: Form)` into two tests,
//! `embedded::name` and `networked::name`.

use crate::{free_port_at, mkfs, test_dir, ClientMount, Embedded, ServerProc};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The form a test file system takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// `nacre up`: MGS, MDTs, OSTs and the client mount in one process.
    Embedded,
    /// `nacre server` processes (MGS+MDT0 on 127.0.0.1, further MDTs on 127.0.0.4, OSTs split
    /// over two OSS processes on 127.0.0.2 and 127.0.0.3) and a `nacre mount` process.
    Networked,
}

/// What a test file system is made of.
#[derive(Clone, Debug)]
pub struct Spec {
    /// OSTs (at least 1).
    pub osts: u32,
    /// MDTs (at least 1).
    pub mdts: u32,
    /// File system name.
    pub fsname: String,
    /// Client options (`nacre mount` options; also given to `nacre up`).
    pub mount_args: Vec<String>,
    /// Target options (given to every `nacre server`, and to `nacre up`).
    pub server_args: Vec<String>,
    /// Every process (servers and client) exports OpenMetrics at an address of its own.
    pub metrics: bool,
    /// A fault point armed in the client's process (`NACRE_FAULT`; the embedded form's one
    /// process).
    pub client_fault: Option<String>,
}

impl Spec {
    /// A file system of `osts` OSTs and one MDT named `nacre`.
    pub fn osts(osts: u32) -> Spec {
        Spec {
            osts,
            mdts: 1,
            fsname: "nacre".into(),
            mount_args: Vec::new(),
            server_args: Vec::new(),
            metrics: false,
            client_fault: None,
        }
    }

    /// With fault point `spec` armed in the client's process.
    pub fn client_fault(mut self, spec: &str) -> Spec {
        self.client_fault = Some(spec.into());
        self
    }

    /// With an OpenMetrics `/metrics` address for every process ([`TestFs::metrics_addrs`]).
    pub fn metrics(mut self) -> Spec {
        self.metrics = true;
        self
    }

    /// With `mdts` MDTs.
    pub fn mdts(mut self, mdts: u32) -> Spec {
        self.mdts = mdts;
        self
    }

    /// Named `fsname`.
    pub fn fsname(mut self, fsname: &str) -> Spec {
        self.fsname = fsname.into();
        self
    }

    /// With these client options.
    pub fn mount_args(mut self, args: &[&str]) -> Spec {
        self.mount_args = args.iter().map(|s| s.to_string()).collect();
        self
    }

    /// With these target options.
    pub fn server_args(mut self, args: &[&str]) -> Spec {
        self.server_args = args.iter().map(|s| s.to_string()).collect();
        self
    }
}

/// A mounted test file system of either [`Form`]; unmounted and stopped on drop.
pub struct TestFs {
    /// The form it runs in.
    pub form: Form,
    /// The spec it was made from.
    pub spec: Spec,
    /// Mount point.
    pub mnt: PathBuf,
    /// Directory holding the targets: `mgs`, `mdtN`, `ostN`.
    pub data: PathBuf,
    /// The MGS's NID (`127.0.0.1:PORT@tcp`), for native clients, admin commands, more mounts.
    pub mgs_nid: String,
    /// The `/metrics` addresses of its processes (with [`Spec::metrics`]): the one process of
    /// the embedded form; each server, then the client, of the networked form.
    pub metrics_addrs: Vec<String>,
    // Dropped in this order: the client before the servers, the directories last.
    client: Option<ClientMount>,
    embedded: Option<Embedded>,
    servers: Vec<ServerProc>,
    _root: Option<tempfile::TempDir>,
    // Released last: the name is free again once every process of this file system is gone.
    _name: NameClaim,
}

/// A test's claim on a file system name other than the default `nacre`, held while its
/// processes live. `nacre ctl get_param` asks every nacre process of the node, so two test
/// file systems of one name running at once (tests run in parallel; `on_both_forms!` runs a
/// test's two forms under one name) would add up each other's counters: a test waits until
/// no other test of this binary runs a file system of its name.
struct NameClaim(Option<String>);

type Claims = Vec<(String, std::thread::ThreadId)>;

static NAMES_IN_USE: (std::sync::Mutex<Claims>, std::sync::Condvar) =
    (std::sync::Mutex::new(Vec::new()), std::sync::Condvar::new());

impl NameClaim {
    fn take(fsname: &str) -> NameClaim {
        if fsname == Spec::osts(1).fsname {
            return NameClaim(None);
        }
        let (names, freed) = &NAMES_IN_USE;
        let mut names = names.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::thread::current().id();
        while let Some((_, holder)) = names.iter().find(|(n, _)| n == fsname) {
            assert!(
                *holder != me,
                "this test already runs a file system named {fsname}: it would wait for itself"
            );
            names = freed.wait(names).unwrap_or_else(|e| e.into_inner());
        }
        names.push((fsname.to_owned(), me));
        NameClaim(Some(fsname.to_owned()))
    }
}

impl Drop for NameClaim {
    fn drop(&mut self) {
        if let Some(name) = self.0.take() {
            let (names, freed) = &NAMES_IN_USE;
            names
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(n, _)| *n != name);
            freed.notify_all();
        }
    }
}

impl TestFs {
    /// Starts a file system of `osts` OSTs in `form`.
    pub fn start(form: Form, osts: u32) -> TestFs {
        TestFs::start_with(form, Spec::osts(osts))
    }

    /// Starts the file system `spec` describes in `form`, mounted.
    pub fn start_with(form: Form, spec: Spec) -> TestFs {
        assert!(
            spec.osts >= 1 && spec.mdts >= 1,
            "a file system needs an MDT and an OST"
        );
        let name = NameClaim::take(&spec.fsname);
        let mut fs = match form {
            Form::Embedded => TestFs::start_embedded(spec),
            Form::Networked => TestFs::start_networked(spec),
        };
        fs._name = name;
        fs
    }

    fn start_embedded(spec: Spec) -> TestFs {
        let port = free_port_at("127.0.0.1");
        let listen = format!("127.0.0.1:{port}");
        let mdts = spec.mdts.to_string();
        let mut extra = vec![
            "--fsname",
            &spec.fsname,
            "--mdts",
            &mdts,
            "--listen",
            &listen,
        ];
        extra.extend(spec.mount_args.iter().map(String::as_str));
        extra.extend(spec.server_args.iter().map(String::as_str));
        let metrics_addrs = metrics_addrs(spec.metrics, 1);
        if let Some(addr) = metrics_addrs.first() {
            extra.extend(["--metrics", addr]);
        }
        let mut fs = Embedded::unstarted(spec.osts, &extra);
        fs.env
            .extend(spec.client_fault.iter().map(|f| format!("NACRE_FAULT={f}")));
        fs.up();
        TestFs {
            form: Form::Embedded,
            mnt: fs.mnt.clone(),
            data: fs.data.clone(),
            mgs_nid: format!("{listen}@tcp"),
            metrics_addrs,
            spec,
            client: None,
            embedded: Some(fs),
            servers: Vec::new(),
            _root: None,
            _name: NameClaim(None),
        }
    }

    fn start_networked(spec: Spec) -> TestFs {
        let root = tempfile::Builder::new()
            .prefix("nacre-test")
            .tempdir_in(test_dir())
            .expect("tempdir");
        let data = root.path().join("data");
        let d = |name: String| data.join(name);
        let mgs_listen = format!("127.0.0.1:{}", free_port_at("127.0.0.1"));
        let mgs_nid = format!("{mgs_listen}@tcp");
        let fsname = spec.fsname.as_str();
        mkfs("--mgs", 0, fsname, None, &d("mgs".into()));
        for i in 0..spec.mdts {
            mkfs("--mdt", i, fsname, Some(&mgs_nid), &d(format!("mdt{i}")));
        }
        for i in 0..spec.osts {
            mkfs("--ost", i, fsname, Some(&mgs_nid), &d(format!("ost{i}")));
        }
        // Which targets each server process serves: MGS+MDT0; the other MDTs; two OSS halves.
        let mut groups = vec![("127.0.0.1", vec![d("mgs".into()), d("mdt0".into())])];
        if spec.mdts > 1 {
            groups.push((
                "127.0.0.4",
                (1..spec.mdts).map(|i| d(format!("mdt{i}"))).collect(),
            ));
        }
        let half = spec.osts.div_ceil(2);
        groups.push((
            "127.0.0.2",
            (0..half).map(|i| d(format!("ost{i}"))).collect(),
        ));
        if spec.osts > half {
            groups.push((
                "127.0.0.3",
                (half..spec.osts).map(|i| d(format!("ost{i}"))).collect(),
            ));
        }
        let metrics_addrs = metrics_addrs(spec.metrics, groups.len() + 1);
        let mut servers = Vec::new();
        for (i, (addr, dirs)) in groups.into_iter().enumerate() {
            let listen = match i {
                0 => mgs_listen.clone(),
                _ => format!("{addr}:{}", free_port_at(addr)),
            };
            let mut extra: Vec<&str> = spec.server_args.iter().map(String::as_str).collect();
            if let Some(m) = metrics_addrs.get(i) {
                extra.extend(["--metrics", m]);
            }
            let refs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
            servers.push(ServerProc::start_at(&listen, &refs, &extra));
        }
        let mnt = root.path().join("mnt");
        let source = format!("{mgs_nid}:/{fsname}");
        let mut mount_args: Vec<&str> = spec.mount_args.iter().map(String::as_str).collect();
        if let Some(m) = metrics_addrs.last() {
            mount_args.extend(["--metrics", m]);
        }
        let client = ClientMount::mount_in(&client_prefix(&spec), &source, &mnt, &mount_args);
        TestFs {
            form: Form::Networked,
            mnt,
            data,
            mgs_nid,
            metrics_addrs,
            spec,
            client: Some(client),
            embedded: None,
            servers,
            _root: Some(root),
            _name: NameClaim(None),
        }
    }

    /// Path inside the mount.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// The mount source, `MGS_NID:/FSNAME`.
    pub fn source(&self) -> String {
        format!("{}:/{}", self.mgs_nid, self.spec.fsname)
    }

    /// A further client process mounting this file system at `mnt` (a directory the test owns).
    pub fn mount_another(&self, mnt: &Path, extra: &[&str]) -> ClientMount {
        ClientMount::mount(&self.source(), mnt, extra)
    }

    /// The pids of the processes serving targets (one for the embedded form).
    pub fn server_pids(&self) -> Vec<u32> {
        match &self.embedded {
            Some(_) => self.client_pid().into_iter().collect(),
            None => self.servers.iter().map(ServerProc::pid).collect(),
        }
    }

    /// The server processes of the networked form (MGS+MDT0 first, then the other MDTs' if
    /// any, then the OSSes); none for the embedded form.
    pub fn servers_mut(&mut self) -> &mut [ServerProc] {
        &mut self.servers
    }

    /// The pid of the process serving the mount (`nacre up` itself in the embedded form).
    pub fn client_pid(&self) -> Option<u32> {
        if let Some(client) = &self.client {
            return client.pid();
        }
        let want = self.mnt.display().to_string();
        crate::pid_of_command(|args| args.iter().any(|a| a == "up") && args.contains(&want))
    }

    /// The embedded file system, if that is the form (for stop/restart tests).
    pub fn embedded(&self) -> Option<&Embedded> {
        self.embedded.as_ref()
    }

    /// Stops every process of the file system cleanly (unmount, SIGTERM) and starts it again
    /// from its targets, mounted at the same place.
    pub fn restart(&mut self) {
        self.stop();
        self.resume();
    }

    /// Unmounts and stops every process cleanly (`nacre down`; or unmount, then SIGTERM to
    /// each server, which must exit within 30 s).
    pub fn stop(&mut self) {
        if let Some(e) = &self.embedded {
            e.down();
            return;
        }
        self.client = None;
        for s in self.servers.iter_mut().rev() {
            assert!(
                s.terminate(Duration::from_secs(30)),
                "server {} did not stop",
                s.listen
            );
        }
    }

    /// Starts a file system [`TestFs::stop`] stopped, mounted at the same place.
    pub fn resume(&mut self) {
        if let Some(e) = &self.embedded {
            e.up();
            return;
        }
        for s in &mut self.servers {
            s.restart();
        }
        let args = self.client_mount_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let prefix = client_prefix(&self.spec);
        self.client = Some(ClientMount::mount_in(
            &prefix,
            &self.source(),
            &self.mnt,
            &args,
        ));
    }

    fn client_mount_args(&self) -> Vec<String> {
        let mut args = self.spec.mount_args.clone();
        if self.spec.metrics {
            args.extend([
                "--metrics".to_string(),
                self.metrics_addrs.last().cloned().unwrap(),
            ]);
        }
        args
    }

    /// Where the tests of this file system may keep other files (outside the mount; removed
    /// with it).
    pub fn scratch(&self) -> &Path {
        self.data
            .parent()
            .expect("data lies in the test's directory")
    }
}

/// The command prefix of the client process: `env NACRE_FAULT=...` with a client fault.
fn client_prefix(spec: &Spec) -> Vec<String> {
    match &spec.client_fault {
        Some(f) => vec!["env".into(), format!("NACRE_FAULT={f}")],
        None => Vec::new(),
    }
}

/// `n` free loopback addresses for `/metrics` endpoints, if `wanted`.
fn metrics_addrs(wanted: bool, n: usize) -> Vec<String> {
    match wanted {
        true => (0..n)
            .map(|_| format!("127.0.0.1:{}", free_port_at("127.0.0.1")))
            .collect(),
        false => Vec::new(),
    }
}

/// Turns functions `fn NAME(form: Form)` into tests `embedded::NAME` and `networked::NAME`.
#[macro_export]
macro_rules! on_both_forms {
    ($($name:ident),+ $(,)?) => {
        /// The tests on the embedded form (`nacre up`).
        mod embedded {
            $(#[test]
            fn $name() {
                super::$name($crate::Form::Embedded)
            })+
        }
        /// The tests on the networked form (server processes and a client process over TCP).
        mod networked {
            $(#[test]
            fn $name() {
                super::$name($crate::Form::Networked)
            })+
        }
    };
}
