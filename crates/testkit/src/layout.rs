//! What `nacre getstripe --json` says of a path, for tests that check where data went.

use crate::nacre_ok;
use std::path::Path;

/// (pool, OST of each object) of a file, or a directory's default pool (and no OSTs).
pub fn pool_of(path: &Path) -> (String, Vec<u64>) {
    let v: serde_json::Value = serde_json::from_str(&nacre_ok(&[
        "getstripe",
        "--json",
        path.to_str().expect("a UTF-8 path"),
    ]))
    .expect("getstripe --json prints JSON");
    match v["kind"].as_str() {
        Some("file") => (
            v["pool"].as_str().unwrap_or("").to_string(),
            v["objects"]
                .as_array()
                .expect("a file's objects")
                .iter()
                .map(|o| o["ost"].as_u64().expect("an object's OST"))
                .collect(),
        ),
        _ => (
            v["default"]["pool"].as_str().unwrap_or("").to_string(),
            Vec::new(),
        ),
    }
}
