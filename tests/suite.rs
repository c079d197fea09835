//! Nacre's integration tests: real server processes, real FUSE mounts, real sockets. Each
//! module is one suite (a file beside this one); they form one test binary, so the stack
//! is linked once. Run one suite with `cargo test --release -p nacre-tests --test suite --
//! dne::`, one test with its full name (`dne::networked::migrate_is_online_for_writers_and_listers`).

mod api;
mod api_attacks;
mod async_dirops;
mod atime;
mod attacks;
mod batch;
mod bench;
mod changelog;
mod cluster;
mod coherence;
mod composite;
mod cpt;
mod credentials;
mod data_cache;
mod dne;
mod dom;
mod failover;
mod failures;
mod fences;
mod flock;
mod growth;
mod hardening;
mod hostile;
mod imports;
mod keys;
mod locking;
mod migrate_files;
mod multifs;
mod multirail;
mod nodemap;
mod opencache;
mod package;
mod policy;
mod pools;
mod posix;
mod preload;
mod projects;
mod python;
mod qos;
mod quota;
mod racer;
mod recovery;
mod sanityn;
mod scale;
mod security;
mod setid;
mod sizes;
mod stage;
mod stats;
mod striping;
mod tools;
mod writeback;
