//! User procedures as replicated state: their records, the cache of
//! compiled programs, and how [`crate::execute_call`] runs a call whose
//! name is not a built-in (DESIGN §14).
//!
//! A procedure registered with `proc.register` is stored at
//! `\0proc/NAME` (see [`PROC_PREFIX`]) as one encoded [`Value`]:
//! `[version: int, source: bytes, keyspaces: [[name, "s"|"w"], …]]` — the
//! whole source text of the file it came from and the labels of the
//! keyspaces that file declares or uses, which is all a replica needs to
//! compile it again to the same program. The record is ordinary versioned
//! state: every replica sees the same definition at the same point of the
//! order, a re-registration invalidates (through the read set) any
//! tentative execution that ran the old version, and checkpoints carry it.
//!
//! Running a user procedure reads its record through the [`Txn`] (so the
//! read is recorded), takes the compiled program from the [`ProgramCache`]
//! (compiling is deterministic, so the cache is only an optimisation) and
//! runs it over a [`TxnStore`]. The level rule (MyriaStore): a procedure
//! that may write a strong keyspace runs only in a strong op
//! ([`ProcCall::strong`]); otherwise it aborts, writing nothing.
//!
//! [`Registry::check`] knows only the built-ins; [`check_user_call`] is
//! the invoke-time check of other names, which a replica runs against its
//! latest state (committed and tentative: where a procedure the client
//! has just registered is). User procedures are invoked as ordinary
//! (broadcast) ops; a weak call of a read-only user procedure is not
//! answered locally.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};

use crate::keyspace::{self, TxnStore};
use crate::lang::{self, CompileErrors, CompiledProc, ExecContext, Label, Program};
use crate::registry::{CallError, Registry, Signature};
use creek_exec::txn::{Abort, Outcome, SnapshotRead, Txn, TxnLimits};
use creek_exec::Executed;
use creek_types::value::Value;
use creek_types::ProcCall;

/// Prefix of procedure records: `\0proc/NAME` → record.
pub const PROC_PREFIX: &[u8] = b"\0proc/";

/// Most compiled programs a [`ProgramCache`] keeps.
pub const CACHE_PROGRAMS_MAX: usize = 256;

/// The key of procedure `name`'s record.
pub fn proc_key(name: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(PROC_PREFIX.len() + name.len());
    k.extend_from_slice(PROC_PREFIX);
    k.extend_from_slice(name.as_bytes());
    k.freeze()
}

/// One stored procedure definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcRecord {
    /// 1 for the first registration, one more for each later one.
    pub version: u64,
    /// The whole source file the procedure came from.
    pub source: Arc<str>,
    /// The labels of the keyspaces the file declares or uses, by name.
    pub keyspaces: Vec<(String, Label)>,
}

impl ProcRecord {
    /// The stored form.
    pub fn encode(&self) -> Bytes {
        let keyspaces = self
            .keyspaces
            .iter()
            .map(|(name, label)| {
                Value::List(vec![
                    Value::from(name.as_str()),
                    Value::Bytes(Bytes::copy_from_slice(&[keyspace::label_byte(*label)])),
                ])
            })
            .collect();
        Value::List(vec![
            Value::Int(i64::try_from(self.version).unwrap_or(i64::MAX)),
            Value::from(&*self.source),
            Value::List(keyspaces),
        ])
        .encode()
    }

    /// Decode a stored record; `Err` names what is wrong (only a bug or a
    /// foreign write under the reserved prefix can cause it).
    pub fn decode(name: &str, raw: &[u8]) -> Result<ProcRecord, Abort> {
        let corrupt = |what: &str| Abort::new(format!("procedure {name}: corrupt record ({what})"));
        let value = Value::decode(raw).map_err(|e| corrupt(&e.to_string()))?;
        let Value::List(items) = value else {
            return Err(corrupt("not a list"));
        };
        let [Value::Int(version), Value::Bytes(source), Value::List(ks)] = items.as_slice() else {
            return Err(corrupt("wrong fields"));
        };
        let source = std::str::from_utf8(source).map_err(|_| corrupt("source not UTF-8"))?;
        let mut keyspaces = Vec::with_capacity(ks.len());
        for k in ks {
            let Some([Value::Bytes(n), Value::Bytes(l)]) = k.as_list() else {
                return Err(corrupt("keyspace entry"));
            };
            let n = std::str::from_utf8(n).map_err(|_| corrupt("keyspace name"))?;
            let l = keyspace::label_from_byte(l).ok_or_else(|| corrupt("keyspace label"))?;
            keyspaces.push((n.to_owned(), l));
        }
        Ok(ProcRecord {
            version: u64::try_from(*version).map_err(|_| corrupt("version"))?,
            source: Arc::from(source),
            keyspaces,
        })
    }

    /// The compiled file (from `cache` when it holds it).
    pub fn program(&self, cache: &ProgramCache) -> Result<Arc<Program>, CompileErrors> {
        cache.get_or_compile(&self.source, &self.keyspaces)
    }
}

/// Compiled programs by source text and keyspace labels. Compiling is
/// deterministic, so what the cache holds never changes an outcome; it
/// saves compiling a file again on every call. Shared by the clones of a
/// [`Registry`]; at most [`CACHE_PROGRAMS_MAX`] programs (it is emptied
/// when full).
#[derive(Default)]
pub struct ProgramCache {
    programs: Mutex<HashMap<u64, Arc<Cached>>>,
}

struct Cached {
    source: Arc<str>,
    keyspaces: Vec<(String, Label)>,
    program: Arc<Program>,
}

impl std::fmt::Debug for ProgramCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgramCache")
            .field("programs", &self.lock().len())
            .finish()
    }
}

impl ProgramCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Cached>>> {
        // A panic elsewhere cannot leave the map inconsistent: every update
        // is one insert or clear.
        self.programs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn hash(source: &str, keyspaces: &[(String, Label)]) -> u64 {
        let mut h = rustc_hash::FxHasher::default();
        source.hash(&mut h);
        keyspaces.hash(&mut h);
        h.finish()
    }

    /// The program `source` compiles to when the keyspaces it does not
    /// declare have the labels in `keyspaces`.
    pub fn get_or_compile(
        &self,
        source: &str,
        keyspaces: &[(String, Label)],
    ) -> Result<Arc<Program>, CompileErrors> {
        let hash = Self::hash(source, keyspaces);
        let hit = self.lock().get(&hash).cloned();
        // A hash collision must not run another file: compare the inputs.
        if let Some(c) = hit.filter(|c| &*c.source == source && c.keyspaces == keyspaces) {
            return Ok(c.program.clone());
        }
        let existing = |name: &str| {
            keyspaces
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, label)| *label)
        };
        let program = Arc::new(lang::compile(source, &existing)?);
        self.insert(source, keyspaces, program.clone());
        Ok(program)
    }

    /// Remember `program` as what `source` compiles to.
    pub fn insert(&self, source: &str, keyspaces: &[(String, Label)], program: Arc<Program>) {
        let hash = Self::hash(source, keyspaces);
        let mut map = self.lock();
        if map.len() >= CACHE_PROGRAMS_MAX && !map.contains_key(&hash) {
            map.clear();
        }
        map.insert(
            hash,
            Arc::new(Cached {
                source: Arc::from(source),
                keyspaces: keyspaces.to_vec(),
                program,
            }),
        );
    }

    /// How many programs it holds.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a caller needs to know of a registered user procedure.
#[derive(Clone, Debug)]
pub struct UserProc {
    /// Its name.
    pub name: String,
    /// Its stored record.
    pub record: ProcRecord,
    /// The compiled file it belongs to.
    pub program: Arc<Program>,
}

impl UserProc {
    /// The compiled procedure.
    pub fn compiled(&self) -> Option<&CompiledProc> {
        self.program.proc(&self.name)
    }

    /// Its signature, `read_only` and `writes_strong`.
    pub fn signature(&self) -> Option<(Signature, bool, bool)> {
        self.compiled()
            .map(|p| (p.signature(), p.read_only, p.writes_strong))
    }

    /// The first strong keyspace it may write, if any: it may then run only
    /// in a strong op.
    pub fn strong_write(&self) -> Option<&str> {
        let p = self.compiled()?;
        if !p.writes_strong {
            return None;
        }
        // `writes_strong` without a strong keyspace in `writes` would be a
        // compiler bug; name no keyspace rather than run it weak.
        Some(
            p.writes
                .iter()
                .find(|ks| self.label_of(ks) == Some(Label::Strong))
                .map_or("?", |ks| ks.as_str()),
        )
    }

    /// The label keyspace `ks` had when this procedure was compiled: as its
    /// file declared it, or as the replicated state held it.
    pub fn label_of(&self, ks: &str) -> Option<Label> {
        self.program
            .keyspaces
            .iter()
            .chain(self.record.keyspaces.iter())
            .find(|(n, _)| n == ks)
            .map(|(_, l)| *l)
    }
}

/// Look `name` up with `read` (a [`Txn`] read, or a snapshot's): `Ok(None)`
/// if no such user procedure is registered.
pub fn resolve(
    registry: &Registry,
    name: &str,
    read: &mut dyn FnMut(&[u8]) -> Option<Bytes>,
) -> Result<Option<UserProc>, Abort> {
    if keyspace::check_name("procedure", name.as_bytes()).is_err() {
        return Ok(None);
    }
    let Some(raw) = read(&proc_key(name)) else {
        return Ok(None);
    };
    let record = ProcRecord::decode(name, &raw)?;
    let program = record.program(registry.programs()).map_err(|e| {
        Abort::new(format!(
            "procedure {name} version {} no longer compiles: {e}",
            record.version
        ))
    })?;
    let user = UserProc {
        name: name.to_owned(),
        record,
        program,
    };
    if user.compiled().is_none() {
        return Err(Abort::new(format!(
            "procedure {name}: its stored source does not define it"
        )));
    }
    Ok(Some(user))
}

/// The registered user procedure `name` in `snapshot` (a server's committed
/// state), for invoke-time checks and listings. `None` if there is none or
/// its record is unusable.
pub fn describe(registry: &Registry, snapshot: &dyn SnapshotRead, name: &str) -> Option<UserProc> {
    resolve(registry, name, &mut |k| snapshot.read(k).0)
        .ok()
        .flatten()
}

/// The invoke-time check of a call to a user procedure, for a replica: it
/// exists in `snapshot`, the arguments fit its parameters, and a procedure
/// that may write a strong keyspace is invoked `strong`. The executor
/// checks all of this again when the op runs (the definition may change in
/// between).
pub fn check_user_call(
    registry: &Registry,
    snapshot: &dyn SnapshotRead,
    call: &ProcCall,
    strong: bool,
) -> Result<UserProc, CallError> {
    let user = describe(registry, snapshot, &call.name)
        .ok_or_else(|| CallError::UnknownProcedure(call.name.to_string()))?;
    let compiled = user
        .compiled()
        .ok_or_else(|| CallError::UnknownProcedure(call.name.to_string()))?;
    compiled
        .check_args(&call.args)
        .map_err(|reason| CallError::MalformedArgs {
            name: call.name.to_string(),
            reason,
        })?;
    if let Some(ks) = user.strong_write().filter(|_| !strong) {
        return Err(CallError::NeedsStrong {
            name: call.name.to_string(),
            keyspace: ks.to_owned(),
        });
    }
    Ok(user)
}

fn level_message(name: &str, ks: &str) -> String {
    CallError::NeedsStrong {
        name: name.to_owned(),
        keyspace: ks.to_owned(),
    }
    .to_string()
}

/// The context of one execution: `op_id()` is `r<origin>.<seq>` (`local`
/// for a local read-only op) and `rand()` is seeded by the op's identity,
/// so every replica and every re-execution draws the same numbers.
pub fn exec_context(call: &ProcCall) -> ExecContext {
    match call.op {
        Some((origin, seq)) => {
            let id = Bytes::from(format!("r{origin}.{seq}"));
            ExecContext::new(id, origin.rotate_left(48) ^ seq)
        }
        None => ExecContext::new(Bytes::from_static(b"local"), 0),
    }
}

/// Run `call`, whose name is not a built-in, as a user procedure.
pub(crate) fn execute(
    registry: &Registry,
    snapshot: &dyn SnapshotRead,
    limits: TxnLimits,
    call: &ProcCall,
) -> Executed {
    let mut txn = Txn::new(snapshot, limits, false);
    let user = match resolve(registry, &call.name, &mut |k| txn.get(k)) {
        Ok(Some(user)) => user,
        Ok(None) => {
            let unknown = Abort::new(format!("unknown procedure {:?}", call.name));
            return txn.finish(Err(unknown));
        }
        Err(abort) => return txn.finish(Err(abort)),
    };
    let Some(compiled) = user.compiled() else {
        return txn.finish(Err(Abort::new("unreachable: resolved without a proc")));
    };
    if let Some(ks) = user.strong_write().filter(|_| !call.strong) {
        return txn.finish(Err(Abort::new(level_message(&call.name, ks))));
    }
    if let Err(denied) = crate::auth::check_execution(registry, &mut txn, call, Some(&user)) {
        return txn.finish(Err(denied));
    }
    let read_only = compiled.read_only;
    let ctx = exec_context(call);
    crate::registry::run_in_session(registry, txn, call, read_only, |txn| {
        let mut store = TxnStore::new(txn, read_only);
        let outcome = compiled.run(&mut store, &call.args, &ctx);
        match store.into_violation() {
            Some(abort) => Err(abort),
            None => outcome,
        }
    })
}

/// `proc.register(source)`: compile, create the declared keyspaces that do
/// not exist, and store each procedure with its version bumped. Returns
/// `[[name, version], …]`. A compile error aborts with the errors' text.
pub(crate) fn register(registry: &Registry, txn: &mut Txn<'_>, source: &[u8]) -> Outcome {
    let source = std::str::from_utf8(source)
        .map_err(|e| Abort::new(format!("proc.register: the source is not UTF-8: {e}")))?;
    // Every label the compiler asks for, read through the transaction.
    let mut seen: BTreeMap<String, Label> = BTreeMap::new();
    let mut corrupt: Option<Abort> = None;
    let program = {
        let cell = std::cell::RefCell::new((&mut *txn, &mut seen, &mut corrupt));
        let existing = |name: &str| {
            let Ok(mut guard) = cell.try_borrow_mut() else {
                return None;
            };
            let (txn, seen, corrupt) = &mut *guard;
            match keyspace::read_label(txn, name) {
                Ok(Some(label)) => {
                    seen.insert(name.to_owned(), label);
                    Some(label)
                }
                Ok(None) => None,
                Err(abort) => {
                    corrupt.get_or_insert(abort);
                    None
                }
            }
        };
        lang::compile(source, &existing)
    };
    if let Some(abort) = corrupt {
        return Err(abort);
    }
    let program = program.map_err(|e| Abort::new(e.to_string()))?;
    let mut labels = seen.clone();
    for (name, label) in &program.keyspaces {
        keyspace::check_name("keyspace", name.as_bytes()).map_err(Abort)?;
        if !seen.contains_key(name) {
            txn.put(keyspace::def_key(name), vec![keyspace::label_byte(*label)]);
        }
        labels.insert(name.clone(), *label);
    }
    let labels: Vec<(String, Label)> = labels.into_iter().collect();
    let mut out = Vec::with_capacity(program.procs.len());
    let source: Arc<str> = Arc::from(source);
    for p in &program.procs {
        let name = p.name.as_str();
        if registry.get(name).is_some() || name.starts_with(crate::session::INTERNAL_PROC_PREFIX) {
            return Err(Abort::new(format!(
                "proc {name}: the name belongs to a built-in procedure"
            )));
        }
        keyspace::check_name("procedure", name.as_bytes()).map_err(Abort)?;
        let key = proc_key(name);
        let version = match txn.get(&key) {
            Some(raw) => ProcRecord::decode(name, &raw)?.version.saturating_add(1),
            None => 1,
        };
        let record = ProcRecord {
            version,
            source: source.clone(),
            keyspaces: labels.clone(),
        };
        txn.put(key, record.encode());
        out.push(Value::List(vec![
            Value::from(name),
            Value::Int(i64::try_from(version).unwrap_or(i64::MAX)),
        ]));
    }
    registry
        .programs()
        .insert(&source, &labels, Arc::new(program));
    Ok(Value::List(out).encode())
}

/// `proc.list()`: `[[name, version, signature, read_only, writes_strong],
/// …]` of every user procedure, by name (at most the transaction's scan
/// limit of them).
pub(crate) fn list(registry: &Registry, txn: &mut Txn<'_>) -> Outcome {
    let (from, to) = keyspace::prefix_range(PROC_PREFIX);
    let mut out = Vec::new();
    for (key, raw) in txn.scan(&from, &to, usize::MAX) {
        let name = String::from_utf8_lossy(key.get(PROC_PREFIX.len()..).unwrap_or_default());
        let record = ProcRecord::decode(&name, &raw)?;
        let program = record
            .program(registry.programs())
            .map_err(|e| Abort::new(format!("procedure {name} no longer compiles: {e}")))?;
        let Some(p) = program.proc(&name) else {
            continue;
        };
        let sig = p.signature();
        let text = format!("{}{} -> {}", name, sig.params_text(), sig.returns);
        out.push(Value::List(vec![
            Value::from(&*name),
            Value::Int(i64::try_from(record.version).unwrap_or(i64::MAX)),
            Value::from(text.as_str()),
            Value::Bool(p.read_only),
            Value::Bool(p.writes_strong),
        ]));
    }
    Ok(Value::List(out).encode())
}

/// `proc.show(name)`: `[name, version, source]`, or nil if there is no
/// such user procedure.
pub(crate) fn show(txn: &mut Txn<'_>, name: &[u8]) -> Outcome {
    let Ok(name) = keyspace::check_name("procedure", name) else {
        return Ok(Value::Nil.encode());
    };
    let Some(raw) = txn.get(&proc_key(name)) else {
        return Ok(Value::Nil.encode());
    };
    let record = ProcRecord::decode(name, &raw)?;
    Ok(Value::List(vec![
        Value::from(name),
        Value::Int(i64::try_from(record.version).unwrap_or(i64::MAX)),
        Value::from(&*record.source),
    ])
    .encode())
}

/// `proc.drop(name)`: remove a user procedure; whether it existed. Its
/// keyspaces and their data stay.
pub(crate) fn drop(txn: &mut Txn<'_>, name: &[u8]) -> Outcome {
    let Ok(name) = keyspace::check_name("procedure", name) else {
        return Ok(Value::Bool(false).encode());
    };
    let key = proc_key(name);
    let existed = txn.get(&key).is_some();
    if existed {
        txn.delete(key);
    }
    Ok(Value::Bool(existed).encode())
}

/// `keyspace.create(name, label)`: nil; a no-op if it exists with that
/// label, an abort if with the other one.
pub(crate) fn create_keyspace(txn: &mut Txn<'_>, name: &[u8], label: &[u8]) -> Outcome {
    let name = keyspace::check_name("keyspace", name)
        .map_err(|e| Abort(format!("keyspace.create: {e}")))?;
    let label = keyspace::parse_label(label).ok_or_else(|| {
        Abort::new(format!(
            "keyspace.create: label must be strong or weak, got {:?}",
            String::from_utf8_lossy(label)
        ))
    })?;
    match keyspace::read_label(txn, name)? {
        Some(have) if have == label => {}
        Some(have) => {
            return Err(Abort::new(format!(
                "keyspace {name} already exists as {have}, not {label}"
            )))
        }
        None => txn.put(keyspace::def_key(name), vec![keyspace::label_byte(label)]),
    }
    Ok(Value::Nil.encode())
}

/// `keyspace.list()`: `[[name, label], …]`, by name.
pub(crate) fn list_keyspaces(txn: &mut Txn<'_>) -> Outcome {
    let out = keyspace::list(txn, usize::MAX)
        .into_iter()
        .map(|(name, label)| {
            let label = keyspace::label_from_byte(&label).map_or("?", Label::name);
            Value::List(vec![Value::Bytes(name), Value::from(label)])
        })
        .collect();
    Ok(Value::List(out).encode())
}
