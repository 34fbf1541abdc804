//! The user procedure language: a small, deterministic language in which
//! users write their own procedures, checked at compile time so that weak
//! data never decides a write to strong data (MyriaStore §3.4).
//!
//! ```
//! use creek_procs::lang::{compile, ExecContext, Label, MemStore};
//! use creek_types::value::{encode_args, Value};
//!
//! let src = r#"
//! keyspace counters: strong
//!
//! ## Add delta to the counter at key.
//! proc add(key: bytes, delta: int) -> int {
//!     let v = get(counters, key)
//!     let n = delta
//!     if v != nil { n = int(v) + delta }
//!     put(counters, key, str(n))
//!     return n
//! }
//! "#;
//! let program = compile(src, &|_| None).expect("compiles");
//! let add = program.proc("add").expect("declared");
//! assert!(add.writes_strong && !add.read_only);
//! let mut store = MemStore::new();
//! let args = encode_args(&[Value::from("k"), Value::Int(5)]);
//! let out = add.run(&mut store, &args, &ExecContext::default());
//! assert_eq!(out.map(|b| Value::decode(&b).ok()), Ok(Some(Value::Int(5))));
//! ```
//!
//! The pipeline is lexer → parser → check (names and types) →
//! flow (labels) → a tree-walking interpreter over resolved slots. This
//! module does not register procedures, create keyspaces or decide at which
//! level a procedure may be invoked: the executor does that with what a
//! [`CompiledProc`] reports. The language is described in
//! `docs/procedures.md`.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::registry::Signature;
use creek_exec::txn::Outcome;
use creek_types::value::{decode_args, Value};

mod ast;
mod calls;
pub use calls::OUTSIDE_DECLARED;
mod check;
mod error;
mod flow;
mod interp;
mod ir;
mod lexer;
mod parser;
mod store;
mod val;

pub use ast::{KeyParam, Ty};
pub use error::{CompileError, CompileErrors, Pos};
pub use store::{MemStore, Store};

/// Largest source text [`compile`] accepts, in bytes.
pub const SOURCE_BYTES_MAX: usize = 256 * 1024;
/// Largest string literal, in bytes (after escapes).
pub const LITERAL_BYTES_MAX: usize = 64 * 1024;
/// Longest name, in bytes.
pub const IDENT_BYTES_MAX: usize = 128;
/// Deepest nesting of blocks, parentheses and unary operators, counted
/// together.
pub const NESTING_MAX: usize = 128;
/// Tallest expression tree (a chain `a + b + c` is as tall as it is long).
pub const EXPR_HEIGHT_MAX: usize = 256;
/// Most procedures in one file.
pub const PROCS_MAX: usize = 256;
/// Most keyspace declarations in one file.
pub const KEYSPACES_MAX: usize = 256;
/// Most parameters of one procedure.
pub const PARAMS_MAX: usize = 32;
/// Most errors reported by one [`compile`].
pub const ERRORS_MAX: usize = 100;
/// Default fuel of one execution, in steps.
pub const FUEL_DEFAULT: u64 = 1_000_000;
/// Default memory budget of one execution, in bytes of values created.
pub const MEMORY_BYTES_DEFAULT: u64 = 16 * 1024 * 1024;
/// Largest `limit` a `scan` accepts.
pub const SCAN_LIMIT_MAX: i64 = 100_000;
/// Deepest nesting of lists a procedure can build (that of
/// [`creek_types::value::MAX_DEPTH`], so every result decodes).
pub const LIST_DEPTH_MAX: u32 = creek_types::value::MAX_DEPTH as u32;

/// A keyspace's consistency label. Information may flow from strong to
/// weak, never from weak to strong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Label {
    /// Read and written only by strong operations (linearizable).
    Strong,
    /// Written by weak operations (eventually consistent).
    Weak,
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Label {
    /// `strong` or `weak`.
    pub fn name(self) -> &'static str {
        match self {
            Label::Strong => "strong",
            Label::Weak => "weak",
        }
    }
}

/// What one execution needs besides the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecContext {
    /// The operation's identity, what `op_id()` returns.
    pub op_id: Bytes,
    /// Seed of `rand()`; the same seed gives the same numbers.
    pub seed: u64,
    /// Steps the execution may take before it aborts.
    pub fuel: u64,
    /// Bytes of values the execution may create before it aborts.
    pub memory_bytes_max: u64,
}

impl Default for ExecContext {
    fn default() -> Self {
        ExecContext {
            op_id: Bytes::new(),
            seed: 0,
            fuel: FUEL_DEFAULT,
            memory_bytes_max: MEMORY_BYTES_DEFAULT,
        }
    }
}

impl ExecContext {
    /// A context with default limits.
    pub fn new(op_id: Bytes, seed: u64) -> Self {
        ExecContext {
            op_id,
            seed,
            ..ExecContext::default()
        }
    }
}

/// A compiled source file.
#[derive(Debug)]
pub struct Program {
    /// The keyspaces the file declares, in order.
    pub keyspaces: Vec<(String, Label)>,
    /// Its procedures, in order.
    pub procs: Vec<CompiledProc>,
}

impl Program {
    /// The procedure called `name`.
    pub fn proc(&self, name: &str) -> Option<&CompiledProc> {
        self.procs.iter().find(|p| p.name == name)
    }
}

/// One checked procedure, ready to run any number of times (it is
/// immutable; share it behind an `Arc`).
pub struct CompiledProc {
    /// Its name.
    pub name: String,
    /// No `put` or `delete` anywhere in it.
    pub read_only: bool,
    /// It may write a strong keyspace, so it may only be invoked at the
    /// strong level.
    pub writes_strong: bool,
    /// Keyspaces it may read (`get`, `scan`).
    pub reads: BTreeSet<String>,
    /// Keyspaces it may write (`put`, `delete`).
    pub writes: BTreeSet<String>,
    ir: ir::ProcIr,
}

impl std::fmt::Debug for CompiledProc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledProc")
            .field("name", &self.name)
            .field("signature", &self.signature().params_text())
            .field("read_only", &self.read_only)
            .field("writes_strong", &self.writes_strong)
            .field("reads", &self.reads)
            .field("writes", &self.writes)
            .finish_non_exhaustive()
    }
}

impl CompiledProc {
    /// Its parameters, result type and summary (the comment lines right
    /// above `proc`).
    pub fn signature(&self) -> Signature {
        Signature {
            params: self
                .ir
                .params
                .iter()
                .enumerate()
                .map(|(i, (n, t))| {
                    let declared = self.ir.keys.iter().find(|(at, _)| *at == i);
                    let ty = declared.map_or_else(|| t.name().to_owned(), |(_, k)| k.type_name());
                    (n.clone(), ty)
                })
                .collect(),
            returns: self.ir.ret.name().to_owned(),
            summary: self.ir.summary.clone(),
        }
    }

    /// Its declared key parameters (`key(KS)`, `prefix(KS)`), by position
    /// in the parameter list. When there is any, the procedure reads and
    /// writes only keys they cover, and a cluster of several shards routes
    /// its calls by them (docs/procedures.md, "Declared keys").
    pub fn declared_keys(&self) -> &[(usize, KeyParam)] {
        &self.ir.keys
    }

    /// Check encoded arguments (see [`creek_types::value::encode_args`]) against
    /// the parameters: their number and types.
    pub fn check_args(&self, args: &[u8]) -> Result<(), String> {
        let vals = decode_args(args).map_err(|e| format!("{}: bad arguments: {e}", self.name))?;
        self.check_values(&vals)
    }

    fn check_values(&self, vals: &[Value]) -> Result<(), String> {
        let params = &self.ir.params;
        if vals.len() != params.len() {
            return Err(format!(
                "{} takes {} argument(s) {}, got {}",
                self.name,
                params.len(),
                self.signature().params_text(),
                vals.len()
            ));
        }
        for (v, (name, ty)) in vals.iter().zip(params) {
            let ok = match ty {
                Ty::Any => true,
                Ty::Int => matches!(v, Value::Int(_)),
                Ty::Bytes => matches!(v, Value::Bytes(_)),
                Ty::Bool => matches!(v, Value::Bool(_)),
                Ty::List => matches!(v, Value::List(_)),
                Ty::Nil => matches!(v, Value::Nil),
            };
            if !ok {
                return Err(format!(
                    "{}: argument `{name}` must be {}, got {}",
                    self.name,
                    ty.name(),
                    v.kind()
                ));
            }
        }
        Ok(())
    }

    /// Run once against `store` with encoded arguments. Deterministic: the
    /// same store contents, arguments and context give the same outcome and
    /// the same calls on the store. Never panics; every failure is an
    /// [`creek_exec::txn::Abort`] whose message names the line and column.
    pub fn run(&self, store: &mut dyn Store, args: &[u8], ctx: &ExecContext) -> Outcome {
        let vals = decode_args(args).map_err(|e| {
            creek_exec::txn::Abort::new(format!("{}: bad arguments: {e}", self.name))
        })?;
        self.check_values(&vals).map_err(creek_exec::txn::Abort)?;
        interp::run(&self.ir, store, vals, ctx)
    }
}

/// Compile a source file. `existing` gives the label of each keyspace that
/// already exists in the database (`None`: no such keyspace); a
/// declaration must agree with it, and procedures may use both declared and
/// existing keyspaces.
pub fn compile(
    source: &str,
    existing: &dyn Fn(&str) -> Option<Label>,
) -> Result<Program, CompileErrors> {
    let start = Pos { line: 1, col: 1 };
    if source.len() > SOURCE_BYTES_MAX {
        return Err(CompileErrors(vec![CompileError::new(
            start,
            format!(
                "source is {} bytes, more than {SOURCE_BYTES_MAX}",
                source.len()
            ),
        )]));
    }
    let lexed = lexer::lex(source).map_err(|e| CompileErrors(vec![e]))?;
    let (file, mut errors) = parser::parse(lexed);

    let mut declared: BTreeMap<String, Label> = BTreeMap::new();
    let mut keyspaces = Vec::new();
    if file.keyspaces.len() > KEYSPACES_MAX {
        errors.push(CompileError::new(
            start,
            format!("more than {KEYSPACES_MAX} keyspace declarations"),
        ));
    }
    for k in &file.keyspaces {
        if declared.contains_key(&k.name) {
            errors.push(CompileError::new(
                k.pos,
                format!("keyspace `{}` is declared twice", k.name),
            ));
            continue;
        }
        if let Some(have) = existing(&k.name) {
            if have != k.label {
                errors.push(CompileError::new(
                    k.pos,
                    format!(
                        "keyspace `{}` already exists as {}, not {}",
                        k.name,
                        have.name(),
                        k.label.name()
                    ),
                ));
            }
        }
        declared.insert(k.name.clone(), k.label);
        keyspaces.push((k.name.clone(), k.label));
    }
    if file.procs.is_empty() && errors.is_empty() {
        errors.push(CompileError::new(start, "no `proc` in the source"));
    }
    if file.procs.len() > PROCS_MAX {
        errors.push(CompileError::new(
            start,
            format!("more than {PROCS_MAX} procedures"),
        ));
    }
    let ks = check::Keyspaces { declared, existing };
    let mut names = BTreeSet::new();
    let mut irs = Vec::new();
    for p in file.procs.iter().take(PROCS_MAX) {
        if !names.insert(p.name.as_str()) {
            errors.push(CompileError::new(
                p.pos,
                format!("proc `{}` is defined twice", p.name),
            ));
        }
        if p.params.len() > PARAMS_MAX {
            errors.push(CompileError::new(
                p.pos,
                format!("more than {PARAMS_MAX} parameters"),
            ));
        }
        irs.push(check::check_proc(p, &ks, &mut errors));
    }
    let mut procs = Vec::new();
    if errors.is_empty() {
        for ir in irs {
            let fx = flow::check(&ir, &mut errors);
            procs.push(CompiledProc {
                name: ir.name.clone(),
                read_only: fx.writes.is_empty(),
                writes_strong: fx.writes_strong,
                reads: fx.reads,
                writes: fx.writes,
                ir,
            });
        }
    }
    if errors.is_empty() {
        return Ok(Program { keyspaces, procs });
    }
    errors.sort_by_key(|e| e.pos);
    errors.dedup();
    errors.truncate(ERRORS_MAX);
    Err(CompileErrors(errors))
}
