//! `nacre getstripe`: a file's layout or a directory's default, read from the mount's
//! `user.nacre.lov` value and printed as `lfs getstripe` prints it.

use super::{getxattr, XATTR_LOV};
use anyhow::Context;
use serde_json::Value;
use std::path::Path;

/// The layout JSON of `path`.
pub fn layout(path: &Path) -> anyhow::Result<Value> {
    let raw = getxattr(path, XATTR_LOV)
        .with_context(|| format!("{}: cannot read layout", path.display()))?;
    Ok(serde_json::from_slice(&raw)?)
}

/// Formats a layout as `lfs getstripe` does: a plain layout (a file's of one component, a
/// directory's default of one) as it always has, a composite one in Lustre's composite form
/// (`lcm_*`, then `lcme_*` and `lmm_*` per component).
pub fn format_layout(path: &Path, v: &Value) -> String {
    let mut s = format!("{}\n", path.display());
    match v["kind"].as_str() {
        Some("file") => match composite_components(v) {
            Some(components) => {
                let generation = v["generation"].as_u64().unwrap_or(0);
                s += &format_composite(generation, components, false);
            }
            None => s += &format_plain_file(v),
        },
        Some("dir") => match composite_components(&v["default"]) {
            Some(components) => s += &format_composite(0, components, true),
            None => s += &format_plain_default(&v["default"]),
        },
        _ => s += "(no layout)\n",
    }
    s
}

/// The components of a composite layout value (a file's, or a directory's `default`); None
/// for a plain one: one component, or no `components` key (a value from an older mount).
fn composite_components(v: &Value) -> Option<&[Value]> {
    v["components"]
        .as_array()
        .filter(|c| c.len() > 1)
        .map(Vec::as_slice)
}

/// A plain file layout, `lfs getstripe`'s `lmm_*` lines and object table.
fn format_plain_file(v: &Value) -> String {
    let objects = v["objects"].as_array().cloned().unwrap_or_default();
    let first = objects
        .first()
        .map_or(0, |o| o["ost"].as_u64().unwrap_or(0));
    let mut s = format!("lmm_stripe_count:  {}\n", v["stripe_count"]);
    s += &format!("lmm_stripe_size:   {}\n", v["stripe_size"]);
    s += "lmm_pattern:       raid0\n";
    s += &format!("lmm_stripe_offset: {first}\n");
    if let Some(pool) = v["pool"].as_str().filter(|p| !p.is_empty()) {
        s += &format!("lmm_pool:          {pool}\n");
    }
    s += "\tobdidx\t\t objid\t\t objid\t\t group\n";
    for o in objects {
        let id = o["id"].as_u64().unwrap_or(0);
        let ost = o["ost"].as_u64().unwrap_or(0);
        let seq = o["seq"].as_u64().unwrap_or(0);
        s += &format!("\t{ost:>6}\t{id:>14}\t{id:>#14x}\t{seq:>14}\n");
    }
    s
}

/// A directory's plain default (`d`; null: none), on one line.
fn format_plain_default(d: &Value) -> String {
    if !d.is_object() {
        return "stripe_count:  0 stripe_size:   0 pattern:       raid0 stripe_offset: -1 (file system default)\n".to_string();
    }
    let pool = match d["pool"].as_str() {
        Some(p) if !p.is_empty() => format!(" pool:          {p}"),
        _ => String::new(),
    };
    format!(
        "stripe_count:  {} stripe_size:   {} pattern:       raid0 stripe_offset: {}{pool}\n",
        d["stripe_count"], d["stripe_size"], d["start_ost"]
    )
}

/// A composite layout in Lustre's form: its `lcm_*` header, then each component. A
/// directory's default (`template`) has no component ids (`N/A`) and no objects.
fn format_composite(generation: u64, components: &[Value], template: bool) -> String {
    let mut s = format!("  lcm_layout_gen:    {generation}\n");
    s += "  lcm_mirror_count:  1\n";
    s += &format!("  lcm_entry_count:   {}\n", components.len());
    for (i, c) in components.iter().enumerate() {
        let id = if template {
            "N/A".to_string()
        } else {
            (i + 1).to_string()
        };
        s += &format_component(&id, c);
    }
    s
}

/// One component of a composite layout: `lcme_*` (its id, `init` once instantiated, its
/// extent), its striping (`lmm_*`; the first OST is its first object's, or the one asked
/// for until it has objects) and its objects.
fn format_component(id: &str, c: &Value) -> String {
    let objects: &[Value] = match c["objects"].as_array() {
        Some(objects) => objects,
        None => &[],
    };
    let instantiated = c["instantiated"].as_bool().unwrap_or(!objects.is_empty());
    let offset = match objects.first() {
        Some(o) => o["ost"].as_i64().unwrap_or(0),
        None => c["start_ost"].as_i64().unwrap_or(-1),
    };
    let flags = if instantiated { "init" } else { "0" };
    let start = c["start"].as_u64().unwrap_or(0);
    // A component on the MDT prints as Lustre's DoM: no stripes, its extent one stripe.
    let pattern = c["pattern"].as_str().unwrap_or("raid0");
    let count = match pattern {
        "mdt" => 0,
        _ => c["stripe_count"].as_i64().unwrap_or(0),
    };
    let size = c["stripe_size"].as_u64().unwrap_or(0);
    let mut s = format!("    lcme_id:             {id}\n");
    s += &format!("    lcme_flags:          {flags}\n");
    s += &format!("    lcme_extent.e_start: {start}\n");
    s += &format!("    lcme_extent.e_end:   {}\n", extent_end(&c["end"]));
    s += &format!("      lmm_stripe_count:  {count}\n");
    s += &format!("      lmm_stripe_size:   {size}\n");
    s += &format!("      lmm_pattern:       {pattern}\n");
    s += "      lmm_layout_gen:    0\n";
    s += &format!("      lmm_stripe_offset: {offset}\n");
    if let Some(pool) = c["pool"].as_str().filter(|p| !p.is_empty()) {
        s += &format!("      lmm_pool:          {pool}\n");
    }
    if instantiated && !objects.is_empty() {
        s += "      lmm_objects:\n";
        for (i, o) in objects.iter().enumerate() {
            s += &format_object(i, o);
        }
    }
    s
}

/// A component's end as `lfs getstripe` prints it: `EOF` for the end of the file (-1).
fn extent_end(end: &Value) -> String {
    match end.as_u64() {
        Some(e) if e != u64::MAX => e.to_string(),
        _ => "EOF".to_string(),
    }
}

/// Object `i` of a component, as an `lmm_objects` entry: its OST and its FID.
fn format_object(i: usize, o: &Value) -> String {
    let ost = o["ost"].as_u64().unwrap_or(0);
    let seq = o["seq"].as_u64().unwrap_or(0);
    let id = o["id"].as_u64().unwrap_or(0);
    format!("      - {i}: {{ l_ost_idx: {ost}, l_fid: [{seq:#x}:{id:#x}:0x0] }}\n")
}
