//! Benchmark tasks spread over threads, processes and hosts, as an MPI job spreads IOR's.
//!
//! A [`Workload`] says what one task does in one phase. A [`Team`] runs each phase on all
//! tasks at once and measures it from the moment every task may start to the moment the last
//! one is done (IOR's `-g` barriers). In-process, tasks are threads. With hosts, the leader
//! starts one worker process per host through a launcher (`ssh {host}`, `ip netns exec
//! {host}`, …), the workers connect back over TCP, and each phase is a command the leader sends
//! to every worker at once; workers report progress while they run and their results at the
//! end. Messages are JSON lines, bounded in size.

use crate::storage::{Api, Storage};
use crate::BenchError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::ops::Range;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Longest message between leader and workers.
pub const MESSAGE_BYTES_MAX: usize = 16 << 20;
/// How often progress is sampled (and reported by workers).
pub const TICK_MS: u64 = 250;
/// Most hosts one run may use.
pub const HOSTS_MAX: usize = 1024;

/// What one task does in one phase.
pub trait Workload: Sync {
    /// A phase command.
    type Cmd: Serialize + DeserializeOwned + Clone + Send + Sync;
    /// A task's result of a phase (merged over tasks).
    type Out: Serialize + DeserializeOwned + Default + Send;
    /// Runs task `task`'s part of `cmd`, adding finished units (bytes, items) to `done`.
    fn task(
        &self,
        cmd: &Self::Cmd,
        task: usize,
        storage: &dyn Storage,
        done: &AtomicU64,
    ) -> Result<Self::Out, BenchError>;
    /// Folds `other` into `into`.
    fn merge(into: &mut Self::Out, other: Self::Out);
}

/// Where the tasks run.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// Hosts; empty means threads of this process.
    pub hosts: Vec<String>,
    /// Command prefix that runs a command on `{host}`, e.g. `ssh {host}`.
    pub launcher: String,
    /// Address the leader listens on for its workers (must be reachable from the hosts).
    pub listen: Option<SocketAddr>,
    /// How long workers may take to connect.
    pub connect_timeout_ms: u64,
}

/// Tasks of host `i` of `hosts` when `tasks` are spread in blocks (MPI's default mapping).
pub fn host_tasks(tasks: usize, hosts: usize, i: usize) -> Range<usize> {
    (i * tasks / hosts)..((i + 1) * tasks / hosts)
}

/// One progress sample: seconds since the run began, phase label, units done in the phase.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds since the start of the run.
    pub t: f64,
    /// Phase label.
    pub phase: String,
    /// Units (bytes or items) finished so far in the phase.
    pub done: u64,
}

/// Progress of a run: samples for charts and an optional live line on stderr.
pub struct Recorder {
    start: Instant,
    /// Every sample taken.
    pub samples: Vec<Sample>,
    live: bool,
    unit: &'static str,
    scale: f64,
}

impl Recorder {
    /// A recorder; `live` prints a progress line; units are shown divided by `scale`.
    pub fn new(live: bool, unit: &'static str, scale: f64) -> Recorder {
        Recorder {
            start: Instant::now(),
            samples: Vec::new(),
            live,
            unit,
            scale,
        }
    }

    fn record(&mut self, phase: &str, done: u64, expected: u64, phase_start: Instant) {
        let now = Instant::now();
        self.samples.push(Sample {
            t: now.duration_since(self.start).as_secs_f64(),
            phase: phase.to_string(),
            done,
        });
        if self.live {
            let secs = now.duration_since(phase_start).as_secs_f64().max(1e-9);
            let pct = if expected > 0 {
                100.0 * done as f64 / expected as f64
            } else {
                0.0
            };
            eprint!(
                "\r{phase}: {pct:5.1}% {:.1} {}/s, {:.1} s   ",
                done as f64 / self.scale / secs,
                self.unit,
                secs
            );
            let _ = std::io::stderr().flush();
        }
    }

    fn end_phase(&mut self) {
        if self.live {
            eprint!("\r{:70}\r", "");
        }
    }
}

/// Runs `cmd` on `tasks` as threads between barriers; `tick` is called every [`TICK_MS`] with
/// the units done so far. Returns the merged result and the wall time.
pub fn run_local<W: Workload>(
    work: &W,
    cmd: &W::Cmd,
    tasks: Range<usize>,
    storage: &dyn Storage,
    mut tick: impl FnMut(u64),
) -> Result<(W::Out, f64), BenchError> {
    let n = tasks.len();
    let done = AtomicU64::new(0);
    let barrier = Barrier::new(n + 1);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for t in tasks {
            let (barrier, done, tx) = (&barrier, &done, tx.clone());
            scope.spawn(move || {
                storage.enter_task();
                barrier.wait();
                let r = work.task(cmd, t, storage, done);
                let _ = tx.send(r);
            });
        }
        drop(tx);
        barrier.wait();
        let start = Instant::now();
        let mut out = W::Out::default();
        let mut first_err = None;
        let mut finished = 0;
        while finished < n {
            match rx.recv_timeout(Duration::from_millis(TICK_MS)) {
                Ok(Ok(o)) => {
                    W::merge(&mut out, o);
                    finished += 1;
                }
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                    finished += 1;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => tick(done.load(Ordering::Relaxed)),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let secs = start.elapsed().as_secs_f64();
        match first_err {
            Some(e) => Err(e),
            None => Ok((out, secs)),
        }
    })
}

/// The job a worker is asked to run: which workload (`kind`, as the worker module knows
/// them) and its parameters. The team carries it without knowing the workloads.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Job {
    /// The workload: "ior", "mdtest" or "selftest".
    pub kind: String,
    /// Its parameters.
    pub params: serde_json::Value,
}

impl Job {
    /// The job of workload `kind` with `params`.
    pub fn new(kind: &str, params: &impl Serialize) -> Result<Job, BenchError> {
        Ok(Job {
            kind: kind.to_string(),
            params: serde_json::to_value(params).map_err(|e| BenchError::Params(e.to_string()))?,
        })
    }
}

#[derive(Serialize, Deserialize)]
enum ToWorker {
    Start {
        job: Job,
        api: Api,
        tasks: (usize, usize),
        host: String,
    },
    Phase(serde_json::Value),
    Exit,
}

#[derive(Serialize, Deserialize)]
enum FromWorker {
    Hello { index: usize },
    Ready(Result<(), String>),
    Progress(u64),
    Done(Result<serde_json::Value, String>),
}

fn send<T: Serialize>(w: &mut TcpStream, m: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(m).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)
}

fn recv<T: DeserializeOwned>(r: &mut impl BufRead) -> std::io::Result<T> {
    let mut line = Vec::new();
    let n = r
        .by_ref()
        .take(MESSAGE_BYTES_MAX as u64)
        .read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    if line.last() != Some(&b'\n') {
        return Err(std::io::Error::other("message too long"));
    }
    serde_json::from_slice(&line).map_err(std::io::Error::other)
}

struct Worker {
    host: String,
    child: Child,
    stream: TcpStream,
    progress: u64,
}

enum Mode {
    Local(Arc<dyn Storage>),
    Remote {
        workers: Vec<Worker>,
        rx: mpsc::Receiver<(usize, std::io::Result<FromWorker>)>,
    },
}

/// A team of tasks running one workload's phases.
pub struct Team<'a, W: Workload> {
    work: &'a W,
    tasks: usize,
    mode: Mode,
    /// Progress samples and the live line.
    pub recorder: Recorder,
}

impl<'a, W: Workload> Team<'a, W> {
    /// Starts the team: opens the storage here, or starts and connects the workers.
    pub fn start(
        work: &'a W,
        job: Job,
        tasks: usize,
        api: &Api,
        placement: &Placement,
        recorder: Recorder,
    ) -> Result<Team<'a, W>, BenchError> {
        let mode = if placement.hosts.is_empty() {
            Mode::Local(api.connect()?)
        } else {
            start_workers(job, tasks, api, placement)?
        };
        Ok(Team {
            work,
            tasks,
            mode,
            recorder,
        })
    }

    /// Runs one phase on every task; `expected` units make the progress percentage.
    pub fn phase(
        &mut self,
        label: &str,
        cmd: &W::Cmd,
        expected: u64,
    ) -> Result<(W::Out, f64), BenchError> {
        let started = Instant::now();
        let rec = &mut self.recorder;
        rec.record(label, 0, expected, started);
        let r = match &mut self.mode {
            Mode::Local(storage) => run_local(self.work, cmd, 0..self.tasks, &**storage, |d| {
                rec.record(label, d, expected, started)
            }),
            Mode::Remote { workers, rx } => remote_phase::<W>(workers, rx, cmd, |d| {
                rec.record(label, d, expected, started)
            }),
        };
        rec.end_phase();
        if let Ok((_, secs)) = &r {
            // The closing sample holds every unit at the measured end time.
            let t = started.duration_since(rec.start).as_secs_f64() + secs;
            rec.samples.push(Sample {
                t,
                phase: label.to_string(),
                done: expected,
            });
        }
        r
    }
}

impl Drop for Worker {
    /// Tells the worker to exit, waits a little, then kills it: no worker outlives its run.
    fn drop(&mut self) {
        let _ = send(&mut self.stream, &ToWorker::Exit);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn remote_phase<W: Workload>(
    workers: &mut [Worker],
    rx: &mpsc::Receiver<(usize, std::io::Result<FromWorker>)>,
    cmd: &W::Cmd,
    mut tick: impl FnMut(u64),
) -> Result<(W::Out, f64), BenchError> {
    let value = serde_json::to_value(cmd).map_err(|e| BenchError::Params(e.to_string()))?;
    let start = Instant::now();
    for w in workers.iter_mut() {
        w.progress = 0;
        send(&mut w.stream, &ToWorker::Phase(value.clone()))
            .map_err(|e| BenchError::Params(format!("worker on {}: {e}", w.host)))?;
    }
    let mut out = W::Out::default();
    let mut first_err = None;
    let mut finished = 0;
    let mut last_tick = Instant::now();
    while finished < workers.len() {
        let msg = match rx.recv_timeout(Duration::from_millis(TICK_MS)) {
            Ok(m) => m,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                tick(workers.iter().map(|w| w.progress).sum());
                last_tick = Instant::now();
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(BenchError::Params("all workers disconnected".into()))
            }
        };
        let host = workers[msg.0].host.clone();
        match msg.1 {
            Ok(FromWorker::Progress(d)) => workers[msg.0].progress = d,
            Ok(FromWorker::Done(Ok(v))) => {
                let o: W::Out = serde_json::from_value(v).map_err(|e| {
                    BenchError::Params(format!("worker on {host}: bad result: {e}"))
                })?;
                W::merge(&mut out, o);
                finished += 1;
            }
            Ok(FromWorker::Done(Err(e))) => {
                first_err.get_or_insert(BenchError::Params(format!("on {host}: {e}")));
                finished += 1;
            }
            Ok(_) => {
                return Err(BenchError::Params(format!(
                    "worker on {host}: unexpected message"
                )))
            }
            Err(e) => {
                return Err(BenchError::Params(format!(
                    "worker on {host} went away during a phase: {e}"
                )))
            }
        }
        if last_tick.elapsed() >= Duration::from_millis(TICK_MS) {
            tick(workers.iter().map(|w| w.progress).sum());
            last_tick = Instant::now();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    match first_err {
        Some(e) => Err(e),
        None => Ok((out, secs)),
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn start_workers(
    job: Job,
    tasks: usize,
    api: &Api,
    placement: &Placement,
) -> Result<Mode, BenchError> {
    let hosts = &placement.hosts;
    if hosts.len() > HOSTS_MAX {
        return Err(BenchError::Params(format!("at most {HOSTS_MAX} hosts")));
    }
    if tasks < hosts.len() {
        return Err(BenchError::Params(format!(
            "{tasks} tasks cannot cover {} hosts: give -N of at least the host count",
            hosts.len()
        )));
    }
    let listen = placement.listen.ok_or_else(|| {
        BenchError::Params(
            "--hosts needs --listen IP:PORT, an address of this machine the hosts can reach".into(),
        )
    })?;
    if listen.ip().is_unspecified() {
        return Err(BenchError::Params(
            "--listen must name a reachable address, not 0.0.0.0".into(),
        ));
    }
    let listener = TcpListener::bind(listen)
        .map_err(|e| BenchError::Params(format!("cannot listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| BenchError::Params(e.to_string()))?;
    let exe = std::env::current_exe().map_err(|e| BenchError::Params(e.to_string()))?;
    let mut children = Vec::new();
    for (i, host) in hosts.iter().enumerate() {
        let cmd = format!(
            "{} {} bench worker --connect {addr} --index {i}",
            placement.launcher.replace("{host}", host),
            shell_quote(&exe.display().to_string())
        );
        let child = Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .spawn()
            .map_err(|e| BenchError::Params(format!("cannot run '{cmd}': {e}")))?;
        children.push(Some(child));
    }
    let kill_all = |children: &mut Vec<Option<Child>>| {
        for c in children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    };
    listener
        .set_nonblocking(true)
        .map_err(|e| BenchError::Params(e.to_string()))?;
    let mut streams: Vec<Option<TcpStream>> = (0..hosts.len()).map(|_| None).collect();
    let deadline = Instant::now() + Duration::from_millis(placement.connect_timeout_ms);
    while streams.iter().any(Option::is_none) {
        for (i, c) in children.iter_mut().enumerate() {
            if streams[i].is_none() {
                if let Some(Ok(Some(status))) = c.as_mut().map(Child::try_wait) {
                    c.take();
                    kill_all(&mut children);
                    return Err(BenchError::Params(format!(
                        "worker on {} exited ({status}) before connecting",
                        hosts[i]
                    )));
                }
            }
        }
        if Instant::now() > deadline {
            kill_all(&mut children);
            return Err(BenchError::Params(format!(
                "workers did not connect to {addr} within {} ms",
                placement.connect_timeout_ms
            )));
        }
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                let _ = s.set_nodelay(true);
                let _ =
                    s.set_read_timeout(Some(Duration::from_millis(placement.connect_timeout_ms)));
                let mut reader = BufReader::new(
                    s.try_clone()
                        .map_err(|e| BenchError::Params(format!("worker connection: {e}")))?,
                );
                match recv::<FromWorker>(&mut reader) {
                    Ok(FromWorker::Hello { index }) if index < hosts.len() => {
                        let _ = s.set_read_timeout(None);
                        streams[index] = Some(s);
                    }
                    _ => continue,
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(BenchError::Params(format!("accept: {e}"))),
        }
    }
    let (tx, rx) = mpsc::channel();
    let mut workers = Vec::new();
    for (i, (s, c)) in streams.into_iter().zip(children).enumerate() {
        workers.push(Worker {
            host: hosts[i].clone(),
            child: c.expect("running"),
            stream: s.expect("connected"),
            progress: 0,
        });
        let stream = &mut workers[i].stream;
        let range = host_tasks(tasks, hosts.len(), i);
        send(
            stream,
            &ToWorker::Start {
                job: job.clone(),
                api: api.clone(),
                tasks: (range.start, range.end),
                host: hosts[i].clone(),
            },
        )
        .map_err(|e| BenchError::Params(format!("worker on {}: {e}", hosts[i])))?;
        let mut reader = BufReader::new(
            stream
                .try_clone()
                .map_err(|e| BenchError::Params(e.to_string()))?,
        );
        let tx = tx.clone();
        std::thread::spawn(move || loop {
            let m = recv::<FromWorker>(&mut reader);
            let stop = m.is_err();
            if tx.send((i, m)).is_err() || stop {
                break;
            }
        });
    }
    // Every worker must have its storage ready before the first phase.
    let mut ready = 0;
    while ready < workers.len() {
        let (i, m) = rx
            .recv_timeout(Duration::from_millis(placement.connect_timeout_ms))
            .map_err(|_| BenchError::Params("workers did not get ready in time".into()))?;
        match m {
            Ok(FromWorker::Ready(Ok(()))) => ready += 1,
            Ok(FromWorker::Ready(Err(e))) => {
                return Err(BenchError::Params(format!(
                    "worker on {}: {e}",
                    workers[i].host
                )))
            }
            _ => {
                return Err(BenchError::Params(format!(
                    "worker on {} failed to start",
                    workers[i].host
                )))
            }
        }
    }
    Ok(Mode::Remote { workers, rx })
}

/// Replaces `{host}` in a path (hosts that mount the file system at different places).
pub fn host_path(path: &Path, host: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(path.display().to_string().replace("{host}", host))
}

/// Runs the phases the leader sends over `stream` (read through `reader`) with `work` on
/// `tasks` until told to exit.
pub(crate) fn serve<W: Workload>(
    work: &W,
    storage: &dyn Storage,
    tasks: Range<usize>,
    stream: &mut TcpStream,
    reader: &mut impl BufRead,
) -> Result<(), BenchError> {
    let lost = |e: std::io::Error| BenchError::Params(format!("leader connection: {e}"));
    loop {
        match recv::<ToWorker>(reader).map_err(lost)? {
            ToWorker::Phase(v) => {
                let cmd: W::Cmd =
                    serde_json::from_value(v).map_err(|e| BenchError::Params(e.to_string()))?;
                let mut progress_stream = stream.try_clone().map_err(lost)?;
                let r = run_local(work, &cmd, tasks.clone(), storage, |d| {
                    let _ = send(&mut progress_stream, &FromWorker::Progress(d));
                });
                let msg = match r {
                    Ok((out, _)) => {
                        FromWorker::Done(serde_json::to_value(out).map_err(|e| e.to_string()))
                    }
                    Err(e) => FromWorker::Done(Err(e.to_string())),
                };
                send(stream, &msg).map_err(lost)?;
            }
            ToWorker::Exit => return Ok(()),
            ToWorker::Start { .. } => {
                return Err(BenchError::Params("second start message".into()))
            }
        }
    }
}

/// A worker's connection to its leader, started: the job, its storage, its tasks and its
/// host name; then [`serve`] runs the phases.
pub(crate) struct Started {
    pub(crate) stream: TcpStream,
    pub(crate) reader: BufReader<TcpStream>,
    pub(crate) job: Job,
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) tasks: Range<usize>,
    pub(crate) host: String,
}

/// Connects to the leader at `leader` as worker `index` and takes its start message.
pub(crate) fn start_worker(leader: SocketAddr, index: usize) -> Result<Started, BenchError> {
    let lost = |e: std::io::Error| BenchError::Params(format!("leader {leader}: {e}"));
    let mut stream = TcpStream::connect(leader).map_err(lost)?;
    let _ = stream.set_nodelay(true);
    send(&mut stream, &FromWorker::Hello { index }).map_err(lost)?;
    let mut reader = BufReader::new(stream.try_clone().map_err(lost)?);
    let ToWorker::Start {
        job,
        api,
        tasks,
        host,
    } = recv(&mut reader).map_err(lost)?
    else {
        return Err(BenchError::Params("expected a start message".into()));
    };
    let storage = match api.connect() {
        Ok(s) => {
            send(&mut stream, &FromWorker::Ready(Ok(()))).map_err(lost)?;
            s
        }
        Err(e) => {
            let _ = send(&mut stream, &FromWorker::Ready(Err(e.to_string())));
            return Err(e);
        }
    };
    Ok(Started {
        stream,
        reader,
        job,
        storage,
        tasks: tasks.0..tasks.1,
        host,
    })
}
