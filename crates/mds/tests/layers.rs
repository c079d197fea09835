//! The layers of nacre-mds (issue 42; docs/mds.md, docs/plans/mds-layers.md): every file
//! of `src/` belongs to one layer of [`LAYERS`] (the table [`FILES`]) and uses only its own
//! layer and those below it; no three or more files reach each other round in a circle
//! (crates/testkit/src/imports.rs: a strongly connected set of files; two files may use each
//! other).
//!
//! The store layer is a crate of its own, nacre-mdstore (crates/mdstore: the records and
//! their formats, transactions, the allocation of FIDs and objects), below every file here:
//! Cargo keeps it from using any of them. Above it, only `mdt.rs` names the KV store
//! (`nacre_kv`: the store handle an MDT is opened on, and the sync tickets of its commit
//! thread), which [`only_the_mdt_names_the_kv_store`] checks.

use nacre_testkit::imports::{file_graph, long_circles, upward};
use std::collections::HashMap;

/// The layers, lowest first.
const LAYERS: &[&str] = &["base", "target", "ops", "services", "handler"];

/// Every file of `src/` and its layer.
const FILES: &[(&str, &str)] = &[
    ("destroy_space.rs", "base"),
    ("export.rs", "base"),
    ("fileset_cache.rs", "base"),
    ("flocks.rs", "base"),
    ("nodemap.rs", "base"),
    ("osp.rs", "base"),
    ("sizes.rs", "base"),
    ("stats.rs", "base"),
    ("atime.rs", "target"),
    ("changelog_state.rs", "target"),
    ("changelog_writer.rs", "target"),
    ("mdt.rs", "target"),
    ("peers.rs", "target"),
    ("placement.rs", "target"),
    ("replay.rs", "target"),
    ("replay_mdt.rs", "target"),
    ("dne.rs", "ops"),
    ("links.rs", "ops"),
    ("migrate.rs", "ops"),
    ("ops/atime_flush.rs", "ops"),
    ("ops/batch.rs", "ops"),
    ("ops/unlink_batch.rs", "ops"),
    ("ops/access_batch.rs", "ops"),
    ("ops/create.rs", "ops"),
    ("ops/dir_stripe.rs", "ops"),
    ("ops/dom.rs", "ops"),
    ("ops/getattr.rs", "ops"),
    ("ops/layout.rs", "ops"),
    ("ops/link.rs", "ops"),
    ("ops/link_remote.rs", "ops"),
    ("ops/lookup.rs", "ops"),
    ("ops/mkdir.rs", "ops"),
    ("ops/mkdir_remote.rs", "ops"),
    ("ops/mkdir_striped.rs", "ops"),
    ("ops/mod.rs", "ops"),
    ("ops/open.rs", "ops"),
    ("ops/readdir.rs", "ops"),
    ("ops/readlink.rs", "ops"),
    ("ops/remote_update.rs", "ops"),
    ("ops/rename.rs", "ops"),
    ("ops/rename_remote.rs", "ops"),
    ("ops/rename_steps.rs", "ops"),
    ("ops/rmdir.rs", "ops"),
    ("ops/rmdir_remote.rs", "ops"),
    ("ops/rmdir_striped.rs", "ops"),
    ("ops/scan.rs", "ops"),
    ("ops/setattr.rs", "ops"),
    ("ops/symlink.rs", "ops"),
    ("ops/unlink.rs", "ops"),
    ("ops/unlink_remote.rs", "ops"),
    ("ops/xattr.rs", "ops"),
    ("admin_records.rs", "services"),
    ("batch_locks.rs", "services"),
    ("changelog.rs", "services"),
    ("destroy.rs", "services"),
    ("eviction.rs", "services"),
    ("delegations.rs", "services"),
    ("locks.rs", "services"),
    ("owners.rs", "services"),
    ("perm.rs", "services"),
    ("qos.rs", "services"),
    ("quota.rs", "services"),
    ("relayout.rs", "services"),
    ("capas.rs", "handler"),
    ("execute.rs", "handler"),
    ("fileset.rs", "handler"),
    ("flock_serve.rs", "handler"),
    ("lib.rs", "handler"),
    ("route.rs", "handler"),
];

#[test]
fn layers_import_only_downward_and_files_form_no_circles() {
    let src = nacre_testkit::package_dir(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = file_graph(&src);
    let mut errors = Vec::new();
    let mut layer_of: HashMap<String, usize> = HashMap::new();
    for (file, layer) in FILES {
        let Some(i) = LAYERS.iter().position(|l| l == layer) else {
            errors.push(format!(
                "FILES gives src/{file} the unknown layer {layer:?}"
            ));
            continue;
        };
        if layer_of.insert(file.to_string(), i).is_some() {
            errors.push(format!("FILES lists src/{file} twice"));
        }
        if !g.files.iter().any(|f| f == file) {
            errors.push(format!("FILES lists src/{file}, which does not exist"));
        }
    }
    for f in &g.files {
        if !layer_of.contains_key(f) {
            errors.push(format!(
                "src/{f} is in no layer: add it to FILES in tests/layers.rs"
            ));
        }
    }
    for (from, line, to) in upward(&g, &layer_of) {
        errors.push(format!(
            "src/{from}:{line} ({}) uses src/{to} ({}, a higher layer)",
            LAYERS[layer_of[&from]], LAYERS[layer_of[&to]]
        ));
    }
    for ring in long_circles(&g) {
        errors.push(format!(
            "a circle of {} files: {}",
            ring.len(),
            ring.join(" -> ")
        ));
    }
    assert!(
        errors.is_empty(),
        "{} layering problem(s) in nacre-mds:\n{}",
        errors.len(),
        errors.join("\n")
    );
}

/// Above the store crate, no file but `mdt.rs` names `nacre_kv`: operations and services
/// reach records only through `nacre_mdstore`.
#[test]
fn only_the_mdt_names_the_kv_store() {
    let src = nacre_testkit::package_dir(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = file_graph(&src);
    assert!(
        g.files.len() > 40,
        "{} files under {}",
        g.files.len(),
        src.display()
    );
    let mut naming = Vec::new();
    for f in &g.files {
        let text = std::fs::read_to_string(src.join(f)).unwrap();
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        if code.contains("nacre_kv") && f != "mdt.rs" {
            naming.push(f.clone());
        }
    }
    assert!(naming.is_empty(), "files that name nacre_kv: {naming:?}");
}
