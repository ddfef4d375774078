//! The invariants: kmeta's writes against the Lease holder timeline (from the server's write
//! log; with sharding, each child or parent write against the Lease of its namespace's bucket),
//! children without their parent, injected sidecars, the children every parent wants (after the
//! faults stop), credentials in log lines.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant, UNIX_EPOCH};

use kmeta_apiserver::WriteRecord;
use serde_json::Value;

use super::hook::{desired_conf, desired_web};
use super::replicas::{LEASE, SHARD_PREFIX};

/// The resources whose writes belong to a parent's bucket: the children and the parents (their
/// status and finalizers).
const OWNED: &[&str] = &[
    "deployments",
    "configmaps",
    "webs",
    "webs/status",
    "confs",
    "confs/status",
];

/// The identity a kmeta User-Agent names: `kmeta/<version> (<identity>)`.
pub(crate) fn identity_of(user_agent: &str) -> Option<&str> {
    let rest = user_agent.strip_prefix("kmeta/")?;
    let open = rest.find(" (")?;
    rest[open + 2..].strip_suffix(')')
}

/// A successful write of the Lease: after it (somewhere in `(rv_before, rv_after]`) `holder`
/// holds it (an acquisition or renewal; a release is not told apart, which can only hide a
/// violation, never invent one).
struct LeaseWrite {
    holder: String,
    before: u64,
    after: u64,
}

/// Who may hold the Lease at the resourceVersion of a change known to lie in `(b, a]`: the
/// holders of the Lease writes that may be the last one before it. `""`: maybe no holder yet.
fn possible_holders(leases: &[LeaseWrite], b: u64, a: u64) -> BTreeSet<&str> {
    // certainly before the change: committed at or below b
    let before: Vec<&LeaseWrite> = leases.iter().filter(|l| l.after <= b).collect();
    let mut out: BTreeSet<&str> = before
        .iter()
        .filter(|l| !before.iter().any(|m| m.before >= l.after))
        .map(|l| l.holder.as_str())
        .collect();
    if before.is_empty() {
        out.insert("");
    }
    // maybe before, maybe after
    out.extend(
        leases
            .iter()
            .filter(|l| l.after > b && l.before < a)
            .map(|l| l.holder.as_str()),
    );
    out
}

/// Checks every successful kmeta write against the Lease writes of the log: without sharding
/// every write against Lease `default/kmeta`; with `buckets`, every write of a child or parent
/// in namespace `ns` against Lease `default/kmeta-shard-<bucket_of(ns)>` (other writes, Events
/// and Leases among them, are not checked).
#[derive(Default)]
pub(crate) struct LeaseCheck {
    buckets: Option<u32>,
    /// The successful writes of each Lease, in the log's order.
    leases: BTreeMap<String, Vec<LeaseWrite>>,
    pending: Vec<(String, WriteRecord)>,
    pub next_seq: u64,
    pub writes_checked: u64,
    /// Successful kmeta writes no Lease decides (sharding: Events, Leases, cluster-scoped).
    pub writes_unscoped: u64,
    /// Lease writes whose holder differs from the previous write's (acquisitions by another).
    pub handovers: u64,
    newest: Option<std::time::SystemTime>,
}

/// Whether `r` writes the leader Lease (a create names no object: taken for it).
fn is_lease(r: &WriteRecord) -> bool {
    r.resource == "leases"
        && r.namespace.as_deref() == Some("default")
        && r.name.as_deref().is_none_or(|n| n == LEASE)
}

impl LeaseCheck {
    pub(crate) fn new(buckets: Option<u32>) -> LeaseCheck {
        LeaseCheck {
            buckets,
            ..LeaseCheck::default()
        }
    }

    /// The Lease `r` writes, if it is one the check follows.
    fn lease_written(&self, r: &WriteRecord) -> Option<String> {
        match self.buckets {
            None => is_lease(r).then(|| LEASE.to_owned()),
            Some(_) => {
                let name = r.name.as_deref()?;
                let bucket = name.strip_prefix(SHARD_PREFIX)?.strip_prefix('-')?;
                (r.resource == "leases"
                    && r.namespace.as_deref() == Some("default")
                    && !bucket.starts_with("member"))
                .then(|| name.to_owned())
            }
        }
    }

    /// The Lease whose holder alone may make write `r` (not a Lease write).
    pub(crate) fn lease_deciding(&self, r: &WriteRecord) -> Option<String> {
        let Some(buckets) = self.buckets else {
            return Some(LEASE.to_owned());
        };
        let ns = r.namespace.as_deref().filter(|ns| !ns.is_empty())?;
        OWNED.contains(&r.resource.as_str()).then(|| {
            let b = super::shard::bucket_of(ns, buckets);
            format!("{SHARD_PREFIX}-{b}")
        })
    }

    /// The writer of the last successful write of `lease` seen so far.
    pub(crate) fn last_holder(&self, lease: &str) -> Option<&str> {
        self.leases.get(lease)?.last().map(|l| l.holder.as_str())
    }

    /// Takes in new log records; returns the violations among the writes that are now decided
    /// (those answered `settle` before the newest record: every Lease write that may precede
    /// them has been answered by then).
    /// With `all`, every pending write is decided.
    pub(crate) fn feed(
        &mut self,
        records: Vec<WriteRecord>,
        settle: Duration,
        all: bool,
    ) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(first) = records.first()
            && first.seq > self.next_seq
        {
            out.push(format!(
                "write log overflowed: records {}..{} lost",
                self.next_seq, first.seq
            ));
        }
        let newest = records.last().map(|r| r.at).or(self.newest);
        self.newest = newest;
        for r in records {
            self.next_seq = r.seq + 1;
            if !(200..300).contains(&r.code) {
                continue;
            }
            let Some(who) = identity_of(&r.user_agent).map(str::to_owned) else {
                if r.user_agent.starts_with("kmeta/") {
                    out.push(format!(
                        "a kmeta write names no instance (User-Agent {:?}): {} {}",
                        r.user_agent, r.verb, r.resource
                    ));
                }
                continue;
            };
            if let Some(lease) = self.lease_written(&r) {
                let writes = self.leases.entry(lease).or_default();
                if writes.last().is_some_and(|l| l.holder != who) {
                    self.handovers += 1;
                }
                writes.push(LeaseWrite {
                    holder: who,
                    before: r.rv_before,
                    after: r.rv_after,
                });
            } else if r.resource == "leases" && self.buckets.is_some() {
                self.writes_unscoped += 1;
            } else if let Some(lease) = self.lease_deciding(&r) {
                self.pending.push((lease, r));
            } else {
                self.writes_unscoped += 1;
            }
        }
        let Some(newest) = newest else { return out };
        let (ready, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(_, r)| all || r.at + settle <= newest);
        self.pending = wait;
        for (lease, w) in ready {
            self.writes_checked += 1;
            let who = identity_of(&w.user_agent).unwrap_or_default();
            let writes = self
                .leases
                .get(&lease)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let holders = possible_holders(writes, w.rv_before, w.rv_after);
            if !holders.contains(who) {
                let at = w.at.duration_since(UNIX_EPOCH).unwrap_or_default();
                out.push(format!(
                    "write by {who} while Lease {lease} was held by {holders:?}: {} {} {}/{} → {} \
                     at {:.3} (unix s), its change within resourceVersions ({}, {}]",
                    w.verb,
                    w.resource,
                    w.namespace.as_deref().unwrap_or("-"),
                    w.name.as_deref().unwrap_or("(create)"),
                    w.code,
                    at.as_secs_f64(),
                    w.rv_before,
                    w.rv_after
                ));
            }
        }
        out
    }
}

/// What one look at the cluster found.
#[derive(Default)]
pub(crate) struct Look {
    /// `kind/name uid` of children whose controller owner is not a live parent.
    pub orphans: HashSet<String>,
    /// Deployments without the injected sidecar.
    pub sidecar_lost: Vec<String>,
    /// What differs from what the parents want.
    pub unconverged: Vec<String>,
}

fn meta<'a>(o: &'a Value, f: &str) -> &'a str {
    o["metadata"][f].as_str().unwrap_or_default()
}

fn owner_uid(o: &Value) -> Option<&str> {
    o["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)?["uid"]
        .as_str()
}

/// Compares the children with what the live parents want.
pub(crate) fn look(webs: &[Value], confs: &[Value], deps: &[Value], cms: &[Value]) -> Look {
    let mut l = Look::default();
    let uids: HashSet<&str> = webs.iter().chain(confs).map(|p| meta(p, "uid")).collect();
    let children: Vec<(&str, &Value)> = deps
        .iter()
        .map(|d| ("Deployment", d))
        .chain(cms.iter().map(|c| ("ConfigMap", c)))
        .collect();
    for (kind, c) in &children {
        if let Some(owner) = owner_uid(c)
            && !uids.contains(owner)
        {
            l.orphans
                .insert(format!("{kind}/{} {}", meta(c, "name"), meta(c, "uid")));
        }
    }
    for d in deps
        .iter()
        .filter(|d| d["metadata"]["labels"]["soak"] == "web")
    {
        let has = d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["name"] == "sidecar"));
        if !has {
            l.sidecar_lost.push(format!(
                "Deployment/{} uid {} rv {}",
                meta(d, "name"),
                meta(d, "uid"),
                meta(d, "resourceVersion")
            ));
        }
    }
    let by_name = |list: &[Value]| -> HashMap<String, Value> {
        list.iter()
            .map(|o| (meta(o, "name").to_owned(), o.clone()))
            .collect()
    };
    let (deps, cms) = (by_name(deps), by_name(cms));
    for p in webs {
        compare(
            &mut l,
            p,
            &desired_web(p),
            &deps,
            &["/spec/replicas"],
            "/spec/template/spec/containers/0/image",
        );
    }
    for p in confs {
        compare(
            &mut l,
            p,
            &desired_conf(p),
            &cms,
            &["/data/k"],
            "/data/value",
        );
        // children beyond spec.n must be gone
        let n = p["spec"]["n"].as_u64().unwrap_or(1);
        for k in n..3 {
            let name = format!("{}-{k}", meta(p, "name"));
            if cms
                .get(&name)
                .is_some_and(|c| owner_uid(c) == Some(meta(p, "uid")))
            {
                l.unconverged
                    .push(format!("ConfigMap/{name}: spec.n is {n}, still there"));
            }
        }
    }
    l
}

fn compare(
    l: &mut Look,
    parent: &Value,
    want: &[Value],
    have: &HashMap<String, Value>,
    same: &[&str],
    field: &str,
) {
    let uid = meta(parent, "uid");
    for w in want {
        let name = meta(w, "name");
        let kind = w["kind"].as_str().unwrap_or_default();
        let Some(h) = have.get(name) else {
            l.unconverged.push(format!("{kind}/{name} missing"));
            continue;
        };
        if owner_uid(h) != Some(uid) {
            l.unconverged.push(format!(
                "{kind}/{name} not owned by its parent (uid {uid}), owner {:?}",
                owner_uid(h)
            ));
            continue;
        }
        for p in same.iter().chain([&field]) {
            if w.pointer(p) != h.pointer(p) {
                l.unconverged.push(format!(
                    "{kind}/{name}: {p} is {:?}, the parent wants {:?}",
                    h.pointer(p),
                    w.pointer(p)
                ));
            }
        }
    }
}

/// Log lines holding one of `secrets` (file:line: the secret's name only, never its value).
pub(crate) fn credentials_in(logs: &[PathBuf], secrets: &[(&str, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for f in logs {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            for (what, s) in secrets {
                if line.contains(s.as_str()) {
                    out.push(format!("{}:{}: holds the {what}", f.display(), i + 1));
                }
            }
        }
    }
    out
}

/// When orphans were first seen: an orphan is a violation once it outlives `bound` (the server
/// collects garbage at once; kmeta may create a child for a parent deleted meanwhile, which the
/// server then collects).
#[derive(Default)]
pub(crate) struct Orphans(HashMap<String, Instant>);

impl Orphans {
    pub(crate) fn update(&mut self, now: &HashSet<String>, bound: Duration) -> Vec<String> {
        self.0.retain(|k, _| now.contains(k));
        let mut out = Vec::new();
        for o in now {
            let first = *self.0.entry(o.clone()).or_insert_with(Instant::now);
            if first.elapsed() >= bound {
                out.push(format!(
                    "{o}: child without its parent for {:.0} s",
                    first.elapsed().as_secs_f64()
                ));
            }
        }
        out
    }
}

/// The parents whose sync record (`status.kmeta.lastSync` and `history`) holds a record of a
/// sync that wrote children without saying what triggered it: every write kmeta makes is meant
/// to be traced to a watch event, a resync, a relist, a retry or a start.
pub(crate) fn untriggered(parents: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for p in parents {
        let kmeta = p.pointer("/status/kmeta");
        let last = kmeta.and_then(|k| k.get("lastSync"));
        let history = kmeta
            .and_then(|k| k.get("history"))
            .and_then(Value::as_array);
        let records = last.into_iter().chain(history.into_iter().flatten());
        for r in records {
            let wrote = r["children"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["action"] != "LeftAlone"));
            if wrote && r["trigger"].as_str().is_none_or(str::is_empty) {
                out.push(format!(
                    "{}/{} at {}",
                    meta(p, "namespace"),
                    meta(p, "name"),
                    r["time"]
                ));
            }
        }
    }
    out
}
