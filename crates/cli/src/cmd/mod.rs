//! One module per command: its arguments (clap) and what it runs.

pub(crate) mod bench;
pub(crate) mod changelog;
pub(crate) mod common;
pub(crate) mod ctl;
pub(crate) mod df;
pub(crate) mod dirs;
pub(crate) mod docs;
pub(crate) mod lfsck;
pub(crate) mod migrate;
pub(crate) mod mkfs;
pub(crate) mod mount;
pub(crate) mod plan;
pub(crate) mod policy;
pub(crate) mod pool;
pub(crate) mod selftest;
pub(crate) mod server;
pub(crate) mod stripe;
pub(crate) mod top;
pub(crate) mod up;

pub(crate) use bench::*;
pub(crate) use changelog::*;
pub(crate) use common::*;
pub(crate) use ctl::*;
pub(crate) use df::*;
pub(crate) use lfsck::*;
pub(crate) use mkfs::*;
pub(crate) use mount::*;
pub(crate) use plan::*;
pub(crate) use policy::*;
pub(crate) use pool::*;
pub(crate) use selftest::*;
pub(crate) use server::*;
pub(crate) use stripe::*;
pub(crate) use up::*;
