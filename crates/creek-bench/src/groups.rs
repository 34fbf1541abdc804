//! `creek bench groups`: the Message Groups application of MyriaStore
//! (§2.2, §6) written as user procedures, `examples/procedures/
//! message_groups.creek`, under the paper's mix (Figure 7): 24% membership
//! checks, 1% joins, 71% inbox reads, 4% posts.
//!
//! Three configurations, made by rewriting the keyspace labels of the
//! source before it is registered:
//!
//! * `designed`: members strong, inboxes weak (as the file says). Joins and
//!   membership checks are strong, inbox reads and posts weak (the paper's
//!   25% strong).
//! * `strong`: every keyspace strong, every call strong.
//! * `weak`: every keyspace weak, every call weak.
//!
//! A call of a procedure that writes a strong keyspace is always strong (a
//! weak one would be refused). Each configuration also runs the spam
//! contest (`examples/procedures/contest.creek`, the safe version; 90%
//! `report_spam` to one of two teams, 10% `winner_of`), labels rewritten
//! alike.
//!
//! The runs use `creek bench tpcc|ycsb`'s harness (`load`): `--target
//! sim` in the simulator, `--target cluster` on `creek serve` processes on
//! loopback, the same load flags, and the workload's checks on every
//! replica's committed state once the run drained:
//!
//! * no post reaches a non-member: every inbox entry (whose message names
//!   its group) belongs to a member of that group, and (where op ids are
//!   known, in the simulator) a post's final result equals the entries it
//!   left;
//! * the contest never has two winners: every final view of `winner_of`
//!   names the same team, the committed winner. Preliminary views that
//!   named another team are counted, not failed: they are what weak
//!   reads may show before the order settles.
//!
//! Setup (strong, before the clients start): `proc.register` of the
//! rewritten source, then a bench-only `populate` that puts `--users` users
//! into `--groups` groups (user `u{i}` into `g{i mod groups}`). Joins
//! re-join a user's own group and posts carry one fixed message per group,
//! so, as in the paper, group sizes do not grow; inboxes do.

use std::collections::BTreeMap;

use bytes::Bytes;
use creek_check::history::{History, OpRecord};
use creek_core::ViewKind;
use creek_procs::Registry;
use creek_sim::bench::percentiles;
use creek_sim::rng::Rng;
use creek_sim::workload::{NextOp, Workload};
use creek_types::value::{encode_args, Value};
use creek_types::ProcCall;
use serde_json::{json, Map, Value as Json};

use crate::load::{Common, Plan};

const MESSAGE_GROUPS: &str = include_str!("../../../examples/procedures/message_groups.creek");
const CONTEST: &str = include_str!("../../../examples/procedures/contest.creek");

/// Procedures the benchmark adds to `message_groups.creek`: the paper's
/// membership check, and the setup.
const BENCH_PROCS: &str = r#"
# Bench only: whether user is in group (the paper's membership check).
proc is_member(group: bytes, user: bytes) -> bool {
    return get(members, group ++ "/" ++ user) != nil
}

# Bench only: user u<i> into group g<i mod groups>, for i below users.
proc populate(groups: int, users: int) {
    let i = 0
    while i < users {
        let user = "u" ++ str(i)
        put(members, "g" ++ str(i % groups) ++ "/" ++ user, user)
        i = i + 1
    }
}
"#;

/// Arguments of `creek bench groups`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// Configurations to run: designed, strong, weak.
    #[arg(long, value_delimiter = ',', default_value = "designed,strong,weak")]
    configs: Vec<String>,
    /// Groups.
    #[arg(long, default_value_t = 100)]
    groups: usize,
    /// Users, spread evenly over the groups.
    #[arg(long, default_value_t = 1_000)]
    users: usize,
    /// Skip the spam contest.
    #[arg(long)]
    no_contest: bool,
}

/// Which labels the keyspaces get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Config {
    Designed,
    Strong,
    Weak,
}

impl Config {
    fn parse(s: &str) -> Result<Config, String> {
        match s.trim() {
            "designed" => Ok(Config::Designed),
            "strong" => Ok(Config::Strong),
            "weak" => Ok(Config::Weak),
            other => Err(format!(
                "unknown configuration {other:?} (designed, strong, weak)"
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Config::Designed => "designed",
            Config::Strong => "strong",
            Config::Weak => "weak",
        }
    }

    /// `source` with every `keyspace NAME: LABEL` line relabelled.
    fn rewrite(self, source: &str) -> Result<String, String> {
        let mut declared = 0;
        let mut out = String::with_capacity(source.len());
        for line in source.lines() {
            let decl = line
                .strip_prefix("keyspace ")
                .and_then(|rest| rest.split_once(':'));
            match (decl, self) {
                (Some((name, label)), _) => {
                    declared += 1;
                    let label = match self {
                        Config::Designed => label.trim(),
                        Config::Strong => "strong",
                        Config::Weak => "weak",
                    };
                    out.push_str(&format!("keyspace {}: {label}", name.trim()));
                }
                (None, _) => out.push_str(line),
            }
            out.push('\n');
        }
        if declared == 0 {
            return Err("the source declares no keyspace to relabel".into());
        }
        Ok(out)
    }

    /// Whether a call is strong: `writes_strong` procedures always; the
    /// rest as the configuration says (`strong_as_designed`: the designed
    /// level of a procedure that writes no strong keyspace).
    fn strong(self, writes_strong: bool, strong_as_designed: bool) -> bool {
        match self {
            Config::Designed => writes_strong || strong_as_designed,
            Config::Strong => true,
            Config::Weak => writes_strong,
        }
    }
}

fn bytes(s: &str) -> Value {
    Value::Bytes(Bytes::copy_from_slice(s.as_bytes()))
}

fn register(source: &str) -> ProcCall {
    ProcCall::new("proc.register", encode_args(&[bytes(source)]))
}

/// The key of `key` in keyspace `ks` (`\0ks/KS\0KEY`).
fn ks_key(ks: &str, key: &[u8]) -> Vec<u8> {
    let mut k = format!("\0ks/{ks}\0").into_bytes();
    k.extend_from_slice(key);
    k
}

/// Zipf(0.99) over `n` items, by its cumulative distribution.
fn zipf_cdf(n: usize) -> Vec<f64> {
    let weights: Vec<f64> = (1..=n).map(|i| 1.0 / (i as f64).powf(0.99)).collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    weights
        .iter()
        .map(|w| {
            acc += w / total;
            acc
        })
        .collect()
}

/// The Message Groups mix.
struct Groups {
    config: Config,
    source: String,
    groups: usize,
    users: usize,
    inbox_cdf: Vec<f64>,
}

impl Groups {
    fn new(config: Config, groups: usize, users: usize) -> Result<Groups, String> {
        Ok(Groups {
            config,
            source: config.rewrite(&format!("{MESSAGE_GROUPS}{BENCH_PROCS}"))?,
            groups,
            users,
            inbox_cdf: zipf_cdf(users),
        })
    }

    fn group_of(&self, user: usize) -> usize {
        user % self.groups
    }

    /// Whether `members` is strong in this configuration.
    fn members_strong(&self) -> bool {
        self.config != Config::Weak
    }

    /// Whether `inboxes` is strong in this configuration.
    fn inboxes_strong(&self) -> bool {
        self.config == Config::Strong
    }
}

impl Workload for Groups {
    fn name(&self) -> &'static str {
        "groups"
    }

    fn register(&self, _registry: &mut Registry) {}

    fn setup(&self) -> Vec<ProcCall> {
        vec![
            register(&self.source),
            ProcCall::new(
                "populate",
                encode_args(&[
                    Value::Int(self.groups as i64),
                    Value::Int(self.users as i64),
                ]),
            ),
        ]
    }

    fn next_op(&mut self, rng: &mut Rng, _client: u32) -> NextOp {
        let x = rng.unit();
        let user = rng.index(self.users);
        let (call, strong) = if x < 0.24 {
            let group = rng.index(self.groups);
            let args = [bytes(&format!("g{group}")), bytes(&format!("u{user}"))];
            let call = ProcCall::new("is_member", encode_args(&args));
            (call, self.config.strong(false, true))
        } else if x < 0.25 {
            let group = self.group_of(user);
            let args = [bytes(&format!("g{group}")), bytes(&format!("u{user}"))];
            let call = ProcCall::new("join", encode_args(&args));
            (call, self.config.strong(self.members_strong(), true))
        } else if x < 0.96 {
            let u = self.inbox_cdf.partition_point(|&c| c < rng.unit());
            let user = u.min(self.users - 1);
            let call = ProcCall::new("inbox", encode_args(&[bytes(&format!("u{user}"))]));
            (call, self.config.strong(false, false))
        } else {
            let group = rng.index(self.groups);
            let args = [
                bytes(&format!("g{group}")),
                bytes(&format!("g{group}:hello")),
            ];
            let call = ProcCall::new("post", encode_args(&args));
            (call, self.config.strong(self.inboxes_strong(), false))
        };
        NextOp {
            call,
            strong,
            wants_final: true,
        }
    }

    fn keys(&self, _call: &ProcCall) -> Vec<Bytes> {
        Vec::new()
    }

    fn check(&self, history: &History, committed: &BTreeMap<Bytes, Bytes>) -> Vec<String> {
        let mut bad = Vec::new();
        let inbox_prefix = ks_key("inboxes", b"");
        let mut left_by: BTreeMap<&[u8], i64> = BTreeMap::new();
        for (k, msg) in committed.range(Bytes::from(inbox_prefix.clone())..) {
            let Some(rest) = k.strip_prefix(inbox_prefix.as_slice()) else {
                break;
            };
            let Some(slash) = rest.iter().position(|&b| b == b'/') else {
                bad.push(format!("inbox key {k:?} has no user/op"));
                continue;
            };
            let (user, op) = (&rest[..slash], &rest[slash + 1..]);
            *left_by.entry(op).or_default() += 1;
            let group = msg.split(|&b| b == b':').next().unwrap_or(&[]);
            let mut member = group.to_vec();
            member.push(b'/');
            member.extend_from_slice(user);
            if !committed.contains_key(ks_key("members", &member).as_slice()) {
                bad.push(format!(
                    "{} got a post to {}, of which it is not a member",
                    String::from_utf8_lossy(user),
                    String::from_utf8_lossy(group)
                ));
            }
        }
        for op in history.ops.iter().filter(|op| &*op.call.name == "post") {
            let (Some(id), Some(view)) = (op.id, op.final_view()) else {
                continue;
            };
            let Ok(raw) = &view.outcome else { continue };
            let Ok(Value::Int(n)) = Value::decode(raw) else {
                bad.push(format!("post {id} answered something other than an int"));
                continue;
            };
            let op_id = format!("r{}.{}", id.origin.0, id.seq);
            let left = left_by.get(op_id.as_bytes()).copied().unwrap_or(0);
            if left != n {
                bad.push(format!(
                    "post {id} reported {n} deliveries but left {left} inbox entries"
                ));
            }
        }
        bad.truncate(20);
        bad
    }

    fn measure(&self, ops: &[&OpRecord]) -> Map<String, Json> {
        per_procedure(ops)
    }
}

/// The safe spam contest.
struct Contest {
    config: Config,
    source: String,
}

impl Workload for Contest {
    fn name(&self) -> &'static str {
        "contest"
    }

    fn register(&self, _registry: &mut Registry) {}

    fn setup(&self) -> Vec<ProcCall> {
        vec![register(&self.source)]
    }

    fn next_op(&mut self, rng: &mut Rng, _client: u32) -> NextOp {
        let (call, strong) = if rng.chance(0.9) {
            let team = if rng.chance(0.5) { "a" } else { "b" };
            let call = ProcCall::new("report_spam", encode_args(&[bytes(team), bytes("spam")]));
            (call, self.config.strong(self.config != Config::Weak, false))
        } else {
            let call = ProcCall::new("winner_of", encode_args(&[]));
            (call, self.config.strong(false, false))
        };
        NextOp {
            call,
            strong,
            wants_final: true,
        }
    }

    fn keys(&self, _call: &ProcCall) -> Vec<Bytes> {
        Vec::new()
    }

    fn check(&self, history: &History, committed: &BTreeMap<Bytes, Bytes>) -> Vec<String> {
        let committed_winner = committed
            .get(ks_key("winner", b"winner").as_slice())
            .cloned();
        let mut bad = Vec::new();
        let mut seen: BTreeMap<Bytes, usize> = BTreeMap::new();
        for op in history
            .ops
            .iter()
            .filter(|op| &*op.call.name == "winner_of")
        {
            if let Some(Value::Bytes(w)) = final_value(op) {
                *seen.entry(w).or_default() += 1;
            }
        }
        if seen.len() > 1 {
            bad.push(format!(
                "two winners in final views: {}",
                seen.keys()
                    .map(|w| String::from_utf8_lossy(w).into_owned())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if let Some(w) = seen.keys().next() {
            if committed_winner.as_ref() != Some(w) {
                bad.push(format!(
                    "final views name {} but the committed winner is {:?}",
                    String::from_utf8_lossy(w),
                    committed_winner
                ));
            }
        }
        bad
    }

    fn measure(&self, ops: &[&OpRecord]) -> Map<String, Json> {
        let mut m = per_procedure(ops);
        let mut finals = std::collections::BTreeSet::new();
        let (mut named, mut wrong) = (0u64, 0u64);
        for op in ops.iter().filter(|op| &*op.call.name == "winner_of") {
            let last = final_value(op);
            if let Some(Value::Bytes(w)) = &last {
                finals.insert(w.clone());
            }
            for v in op.views.iter().filter(|v| v.kind == ViewKind::Tentative) {
                let Some(Ok(Value::Bytes(w))) =
                    v.outcome.as_ref().ok().map(|raw| Value::decode(raw))
                else {
                    continue;
                };
                named += 1;
                if last.as_ref() != Some(&Value::Bytes(w)) {
                    wrong += 1;
                }
            }
        }
        m.insert(
            "contest".into(),
            json!({
                "winners_in_final_views": finals.len(),
                "preliminary_views_naming_a_winner": named,
                "preliminary_views_naming_another_winner_than_final": wrong,
            }),
        );
        m
    }
}

/// The decoded outcome of `op`'s final view, if it has one that succeeded.
fn final_value(op: &OpRecord) -> Option<Value> {
    let raw = op.final_view()?.outcome.as_ref().ok()?;
    Value::decode(raw).ok()
}

/// Per procedure: how many, at which level, the latency to the answer the
/// client waits for (a weak op's first view, a strong op's final view)
/// and to the final view, and how many preliminary views differed from
/// the final one.
fn per_procedure(ops: &[&OpRecord]) -> Map<String, Json> {
    let mut by: BTreeMap<String, Vec<&OpRecord>> = BTreeMap::new();
    for op in ops {
        by.entry(op.call.name.to_string()).or_default().push(op);
    }
    let mut out = Map::new();
    for (name, ops) in by {
        let answer = |op: &OpRecord| {
            let view = if op.strong {
                op.final_view()
            } else {
                op.views.first()
            };
            view.map(|v| v.at_us - op.invoked_at_us)
        };
        let answered: Vec<u64> = ops.iter().filter_map(|op| answer(op)).collect();
        let finals: Vec<u64> = ops
            .iter()
            .filter_map(|op| op.final_view().map(|v| v.at_us - op.invoked_at_us))
            .collect();
        let aborted = ops
            .iter()
            .filter(|op| op.final_view().is_some_and(|v| v.outcome.is_err()))
            .count();
        let diverged = ops
            .iter()
            .filter(|op| match (op.first_tentative(), op.final_view()) {
                (Some(t), Some(f)) => t.outcome != f.outcome,
                _ => false,
            })
            .count();
        let strong = ops.iter().filter(|op| op.strong).count();
        out.insert(
            name,
            json!({
                "invoked": ops.len(),
                "strong": strong,
                "answered": answered.len(),
                "aborted": aborted,
                "preliminary_differs_from_final": diverged,
                "answer_us": percentiles(answered),
                "final_us": percentiles(finals),
            }),
        );
    }
    let mut m = Map::new();
    m.insert("procedures".into(), Json::Object(out));
    m
}

/// Run `creek bench groups`.
pub fn run(args: &Args) -> Result<(), String> {
    let configs = args
        .configs
        .iter()
        .map(|c| Config::parse(c))
        .collect::<Result<Vec<_>, _>>()?;
    if args.groups == 0 || args.users < args.groups {
        return Err("--groups must be positive and --users at least --groups".into());
    }
    let mut points = Vec::new();
    for &config in &configs {
        let (groups, users) = (args.groups, args.users);
        // Fail before any run if a rewritten source does not compile.
        for part in [
            Groups::new(config, groups, users)?.source,
            contest_source(config)?,
        ] {
            creek_procs::lang::compile(&part, &|_| None)
                .map_err(|e| format!("the {} variant does not compile:\n{e}", config.name()))?;
        }
        let mut parts: Vec<(&str, Plan)> = Vec::new();
        let mut p = Plan::custom(
            "groups",
            &args.common,
            Box::new(move || Ok(Box::new(Groups::new(config, groups, users)?))),
        )?;
        p.set("groups", json!(groups));
        p.set("users", json!(users));
        parts.push(("mix", p));
        if !args.no_contest {
            let source = contest_source(config)?;
            let p = Plan::custom(
                "groups",
                &args.common,
                Box::new(move || {
                    Ok(Box::new(Contest {
                        config,
                        source: source.clone(),
                    }))
                }),
            )?;
            parts.push(("contest", p));
        }
        for (part, mut p) in parts {
            p.set("config", json!(config.name()));
            p.set("part", json!(part));
            p.run_with(&mut |mut point| {
                add_throughput(&mut point);
                if args.common.json() {
                    println!("{}", Json::Object(point.clone()));
                } else {
                    print_point(&point);
                }
                points.push(point);
                Ok(())
            })?;
        }
    }
    let failed: Vec<String> = points
        .iter()
        .filter(|p| p.get("consistency_ok") != Some(&json!(true)))
        .map(|p| format!("{} {}", p["config"], p["part"]))
        .collect();
    if !failed.is_empty() {
        return Err(format!(
            "checks failed or the run did not settle: {}",
            failed.join(", ")
        ));
    }
    Ok(())
}

fn contest_source(config: Config) -> Result<String, String> {
    config.rewrite(CONTEST)
}

/// Each procedure's answered ops per second of the measured window.
fn add_throughput(point: &mut Map<String, Json>) {
    let seconds = point
        .get("duration_s")
        .and_then(Json::as_f64)
        .unwrap_or(0.0);
    if let Some(Json::Object(procs)) = point.get_mut("procedures") {
        for stats in procs.values_mut() {
            let answered = stats["answered"].as_f64().unwrap_or(0.0);
            if seconds > 0.0 {
                stats["ops_per_sec"] = json!((answered / seconds).round());
            }
        }
    }
}

fn ms(v: &Json) -> String {
    v.as_f64()
        .map_or_else(|| "-".into(), |us| format!("{:.2}", us / 1000.0))
}

fn print_point(p: &Map<String, Json>) {
    println!(
        "{} {} on {} ({} replicas, {} clients, {} s): {} ops/s, checks {}",
        p["config"].as_str().unwrap_or("?"),
        p["part"].as_str().unwrap_or("?"),
        p["target"].as_str().unwrap_or("?"),
        p["replicas"],
        p["clients"],
        p["duration_s"],
        p["throughput_ops_per_sec"],
        if p.get("consistency_ok") == Some(&json!(true)) {
            "passed"
        } else {
            "FAILED"
        },
    );
    println!(
        "  {:<12} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "procedure", "strong", "ops/s", "ans p50", "ans p99", "fin p50", "fin p99", "differs"
    );
    if let Some(Json::Object(procs)) = p.get("procedures") {
        for (name, s) in procs {
            println!(
                "  {:<12} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9}",
                name,
                format!("{}/{}", s["strong"], s["invoked"]),
                s["ops_per_sec"],
                ms(&s["answer_us"]["p50"]),
                ms(&s["answer_us"]["p99"]),
                ms(&s["final_us"]["p50"]),
                ms(&s["final_us"]["p99"]),
                s["preliminary_differs_from_final"],
            );
        }
    }
    if let Some(c) = p.get("contest") {
        println!("  contest: {c}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_compiles_with_the_labels_asked_for() {
        for config in [Config::Designed, Config::Strong, Config::Weak] {
            let groups = Groups::new(config, 4, 8).unwrap_or_else(|e| panic!("{e}"));
            let p = creek_procs::lang::compile(&groups.source, &|_| None)
                .unwrap_or_else(|e| panic!("{}: {e}", config.name()));
            let join = p.proc("join").unwrap_or_else(|| panic!("no join"));
            let post = p.proc("post").unwrap_or_else(|| panic!("no post"));
            assert_eq!(join.writes_strong, config != Config::Weak);
            assert_eq!(post.writes_strong, config == Config::Strong);
            let contest = contest_source(config).unwrap_or_else(|e| panic!("{e}"));
            assert!(creek_procs::lang::compile(&contest, &|_| None).is_ok());
        }
    }

    #[test]
    fn a_post_in_a_non_members_inbox_is_reported() {
        let g = Groups::new(Config::Designed, 2, 4).unwrap_or_else(|e| panic!("{e}"));
        let mut state = BTreeMap::new();
        state.insert(Bytes::from(ks_key("members", b"g0/u0")), Bytes::from("u0"));
        state.insert(
            Bytes::from(ks_key("inboxes", b"u0/r1.1")),
            Bytes::from("g0:hi"),
        );
        assert!(g.check(&History::default(), &state).is_empty());
        state.insert(
            Bytes::from(ks_key("inboxes", b"u1/r1.1")),
            Bytes::from("g0:hi"),
        );
        let bad = g.check(&History::default(), &state);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(bad[0].contains("u1 got a post to g0"), "{bad:?}");
    }

    #[test]
    fn relabelling_keeps_everything_but_the_labels() {
        let src = "keyspace a: strong\nkeyspace b: weak\nproc p() {}\n";
        let weak = Config::Weak.rewrite(src).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(weak, "keyspace a: weak\nkeyspace b: weak\nproc p() {}\n");
        let same = Config::Designed
            .rewrite(src)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(same, src);
        assert!(Config::Strong.rewrite("proc p() {}").is_err());
    }

    #[test]
    fn the_mix_calls_fit_the_signatures_and_levels() {
        let mut g = Groups::new(Config::Designed, 3, 9).unwrap_or_else(|e| panic!("{e}"));
        let p = creek_procs::lang::compile(&g.source, &|_| None).unwrap_or_else(|e| panic!("{e}"));
        let mut rng = Rng::new(7);
        for _ in 0..200 {
            let next = g.next_op(&mut rng, 0);
            let proc = p.proc(&next.call.name).unwrap_or_else(|| panic!("no proc"));
            assert!(proc.check_args(&next.call.args).is_ok());
            if proc.writes_strong {
                assert!(next.strong, "{} must be strong", next.call.name);
            }
        }
    }
}
