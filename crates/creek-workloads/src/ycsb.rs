//! YCSB core workloads A (50% reads, 50% updates), B (95/5) and C (read
//! only) over Creek's key-value built-ins, with uniform, zipfian and latest
//! request distributions.
//!
//! Records are keys `user<n>` (`n` in `0..records`) holding `value_bytes`
//! bytes. Reads are `kv.get(key)`, updates `kv.put(key, value)`. The
//! database is populated by [`LOAD`] calls ([`Ycsb::load_calls`]), each
//! writing a run of records with values derived from the key, so that
//! population goes through the ordinary op path and every replica writes the
//! same bytes.
//!
//! The zipfian generator follows Gray et al., "Quickly generating
//! billion-record synthetic databases" (SIGMOD 1994), as YCSB does, with the
//! usual constant 0.99; as in YCSB's *scrambled* zipfian, the popular items
//! are spread over the key space by hashing the rank. *Latest* skews toward
//! the highest record numbers (the most recently loaded), zipfian in the
//! distance from the newest.
//!
//! Which ops run strong is the caller's choice ([`YcsbConfig::strong_share`]);
//! the harness measures how often a preliminary view differs from the final
//! one (Correctables §6.2.1).

use bytes::Bytes;
use creek_exec::{Abort, Outcome, ProcCall, Txn};
use creek_procs::{Registry, Signature};
use creek_rng::Rng;
use creek_types::value::{decode_args_shared, encode_args, Value};

/// `ycsb.load(first, count, value_bytes)`: writes records `first ..
/// first + count` with their load-time values; returns nil.
pub const LOAD: &str = "ycsb.load";

/// Most records one [`LOAD`] call writes.
pub const LOAD_CHUNK: u64 = 1_000;

/// The read share of a core workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// Update heavy: 50% reads, 50% updates.
    A,
    /// Read mostly: 95% reads, 5% updates.
    B,
    /// Read only.
    C,
}

impl Mix {
    /// Reads per hundred ops.
    pub fn read_percent(self) -> u64 {
        match self {
            Mix::A => 50,
            Mix::B => 95,
            Mix::C => 100,
        }
    }

    /// `a`, `b` or `c` (any case).
    pub fn parse(s: &str) -> Option<Mix> {
        match s.to_ascii_lowercase().as_str() {
            "a" => Some(Mix::A),
            "b" => Some(Mix::B),
            "c" => Some(Mix::C),
            _ => None,
        }
    }
}

/// How requests pick their record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    /// Every record equally likely.
    Uniform,
    /// Scrambled zipfian (constant 0.99).
    Zipfian,
    /// Zipfian in the distance from the newest record.
    Latest,
}

impl Distribution {
    /// `uniform`, `zipfian` or `latest`.
    pub fn parse(s: &str) -> Option<Distribution> {
        match s.to_ascii_lowercase().as_str() {
            "uniform" => Some(Distribution::Uniform),
            "zipfian" => Some(Distribution::Zipfian),
            "latest" => Some(Distribution::Latest),
            _ => None,
        }
    }
}

/// A YCSB run's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct YcsbConfig {
    /// The core workload.
    pub mix: Mix,
    /// Records loaded.
    pub records: u64,
    /// Bytes per value.
    pub value_bytes: usize,
    /// How requests pick their record.
    pub distribution: Distribution,
    /// Share of ops issued strong (0.0 to 1.0).
    pub strong_share: f64,
}

impl Default for YcsbConfig {
    fn default() -> Self {
        YcsbConfig {
            mix: Mix::A,
            records: 100_000,
            value_bytes: 100,
            distribution: Distribution::Zipfian,
            strong_share: 0.1,
        }
    }
}

/// A configuration YCSB cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid YCSB configuration: {0}")]
pub struct ConfigError(String);

/// One generated op.
#[derive(Clone, Debug, PartialEq)]
pub struct YcsbOp {
    /// `kv.get` or `kv.put`.
    pub call: ProcCall,
    /// Whether it reads (`kv.get`).
    pub read: bool,
    /// Whether to issue it strong.
    pub strong: bool,
}

/// The key of record `n`.
pub fn key(n: u64) -> Bytes {
    Bytes::from(format!("user{n}"))
}

/// The value record `n` holds after loading (deterministic, so every
/// replica writes the same bytes).
fn load_value(n: u64, len: usize) -> Bytes {
    let mut rng = Rng::new(n.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x5943_5342);
    (0..len)
        .map(|_| b'a' + (rng.next_u64() % 26) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// Register [`LOAD`].
pub fn register(registry: &mut Registry) {
    registry.register_fn(LOAD, false, check_load, run_load);
    registry.describe(
        LOAD,
        Signature::new(
            &[("first", "int"), ("count", "int"), ("value_bytes", "int")],
            "nil",
            "Load count YCSB records from record first on, with values of value_bytes.",
        ),
    );
}

fn load_args(raw: &Bytes) -> Result<(u64, u64, usize), String> {
    let args = decode_args_shared(raw).map_err(|e| e.to_string())?;
    let [Value::Int(first), Value::Int(count), Value::Int(len)] = args.as_slice() else {
        return Err("expected (first: int, count: int, value_bytes: int)".into());
    };
    let first = u64::try_from(*first).map_err(|_| "first must be >= 0".to_owned())?;
    let count = u64::try_from(*count)
        .ok()
        .filter(|c| (1..=LOAD_CHUNK).contains(c))
        .ok_or_else(|| format!("count must be within 1..={LOAD_CHUNK}"))?;
    let len = usize::try_from(*len)
        .ok()
        .filter(|l| *l <= 64 << 10)
        .ok_or_else(|| "value_bytes must be within 0..=65536".to_owned())?;
    first
        .checked_add(count)
        .ok_or_else(|| "first + count overflows".to_owned())?;
    Ok((first, count, len))
}

fn check_load(raw: &[u8]) -> Result<(), String> {
    load_args(&Bytes::copy_from_slice(raw)).map(|_| ())
}

fn run_load(txn: &mut Txn<'_>, raw: &Bytes) -> Outcome {
    let (first, count, len) = load_args(raw).map_err(Abort::new)?;
    for n in first..first + count {
        txn.put(key(n), load_value(n, len));
    }
    Ok(Value::Nil.encode())
}

/// Gray et al.'s zipfian generator over `0..n` (rank 0 most popular).
#[derive(Clone, Debug)]
struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zeta_n: f64,
    eta: f64,
}

impl Zipfian {
    const THETA: f64 = 0.99;

    fn new(n: u64) -> Self {
        let theta = Self::THETA;
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zeta_n = zeta(n);
        let zeta_2 = zeta(2.min(n));
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta_2 / zeta_n);
        Zipfian {
            n,
            theta,
            alpha,
            zeta_n,
            eta,
        }
    }

    fn next(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let rank = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.n - 1)
    }
}

/// FNV-1a of the rank: spreads popular ranks over the key space.
fn scramble(rank: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in rank.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The op generator of one YCSB client.
#[derive(Clone, Debug)]
pub struct Ycsb {
    config: YcsbConfig,
    rng: Rng,
    zipfian: Option<Zipfian>,
}

impl Ycsb {
    /// A generator for `config`, seeded with `seed` (one per client).
    pub fn new(config: YcsbConfig, seed: u64) -> Result<Self, ConfigError> {
        if config.records == 0 {
            return Err(ConfigError("records must be at least 1".into()));
        }
        if config.value_bytes > 64 << 10 {
            return Err(ConfigError("value_bytes must be at most 65536".into()));
        }
        if !(0.0..=1.0).contains(&config.strong_share) {
            return Err(ConfigError("strong_share must be within 0.0..=1.0".into()));
        }
        let zipfian =
            (config.distribution != Distribution::Uniform).then(|| Zipfian::new(config.records));
        Ok(Ycsb {
            config,
            rng: Rng::new(seed),
            zipfian,
        })
    }

    /// The calls that load the database, in order.
    pub fn load_calls(&self) -> impl Iterator<Item = ProcCall> + '_ {
        let records = self.config.records;
        let len = self.config.value_bytes as i64;
        (0..records.div_ceil(LOAD_CHUNK)).map(move |chunk| {
            let first = chunk * LOAD_CHUNK;
            let count = LOAD_CHUNK.min(records - first);
            ProcCall::new(
                LOAD,
                encode_args(&[
                    Value::Int(first as i64),
                    Value::Int(count as i64),
                    Value::Int(len),
                ]),
            )
        })
    }

    /// Every record as the load writes it, `(key, value)` in order: what a
    /// bulk load (a replica restored from a backup) starts from instead of
    /// running [`Ycsb::load_calls`].
    pub fn records(&self) -> impl Iterator<Item = (Bytes, Bytes)> + '_ {
        let len = self.config.value_bytes;
        (0..self.config.records).map(move |n| (key(n), load_value(n, len)))
    }

    /// The record the next request goes to.
    pub fn next_record(&mut self) -> u64 {
        let n = self.config.records;
        match (&self.zipfian, self.config.distribution) {
            (Some(z), Distribution::Zipfian) => scramble(z.next(&mut self.rng)) % n,
            (Some(z), Distribution::Latest) => n - 1 - z.next(&mut self.rng),
            _ => self.rng.next_u64() % n,
        }
    }

    /// The next op.
    pub fn next_op(&mut self) -> YcsbOp {
        let record = self.next_record();
        let read = self.rng.next_u64() % 100 < self.config.mix.read_percent();
        // `unit`, not `chance`: a share of 0 still draws, so the sequence does
        // not depend on the share.
        let strong = self.rng.unit() < self.config.strong_share;
        let call = if read {
            ProcCall::new("kv.get", encode_args(&[Value::Bytes(key(record))]))
        } else {
            let value: Vec<u8> = (0..self.config.value_bytes)
                .map(|_| b'a' + (self.rng.next_u64() % 26) as u8)
                .collect();
            ProcCall::new(
                "kv.put",
                encode_args(&[Value::Bytes(key(record)), Value::Bytes(value.into())]),
            )
        };
        YcsbOp { call, read, strong }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(distribution: Distribution, mix: Mix, records: u64) -> Ycsb {
        Ycsb::new(
            YcsbConfig {
                mix,
                records,
                value_bytes: 8,
                distribution,
                strong_share: 0.25,
            },
            7,
        )
        .expect("valid")
    }

    /// Share of `draws` requests that hit the `top` most requested records.
    fn top_share(y: &mut Ycsb, draws: usize, top: usize) -> f64 {
        let mut hits = vec![0usize; y.config.records as usize];
        for _ in 0..draws {
            hits[y.next_record() as usize] += 1;
        }
        hits.sort_unstable_by(|a, b| b.cmp(a));
        hits[..top].iter().sum::<usize>() as f64 / draws as f64
    }

    #[test]
    fn zipfian_is_skewed_and_uniform_is_not() {
        let mut z = gen(Distribution::Zipfian, Mix::C, 10_000);
        let mut u = gen(Distribution::Uniform, Mix::C, 10_000);
        // With constant 0.99 the top 1% of records takes about half the
        // requests; uniform gives them about 1%.
        let zs = top_share(&mut z, 200_000, 100);
        let us = top_share(&mut u, 200_000, 100);
        assert!(zs > 0.4, "zipfian top-1% share {zs}");
        assert!(us < 0.03, "uniform top-1% share {us}");
    }

    #[test]
    fn latest_favours_the_newest_records() {
        let mut l = gen(Distribution::Latest, Mix::C, 10_000);
        let newest = (0..100_000).filter(|_| l.next_record() >= 9_900).count();
        assert!(newest > 40_000, "{newest} of 100000 in the newest 1%");
    }

    #[test]
    fn mixes_keep_their_read_share_and_strong_share() {
        for (mix, want) in [(Mix::A, 0.5), (Mix::B, 0.95), (Mix::C, 1.0)] {
            let mut y = gen(Distribution::Uniform, mix, 100);
            let ops: Vec<YcsbOp> = (0..20_000).map(|_| y.next_op()).collect();
            let reads = ops.iter().filter(|o| o.read).count() as f64 / 20_000.0;
            let strong = ops.iter().filter(|o| o.strong).count() as f64 / 20_000.0;
            assert!((reads - want).abs() < 0.02, "{mix:?}: read share {reads}");
            assert!((strong - 0.25).abs() < 0.02, "strong share {strong}");
            for o in &ops {
                let name = if o.read { "kv.get" } else { "kv.put" };
                assert_eq!(&*o.call.name, name);
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_ops() {
        let mut a = gen(Distribution::Zipfian, Mix::A, 1_000);
        let mut b = gen(Distribution::Zipfian, Mix::A, 1_000);
        for _ in 0..100 {
            assert_eq!(a.next_op(), b.next_op());
        }
    }

    #[test]
    fn load_calls_cover_every_record_once_and_check_their_arguments() {
        let y = gen(Distribution::Uniform, Mix::C, 2_500);
        let calls: Vec<ProcCall> = y.load_calls().collect();
        assert_eq!(calls.len(), 3);
        let mut covered = 0;
        for c in &calls {
            let (first, count, len) = load_args(&c.args).expect("valid");
            assert_eq!(first, covered);
            assert_eq!(len, 8);
            covered += count;
        }
        assert_eq!(covered, 2_500);
        let bad = encode_args(&[Value::Int(0), Value::Int(0), Value::Int(8)]);
        assert!(check_load(&bad).is_err());
        let bad = encode_args(&[Value::Int(-1), Value::Int(1), Value::Int(8)]);
        assert!(check_load(&bad).is_err());
        assert_eq!(load_value(5, 8), load_value(5, 8));
        assert_ne!(load_value(5, 8), load_value(6, 8));
    }

    #[test]
    fn invalid_configurations_are_refused() {
        let bad = |c: YcsbConfig| Ycsb::new(c, 1).is_err();
        assert!(bad(YcsbConfig {
            records: 0,
            ..YcsbConfig::default()
        }));
        assert!(bad(YcsbConfig {
            strong_share: 1.5,
            ..YcsbConfig::default()
        }));
        assert!(bad(YcsbConfig {
            value_bytes: 1 << 20,
            ..YcsbConfig::default()
        }));
        assert_eq!(Mix::parse("B"), Some(Mix::B));
        assert_eq!(Distribution::parse("latest"), Some(Distribution::Latest));
        assert_eq!(Distribution::parse("pareto"), None);
    }
}
