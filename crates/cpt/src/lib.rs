//! CPU partitions (CPTs), as Lustre's libcfs defines them for SMP node affinity.
//!
//! A partition is a set of CPUs (never spanning NUMA nodes when the table is derived from the
//! topology). Server services run a thread pool per partition, pinned to its CPUs
//! (`pin_current_thread`: `sched_setaffinity`), with per-partition queues, so a request is
//! served by threads whose caches and memory are local.
//!
//! The topology is read from `/sys` (`Topology::read`). A table comes from, in order of
//! precedence:
//!
//! * `cpu_pattern`, Lustre's syntax: `"0[0-7] 1[8-15]"` (partition index, CPUs in brackets,
//!   ranges and commas), or the NUMA form `"N 0[0] 1[1]"` (brackets hold NUMA node ids);
//! * `cpu_npartitions=N`: N partitions, the CPUs of each NUMA node split evenly;
//! * the automatic default from `/sys` (Lustre's estimate: one partition up to 4 CPUs, then
//!   the smallest power of two `n` with `2 n² >= CPUs`, rounded to whole NUMA nodes).
//!
//! docs/tuning.md says how to choose.

use std::collections::BTreeMap;
use std::path::Path;

/// Most partitions a table may have.
pub const PARTITIONS_MAX: usize = 256;
/// Highest CPU number accepted.
pub const CPU_MAX: usize = 8191;
/// Longest pattern accepted.
pub const PATTERN_BYTES_MAX: usize = 4096;

/// Why a table could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CptError {
    /// A token of `cpu_pattern` is malformed or names something that does not exist.
    #[error("cpu_pattern: bad token '{token}': {why}")]
    BadToken {
        /// The offending token.
        token: String,
        /// What is wrong with it.
        why: String,
    },
    /// The pattern as a whole is wrong.
    #[error("cpu_pattern: {0}")]
    Pattern(String),
    /// `cpu_npartitions` cannot be satisfied.
    #[error("cpu_npartitions={0}: {1}")]
    Count(usize, String),
    /// The machine's topology could not be read.
    #[error("CPU topology: {0}")]
    Topology(String),
}

/// The CPUs and NUMA nodes of the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// Online CPUs per NUMA node, nodes and CPUs ascending.
    pub nodes: BTreeMap<usize, Vec<usize>>,
}

impl Topology {
    /// Reads `/sys/devices/system/{cpu,node}`; a machine without NUMA information is one node.
    pub fn read() -> Result<Topology, CptError> {
        Topology::read_from(Path::new("/sys/devices/system"))
    }

    /// Reads a sysfs tree rooted at `sys` (for tests).
    pub fn read_from(sys: &Path) -> Result<Topology, CptError> {
        let online = std::fs::read_to_string(sys.join("cpu/online")).map_err(|e| {
            CptError::Topology(format!("{}: {e}", sys.join("cpu/online").display()))
        })?;
        let online = parse_cpu_list(online.trim())
            .map_err(|why| CptError::Topology(format!("cpu/online: {why}")))?;
        let mut nodes: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        if let Ok(dir) = std::fs::read_dir(sys.join("node")) {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(id) = name.strip_prefix("node").and_then(|n| n.parse().ok()) else {
                    continue;
                };
                let Ok(list) = std::fs::read_to_string(e.path().join("cpulist")) else {
                    continue;
                };
                let cpus: Vec<usize> = parse_cpu_list(list.trim())
                    .map_err(|why| CptError::Topology(format!("{name}/cpulist: {why}")))?
                    .into_iter()
                    .filter(|c| online.contains(c))
                    .collect();
                if !cpus.is_empty() {
                    nodes.insert(id, cpus);
                }
            }
        }
        if nodes.is_empty() {
            nodes.insert(0, online);
        }
        Ok(Topology { nodes })
    }

    /// A single-node topology of CPUs `0..cpus` (for tests and tools).
    pub fn flat(cpus: usize) -> Topology {
        Topology {
            nodes: BTreeMap::from([(0, (0..cpus).collect())]),
        }
    }

    /// Every online CPU, ascending.
    pub fn cpus(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self.nodes.values().flatten().copied().collect();
        all.sort_unstable();
        all
    }

    fn node_of(&self, cpu: usize) -> Option<usize> {
        self.nodes
            .iter()
            .find(|(_, cpus)| cpus.contains(&cpu))
            .map(|(n, _)| *n)
    }
}

/// Parses a Linux/Lustre CPU list: `0-3,8,10-11` (empty is an error).
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    if s.trim().is_empty() {
        return Err("empty CPU list".into());
    }
    for part in s.split(',') {
        let part = part.trim();
        let num = |t: &str| -> Result<usize, String> {
            let v: usize = t
                .trim()
                .parse()
                .map_err(|_| format!("'{t}' is not a number"))?;
            if v > CPU_MAX {
                return Err(format!("{v} is above the highest CPU number {CPU_MAX}"));
            }
            Ok(v)
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("range '{part}' runs backwards"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(part)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// One CPU partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Its CPUs, ascending.
    pub cpus: Vec<usize>,
    /// NUMA nodes those CPUs belong to.
    pub nodes: Vec<usize>,
}

/// The partition table of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CptTable {
    parts: Vec<Partition>,
}

impl CptTable {
    fn from_sets(sets: Vec<Vec<usize>>, topo: &Topology) -> CptTable {
        let parts = sets
            .into_iter()
            .map(|mut cpus| {
                cpus.sort_unstable();
                let mut nodes: Vec<usize> = cpus.iter().filter_map(|c| topo.node_of(*c)).collect();
                nodes.sort_unstable();
                nodes.dedup();
                Partition { cpus, nodes }
            })
            .collect();
        CptTable { parts }
    }

    /// Lustre's `cpu_pattern`.
    pub fn from_pattern(pattern: &str, topo: &Topology) -> Result<CptTable, CptError> {
        if pattern.len() > PATTERN_BYTES_MAX {
            return Err(CptError::Pattern(format!(
                "longer than {PATTERN_BYTES_MAX} bytes"
            )));
        }
        let mut tokens = tokenize(pattern)?;
        let numa = tokens.first().map(String::as_str) == Some("N");
        if numa {
            tokens.remove(0);
        }
        if tokens.is_empty() {
            return Err(CptError::Pattern("no partitions given".into()));
        }
        let bad = |token: &str, why: String| CptError::BadToken {
            token: token.to_string(),
            why,
        };
        let online = topo.cpus();
        let mut by_index: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut owner: BTreeMap<usize, usize> = BTreeMap::new();
        for token in &tokens {
            let (index, list) = token
                .strip_suffix(']')
                .and_then(|t| t.split_once('['))
                .ok_or_else(|| bad(token, "expected INDEX[LIST], e.g. 0[0-3]".into()))?;
            let index: usize = index
                .parse()
                .map_err(|_| bad(token, format!("partition index '{index}' is not a number")))?;
            if index >= PARTITIONS_MAX {
                return Err(bad(
                    token,
                    format!("partition index above {}", PARTITIONS_MAX - 1),
                ));
            }
            if by_index.contains_key(&index) {
                return Err(bad(token, format!("partition {index} given twice")));
            }
            let ids = parse_cpu_list(list).map_err(|why| bad(token, why))?;
            let mut cpus = Vec::new();
            if numa {
                for node in ids {
                    let Some(node_cpus) = topo.nodes.get(&node) else {
                        return Err(bad(
                            token,
                            format!(
                                "NUMA node {node} does not exist (nodes: {:?})",
                                topo.nodes.keys().collect::<Vec<_>>()
                            ),
                        ));
                    };
                    cpus.extend(node_cpus.iter().copied());
                }
            } else {
                for cpu in ids {
                    if !online.contains(&cpu) {
                        return Err(bad(token, format!("CPU {cpu} is not online")));
                    }
                    cpus.push(cpu);
                }
            }
            for &cpu in &cpus {
                if let Some(other) = owner.insert(cpu, index) {
                    return Err(bad(
                        token,
                        format!("CPU {cpu} is already in partition {other}"),
                    ));
                }
            }
            by_index.insert(index, cpus);
        }
        let n = by_index.len();
        if let Some((&last, _)) = by_index.iter().next_back() {
            if last + 1 != n {
                return Err(CptError::Pattern(format!(
                    "partition indices must be 0..{} without gaps",
                    n - 1
                )));
            }
        }
        Ok(CptTable::from_sets(by_index.into_values().collect(), topo))
    }

    /// `cpu_npartitions=n`: every NUMA node's CPUs split evenly into `n / nodes` partitions
    /// (or, with fewer partitions than nodes, whole nodes grouped).
    pub fn with_npartitions(n: usize, topo: &Topology) -> Result<CptTable, CptError> {
        let cpus = topo.cpus();
        if n == 0 || n > PARTITIONS_MAX {
            return Err(CptError::Count(
                n,
                format!("must be 1..={PARTITIONS_MAX} (0 means automatic)"),
            ));
        }
        if n > cpus.len() {
            return Err(CptError::Count(
                n,
                format!("more partitions than the {} online CPUs", cpus.len()),
            ));
        }
        let nodes: Vec<&Vec<usize>> = topo.nodes.values().collect();
        let sets = if n >= nodes.len() && n.is_multiple_of(nodes.len()) {
            let per_node = n / nodes.len();
            let mut sets = Vec::new();
            for node in &nodes {
                if node.len() < per_node {
                    return Err(CptError::Count(
                        n,
                        format!("a NUMA node has only {} CPUs", node.len()),
                    ));
                }
                sets.extend(split_even(node, per_node));
            }
            sets
        } else if n < nodes.len() && nodes.len().is_multiple_of(n) {
            let per_part = nodes.len() / n;
            nodes
                .chunks(per_part)
                .map(|group| group.iter().flat_map(|c| c.iter().copied()).collect())
                .collect()
        } else {
            // Node boundaries cannot be kept: split all CPUs evenly.
            split_even(&cpus, n)
        };
        Ok(CptTable::from_sets(sets, topo))
    }

    /// Lustre's automatic estimate for this topology.
    pub fn auto(topo: &Topology) -> CptTable {
        let ncpu = topo.cpus().len().max(1);
        let nnode = topo.nodes.len().max(1);
        let mut n = if ncpu <= 4 {
            1
        } else {
            let mut n = 2;
            while ncpu > 2 * n * n {
                n <<= 1;
            }
            n
        };
        if nnode > 1 {
            n = n.max(nnode).div_ceil(nnode) * nnode;
            while n > ncpu {
                n -= nnode;
            }
        }
        CptTable::with_npartitions(n.max(1), topo)
            .unwrap_or_else(|_| CptTable::from_sets(vec![topo.cpus()], topo))
    }

    /// The table a process uses: `pattern` if given, else `npartitions` if non-zero, else the
    /// automatic default.
    pub fn configure(
        pattern: Option<&str>,
        npartitions: usize,
        topo: &Topology,
    ) -> Result<CptTable, CptError> {
        match pattern {
            Some(p) if !p.trim().is_empty() => CptTable::from_pattern(p, topo),
            _ if npartitions > 0 => CptTable::with_npartitions(npartitions, topo),
            _ => Ok(CptTable::auto(topo)),
        }
    }

    /// Number of partitions.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Always false: a table has at least one partition.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Partition `i`.
    pub fn partition(&self, i: usize) -> &Partition {
        &self.parts[i % self.parts.len()]
    }

    /// The partition CPU `cpu` belongs to.
    pub fn of_cpu(&self, cpu: usize) -> Option<usize> {
        self.parts.iter().position(|p| p.cpus.contains(&cpu))
    }

    /// Lustre's `cpu_partition_table` rendering: `0\t: 0 1 2 3` per partition.
    pub fn render(&self) -> String {
        self.parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let cpus: Vec<String> = p.cpus.iter().map(usize::to_string).collect();
                format!("{i}\t: {}\n", cpus.join(" "))
            })
            .collect()
    }
}

/// Splits a pattern into tokens: whitespace-separated, but a bracket group may contain spaces.
fn tokenize(pattern: &str) -> Result<Vec<String>, CptError> {
    let mut tokens = Vec::new();
    let mut cur = String::new();
    let mut depth = 0;
    for c in pattern.chars() {
        match c {
            '[' => {
                if depth > 0 {
                    return Err(CptError::BadToken {
                        token: format!("{cur}["),
                        why: "nested '['".into(),
                    });
                }
                depth += 1;
                cur.push(c);
            }
            ']' => {
                if depth == 0 {
                    return Err(CptError::BadToken {
                        token: format!("{cur}]"),
                        why: "']' without '['".into(),
                    });
                }
                depth -= 1;
                cur.push(c);
                tokens.push(std::mem::take(&mut cur));
            }
            c if c.is_whitespace() && depth == 0 => {
                if !cur.is_empty() {
                    tokens.push(std::mem::take(&mut cur));
                }
            }
            c if c.is_whitespace() => {}
            c => cur.push(c),
        }
    }
    if depth > 0 {
        return Err(CptError::BadToken {
            token: cur,
            why: "'[' without ']'".into(),
        });
    }
    if !cur.is_empty() {
        tokens.push(cur);
    }
    Ok(tokens)
}

/// `items` in `n` contiguous groups whose sizes differ by at most one.
fn split_even(items: &[usize], n: usize) -> Vec<Vec<usize>> {
    (0..n)
        .map(|i| items[i * items.len() / n..(i + 1) * items.len() / n].to_vec())
        .collect()
}

/// Pins the calling thread to `cpus` (`sched_setaffinity`).
pub fn pin_current_thread(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write inside it; sched_setaffinity
    // reads it for the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for &c in cpus {
            if c < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c, &mut set);
            }
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nodes() -> Topology {
        Topology {
            nodes: BTreeMap::from([(0, (0..8).collect()), (1, (8..16).collect())]),
        }
    }

    #[test]
    fn lustre_patterns_parse() {
        let t = CptTable::from_pattern("0[0-7] 1[8-15]", &two_nodes()).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.partition(1).cpus, (8..16).collect::<Vec<_>>());
        assert_eq!(t.partition(1).nodes, vec![1]);
        let t = CptTable::from_pattern("0[0,2,4-6] 1[1, 3]", &two_nodes()).unwrap();
        assert_eq!(t.partition(0).cpus, vec![0, 2, 4, 5, 6]);
        assert_eq!(t.partition(1).cpus, vec![1, 3]);
        assert_eq!(t.render(), "0\t: 0 2 4 5 6\n1\t: 1 3\n");
        let numa = CptTable::from_pattern("N 0[0] 1[1]", &two_nodes()).unwrap();
        assert_eq!(numa.partition(0).cpus, (0..8).collect::<Vec<_>>());
        assert_eq!(numa.partition(1).cpus, (8..16).collect::<Vec<_>>());
        let one = CptTable::from_pattern("N 0[0-1]", &two_nodes()).unwrap();
        assert_eq!(one.partition(0).nodes, vec![0, 1]);
        assert_eq!(one.of_cpu(9), Some(0));
    }

    #[test]
    fn bad_patterns_name_the_bad_token() {
        let topo = two_nodes();
        let err = |p: &str| CptTable::from_pattern(p, &topo).unwrap_err().to_string();
        assert_eq!(
            err("0[0-3] x[4-7]"),
            "cpu_pattern: bad token 'x[4-7]': partition index 'x' is not a number"
        );
        assert!(err("0[0-3] 1[4-99]").contains("'1[4-99]': CPU 16 is not online"));
        assert!(err("0[0-3] 1[3-5]").contains("'1[3-5]': CPU 3 is already in partition 0"));
        assert!(err("0[0-3] 0[4-5]").contains("'0[4-5]': partition 0 given twice"));
        assert!(err("0[5-2]").contains("'0[5-2]': range '5-2' runs backwards"));
        assert!(err("0[a]").contains("'0[a]': 'a' is not a number"));
        assert!(err("0[0-3] 1[4").contains("'1[4': '[' without ']'"));
        assert!(err("0 1").contains("bad token '0': expected INDEX[LIST]"));
        assert!(err("N 0[0] 1[7]").contains("'1[7]': NUMA node 7 does not exist"));
        assert!(err("0[0] 2[1]").contains("indices must be 0..1 without gaps"));
        assert!(err("0[]").contains("'0[]': empty CPU list"));
        assert_eq!(err(""), "cpu_pattern: no partitions given");
    }

    #[test]
    fn npartitions_keep_numa_nodes_whole() {
        let t = CptTable::with_npartitions(4, &two_nodes()).unwrap();
        let sets: Vec<_> = (0..4).map(|i| t.partition(i).cpus.clone()).collect();
        assert_eq!(
            sets,
            vec![
                vec![0, 1, 2, 3],
                vec![4, 5, 6, 7],
                vec![8, 9, 10, 11],
                vec![12, 13, 14, 15]
            ]
        );
        assert!((0..4).all(|i| t.partition(i).nodes.len() == 1));
        let one = CptTable::with_npartitions(1, &two_nodes()).unwrap();
        assert_eq!(one.partition(0).cpus.len(), 16);
        assert!(CptTable::with_npartitions(17, &two_nodes())
            .unwrap_err()
            .to_string()
            .contains("more partitions than the 16 online CPUs"));
        assert!(CptTable::with_npartitions(0, &two_nodes()).is_err());
        let three = CptTable::with_npartitions(3, &Topology::flat(8)).unwrap();
        assert_eq!(three.partition(2).cpus, vec![5, 6, 7]);
    }

    #[test]
    fn automatic_default_follows_lustre() {
        assert_eq!(CptTable::auto(&Topology::flat(2)).len(), 1);
        assert_eq!(CptTable::auto(&Topology::flat(4)).len(), 1);
        assert_eq!(CptTable::auto(&Topology::flat(16)).len(), 4);
        assert_eq!(CptTable::auto(&Topology::flat(96)).len(), 8);
        let t = CptTable::auto(&two_nodes());
        assert_eq!(t.len(), 4);
        assert!((0..4).all(|i| t.partition(i).nodes.len() == 1));
    }

    /// A ThunderX2-like aarch64 server (DDN's Lustre study: 2 sockets of 48 cores, one NUMA
    /// node each), read from a recorded /sys tree: Lustre's estimate (libcfs
    /// `cfs_cpt_num_estimate`: the power of two N with 2(N/2)^2 < 96 <= 2N^2, rounded to a
    /// multiple of the nodes) is 8 partitions, 4 per socket, of 12 cores each, none across
    /// a socket; the same with `cpu_npartitions=8`, and 2 with `cpu_npartitions=2`.
    #[test]
    fn a_two_socket_48_core_arm_server_gets_lustres_table() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("cpu")).unwrap();
        std::fs::write(d.path().join("cpu/online"), "0-95\n").unwrap();
        for (n, l) in [("node0", "0-47\n"), ("node1", "48-95\n")] {
            std::fs::create_dir_all(d.path().join("node").join(n)).unwrap();
            std::fs::write(d.path().join("node").join(n).join("cpulist"), l).unwrap();
        }
        // Files of a real tree the reader must pass over.
        std::fs::write(d.path().join("node/possible"), "0-1\n").unwrap();
        let topo = Topology::read_from(d.path()).unwrap();
        assert_eq!(topo.cpus().len(), 96);
        let t = CptTable::auto(&topo);
        assert_eq!(t.len(), 8);
        for i in 0..8 {
            let p = t.partition(i);
            let first = i * 12;
            assert_eq!(
                p.cpus,
                (first..first + 12).collect::<Vec<_>>(),
                "partition {i}"
            );
            assert_eq!(p.nodes, vec![i / 4], "partition {i} stays on its socket");
        }
        assert_eq!(CptTable::configure(None, 8, &topo).unwrap(), t);
        let two = CptTable::configure(None, 2, &topo).unwrap();
        assert_eq!(two.partition(1).cpus, (48..96).collect::<Vec<_>>());
        assert_eq!(two.partition(1).nodes, vec![1]);
    }

    #[test]
    fn topology_reads_sysfs() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("cpu")).unwrap();
        std::fs::write(d.path().join("cpu/online"), "0-5\n").unwrap();
        for (n, l) in [("node0", "0-2"), ("node1", "3-5")] {
            std::fs::create_dir_all(d.path().join("node").join(n)).unwrap();
            std::fs::write(d.path().join("node").join(n).join("cpulist"), l).unwrap();
        }
        let t = Topology::read_from(d.path()).unwrap();
        assert_eq!(t.nodes[&1], vec![3, 4, 5]);
        let real = Topology::read().unwrap();
        assert!(!real.cpus().is_empty());
    }

    #[test]
    fn pinning_is_visible_in_proc() {
        let cpus = Topology::read().unwrap().cpus();
        let want = vec![cpus[cpus.len() - 1]];
        let got = std::thread::spawn(move || {
            pin_current_thread(&want).unwrap();
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
            let line = status
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .unwrap()
                .to_string();
            (line, want)
        })
        .join()
        .unwrap();
        assert_eq!(
            got.0.split_whitespace().nth(1).unwrap(),
            got.1[0].to_string()
        );
    }
}
