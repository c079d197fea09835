//! The parameter tree.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// Longest parameter name accepted.
pub const NAME_BYTES_MAX: usize = 256;

/// Why a parameter could not be set.
#[derive(Debug, PartialEq, Eq)]
pub enum ParamError {
    /// No parameter of that name.
    NotFound(String),
    /// The parameter is read-only.
    ReadOnly(String),
    /// The value is not acceptable.
    BadValue(String),
}

impl std::fmt::Display for ParamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamError::NotFound(n) => write!(f, "{n}: no such parameter"),
            ParamError::ReadOnly(n) => write!(f, "{n}: read-only parameter"),
            ParamError::BadValue(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for ParamError {}

/// One parameter: renders its value, and may accept a new one.
pub trait Param: Send + Sync {
    /// Current value (may span lines).
    fn get(&self) -> String;
    /// Sets a value; statistics accept `0` (clear).
    fn set(&self, _value: &str) -> Result<(), String> {
        Err("read-only".into())
    }
    /// True if `set` can succeed.
    fn writable(&self) -> bool {
        false
    }
}

/// The setter type of a read-only [`FnParam`].
type Setter = fn(&str) -> Result<(), String>;

/// A parameter made of closures.
pub struct FnParam<G, S> {
    get: G,
    set: Option<S>,
}

impl<G, S> Param for FnParam<G, S>
where
    G: Fn() -> String + Send + Sync,
    S: Fn(&str) -> Result<(), String> + Send + Sync,
{
    fn get(&self) -> String {
        (self.get)()
    }
    fn set(&self, value: &str) -> Result<(), String> {
        match &self.set {
            Some(s) => s(value),
            None => Err("read-only".into()),
        }
    }
    fn writable(&self) -> bool {
        self.set.is_some()
    }
}

/// Shell-style match of one dotted name against a pattern: `*` and `?` within a component,
/// components compared one by one (a `*` never spans a dot).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let n: Vec<&str> = name.split('.').collect();
    p.len() == n.len()
        && p.iter()
            .zip(&n)
            .all(|(p, n)| component_match(p.as_bytes(), n.as_bytes()))
}

fn component_match(p: &[u8], n: &[u8]) -> bool {
    match (p.first(), n.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            component_match(&p[1..], n) || (!n.is_empty() && component_match(p, &n[1..]))
        }
        (Some(b'?'), Some(_)) => component_match(&p[1..], &n[1..]),
        (Some(a), Some(b)) if a == b => component_match(&p[1..], &n[1..]),
        _ => false,
    }
}

/// Parameters set on one process by its root only (`nacre ctl set_param`, `NACRE_FAULT`),
/// never stored by the MGS nor applied from it: test instruments such as fault points.
pub const LOCAL_ONLY: &[&str] = &["fail_loc", "fail_fired"];

/// The local-only parameter `pattern` names or matches (a glob such as `fail_*` or `*`
/// too), if any.
pub fn local_only_match(pattern: &str) -> Option<&'static str> {
    LOCAL_ONLY.iter().find(|n| glob_match(pattern, n)).copied()
}

/// The parameters of one process.
#[derive(Default, Clone)]
pub struct Registry {
    params: Arc<RwLock<BTreeMap<String, Arc<dyn Param>>>>,
}

impl Registry {
    /// Adds (or replaces) a parameter.
    pub fn add(&self, name: impl Into<String>, param: Arc<dyn Param>) {
        let name = name.into();
        assert!(name.len() <= NAME_BYTES_MAX, "parameter name too long");
        self.params.write().expect("params").insert(name, param);
    }

    /// Adds a read-only parameter computed by `get`.
    pub fn add_fn(
        &self,
        name: impl Into<String>,
        get: impl Fn() -> String + Send + Sync + 'static,
    ) {
        let p: FnParam<_, Setter> = FnParam { get, set: None };
        self.add(name, Arc::new(p));
    }

    /// Adds a read-write parameter.
    pub fn add_rw(
        &self,
        name: impl Into<String>,
        get: impl Fn() -> String + Send + Sync + 'static,
        set: impl Fn(&str) -> Result<(), String> + Send + Sync + 'static,
    ) {
        self.add(
            name,
            Arc::new(FnParam {
                get,
                set: Some(set),
            }),
        );
    }

    /// Removes every parameter whose name starts with `prefix`.
    pub fn remove_prefix(&self, prefix: &str) {
        self.params
            .write()
            .expect("params")
            .retain(|k, _| !k.starts_with(prefix));
    }

    /// Parameters matching `pattern`, taken out of the lock (their getters and setters may be
    /// slow or take other locks).
    fn matching(&self, pattern: &str) -> Vec<(String, Arc<dyn Param>)> {
        self.params
            .read()
            .expect("params")
            .iter()
            .filter(|(k, _)| glob_match(pattern, k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Names matching `pattern`, in order.
    pub fn list(&self, pattern: &str) -> Vec<String> {
        self.params
            .read()
            .expect("params")
            .keys()
            .filter(|k| glob_match(pattern, k))
            .cloned()
            .collect()
    }

    /// (name, value) of every parameter matching `pattern`.
    pub fn get(&self, pattern: &str) -> Vec<(String, String)> {
        let matched = self.matching(pattern);
        matched.into_iter().map(|(k, p)| (k, p.get())).collect()
    }

    /// Sets every parameter matching `pattern`; returns the names set.
    pub fn set(&self, pattern: &str, value: &str) -> Result<Vec<String>, ParamError> {
        self.set_matched(self.matching(pattern), pattern, value)
    }

    /// Sets a parameter the MGS stored (`set_param -P`): as [`Registry::set`], but never a
    /// local-only one ([`LOCAL_ONLY`]), whatever the pattern matches.
    pub fn set_persistent(&self, pattern: &str, value: &str) -> Result<Vec<String>, ParamError> {
        let mut matched = self.matching(pattern);
        matched.retain(|(name, _)| !LOCAL_ONLY.contains(&name.as_str()));
        self.set_matched(matched, pattern, value)
    }

    fn set_matched(
        &self,
        matched: Vec<(String, Arc<dyn Param>)>,
        pattern: &str,
        value: &str,
    ) -> Result<Vec<String>, ParamError> {
        if matched.is_empty() {
            return Err(ParamError::NotFound(pattern.into()));
        }
        let mut done = Vec::new();
        for (name, p) in matched {
            if !p.writable() {
                return Err(ParamError::ReadOnly(name));
            }
            p.set(value)
                .map_err(|e| ParamError::BadValue(format!("{name}={value}: {e}")))?;
            done.push(name);
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn wildcards() {
        assert!(glob_match("osd.*.brw_stats", "osd.demo-OST0000.brw_stats"));
        assert!(!glob_match("osd.*", "osd.demo-OST0000.brw_stats"));
        assert!(glob_match("*.*.stats", "ost.demo-OST0001.stats"));
        assert!(glob_match(
            "osd.demo-OST000?.direct_io",
            "osd.demo-OST0003.direct_io"
        ));
        assert!(!glob_match(
            "osd.demo-OST000?.direct_io",
            "osd.demo-OST0010.direct_io"
        ));
    }

    #[test]
    fn stored_settings_never_reach_local_only_parameters() {
        let r = Registry::default();
        let armed = Arc::new(std::sync::Mutex::new(String::new()));
        let a = armed.clone();
        r.add_rw("fail_loc", String::new, move |v| {
            *a.lock().unwrap() = v.to_string();
            Ok(())
        });
        r.add_rw("jobid_var", String::new, |_| Ok(()));
        for pattern in ["fail_loc", "fail_*", "*"] {
            assert_eq!(local_only_match(pattern), Some("fail_loc"), "{pattern}");
            let set = r.set_persistent(pattern, "net.panic");
            assert!(set.map_or(true, |names| !names.contains(&"fail_loc".to_string())));
        }
        assert_eq!(
            *armed.lock().unwrap(),
            "",
            "never armed from a stored setting"
        );
        assert_eq!(local_only_match("osd.*.direct_io"), None);
        r.set("fail_loc", "x").unwrap();
        assert_eq!(*armed.lock().unwrap(), "x", "set locally");
    }

    #[test]
    fn get_set_list() {
        let r = Registry::default();
        let v = Arc::new(AtomicU64::new(1));
        let (g, s) = (v.clone(), v.clone());
        r.add_rw(
            "osc.a.max_rpcs_in_flight",
            move || g.load(Ordering::Relaxed).to_string(),
            move |x| {
                s.store(
                    x.parse().map_err(|_| "not a number".to_string())?,
                    Ordering::Relaxed,
                );
                Ok(())
            },
        );
        r.add_fn("osc.a.state", || "FULL".into());
        assert_eq!(r.list("osc.a.*").len(), 2);
        assert_eq!(
            r.set("osc.*.max_rpcs_in_flight", "16").unwrap(),
            vec!["osc.a.max_rpcs_in_flight"]
        );
        assert_eq!(r.get("osc.a.max_rpcs_in_flight")[0].1, "16");
        assert!(matches!(
            r.set("osc.a.state", "x"),
            Err(ParamError::ReadOnly(_))
        ));
        assert!(matches!(
            r.set("osc.a.max_rpcs_in_flight", "x"),
            Err(ParamError::BadValue(_))
        ));
        assert!(matches!(r.set("nope.*", "1"), Err(ParamError::NotFound(_))));
    }
}
