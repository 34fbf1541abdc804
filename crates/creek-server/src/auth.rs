//! Authentication at a replica's client entry: bearer tokens, the root
//! token of the configuration, and the compiled rules of the replicated
//! `\0auth/` records (docs/security.md, "Users, roles and tokens").
//!
//! A token is `creek_<id>_<secret>`: a 16-hex-digit id (the lookup key,
//! not secret) and 32 random bytes as 64 hex digits. The state holds only
//! the SHA-256 of the secret: a 256-bit random secret cannot be guessed or
//! found from its hash, so a slow password hash (Argon2) would buy nothing
//! and cost milliseconds on every call (the reasoning GitHub applies to its
//! tokens). The hash is made where the token is made (the CLI), so the op
//! that stores it is the same on every replica.
//!
//! With TLS, a client that sends no token may instead be the user its
//! certificate names: the common name (CN) of a certificate the CA signed
//! (`creek certs create-client NAME`), if a user of that name exists.
//!
//! The node loop rebuilds the [`Rules`] from the committed records when one
//! of them changes ([`Auth::set_rules`]); the service reads them on every
//! call through a shared pointer, so a check is a hash, a map lookup and
//! a comparison.

// tonic's handlers return `Status` by value.
#![allow(clippy::result_large_err)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use creek_procs::auth::{Need, Principal, Rules, TOKEN_HASH_BYTES, TOKEN_ID_CHARS};
use ring::rand::SecureRandom;
use rustls::pki_types::CertificateDer;
use tonic::metadata::MetadataMap;
use tonic::Status;

/// The id of the configured root token.
pub const ROOT_TOKEN_ID: &str = "root";
/// Bytes of a token's secret.
pub const SECRET_BYTES: usize = 32;

/// A bearer token: an id and a secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    /// Its id: [`TOKEN_ID_CHARS`] hex digits, or [`ROOT_TOKEN_ID`].
    pub id: String,
    secret: [u8; SECRET_BYTES],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({}, <secret>)", self.id)
    }
}

impl Token {
    /// A new random token; `root` gives it the root token's id.
    pub fn generate(root: bool) -> Result<Token, String> {
        let rng = ring::rand::SystemRandom::new();
        let mut id = [0u8; TOKEN_ID_CHARS / 2];
        let mut secret = [0u8; SECRET_BYTES];
        rng.fill(&mut id)
            .and_then(|()| rng.fill(&mut secret))
            .map_err(|_| "the system's random number generator failed".to_owned())?;
        let id = if root {
            ROOT_TOKEN_ID.to_owned()
        } else {
            to_hex(&id)
        };
        Ok(Token { id, secret })
    }

    /// Parse `creek_<id>_<secret>`; `Err` says what is wrong without
    /// repeating the text (it may be a mistyped secret).
    pub fn parse(text: &str) -> Result<Token, String> {
        let bad =
            |why: &str| format!("malformed token: {why} (a token is creek_<id>_<64 hex digits>)");
        let rest = text
            .trim()
            .strip_prefix("creek_")
            .ok_or_else(|| bad("it does not start with creek_"))?;
        let (id, secret) = rest
            .split_once('_')
            .ok_or_else(|| bad("no _ after the id"))?;
        let id_ok = id == ROOT_TOKEN_ID
            || id.len() == TOKEN_ID_CHARS
                && id
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !id_ok {
            return Err(bad("the id is not 16 lowercase hex digits"));
        }
        let secret = from_hex::<SECRET_BYTES>(secret)
            .ok_or_else(|| bad("the secret is not 64 hex digits"))?;
        Ok(Token {
            id: id.to_owned(),
            secret,
        })
    }

    /// SHA-256 of the secret: what the state (or the configuration, for
    /// the root token) holds.
    pub fn hash(&self) -> [u8; TOKEN_HASH_BYTES] {
        let digest = ring::digest::digest(&ring::digest::SHA256, &self.secret);
        let mut out = [0u8; TOKEN_HASH_BYTES];
        out.copy_from_slice(digest.as_ref());
        out
    }
}

impl std::fmt::Display for Token {
    /// The token as a client sends it (this shows the secret).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "creek_{}_{}", self.id, to_hex(&self.secret))
    }
}

/// Lower-case hex of `b`.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// `N` bytes from `2N` hex digits, if that is what `text` is.
pub fn from_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(digits.chunks(2)) {
        let s = std::str::from_utf8(pair).ok()?;
        *o = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

/// The current Unix time in seconds (0 if the clock is before 1970).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Unix time `unix_s` as `YYYY-MM-DDTHH:MM:SSZ` (UTC; the proleptic
/// Gregorian calendar, by the days-from-civil inverse).
pub fn utc(unix_s: u64) -> String {
    let days = unix_s / 86_400;
    let secs = unix_s % 86_400;
    // Days since 0000-03-01, in 400-year eras of 146,097 days.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3_600,
        secs % 3_600 / 60,
        secs % 60
    )
}

/// Equal, in time that depends only on the length.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// One DER element of `der`: (tag, contents, what follows). Single-byte
/// tags and definite lengths of up to 4 bytes (all a certificate uses).
fn der_element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The subject's common name (OID 2.5.4.3) of an X.509 certificate, if it
/// has one as text. The certificate was verified by the TLS handshake; this
/// only reads it, refusing (with `None`) anything it does not expect.
pub fn common_name(cert: &[u8]) -> Option<String> {
    const SEQUENCE: u8 = 0x30;
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    let (SEQUENCE, cert, _) = der_element(cert)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = der_element(cert)? else {
        return None;
    };
    // [0] version (optional), serial, signature algorithm, issuer,
    // validity, then the subject.
    if tbs.first() == Some(&0xa0) {
        tbs = der_element(tbs)?.2;
    }
    for _ in 0..4 {
        tbs = der_element(tbs)?.2;
    }
    let (SEQUENCE, mut subject, _) = der_element(tbs)? else {
        return None;
    };
    while !subject.is_empty() {
        let (_set, set, rest) = der_element(subject)?;
        subject = rest;
        let (SEQUENCE, attribute, _) = der_element(set)? else {
            return None;
        };
        let (_oid, oid, value) = der_element(attribute)?;
        if oid == CN {
            // UTF8String, PrintableString or IA5String.
            let (tag, text, _) = der_element(value)?;
            return matches!(tag, 0x0c | 0x13 | 0x16)
                .then(|| std::str::from_utf8(text).ok().map(str::to_owned))
                .flatten();
        }
    }
    None
}

/// What a replica checks calls against: the users, roles and tokens of
/// the committed state, once it checks users at all — because its
/// `[auth]` says so, or because the cluster's replicated switch
/// (`auth.enable`) is on, whatever its own configuration says.
#[derive(Debug, Default)]
pub struct Auth {
    /// `[auth] enabled` in this replica's configuration.
    configured: bool,
    /// The root token's hash of `[auth]`.
    root: Option<[u8; TOKEN_HASH_BYTES]>,
    /// The replicated switch is on (its root hash is in `rules`).
    switched: AtomicBool,
    rules: RwLock<Arc<Rules>>,
}

impl Auth {
    /// Checks with the root token hashed as `root`, and no users yet.
    pub fn new(root: Option<[u8; TOKEN_HASH_BYTES]>) -> Auth {
        Auth {
            configured: true,
            root,
            ..Auth::default()
        }
    }

    /// No checks until the cluster's switch is on (`[auth]` off here).
    pub fn off() -> Auth {
        Auth::default()
    }

    /// Whether calls are checked: `[auth] enabled` here, or the cluster's
    /// switch on.
    pub fn enabled(&self) -> bool {
        self.configured || self.switched.load(Ordering::Acquire)
    }

    /// Whether this replica's `[auth]` enables the checks.
    pub fn configured(&self) -> bool {
        self.configured
    }

    /// The root token's hash `[auth]` configures.
    pub fn configured_root(&self) -> Option<[u8; TOKEN_HASH_BYTES]> {
        self.root
    }

    /// Use `rules` from now on.
    pub fn set_rules(&self, rules: Rules) {
        let switched = rules.enabled.is_some();
        *self.rules.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(rules);
        self.switched.store(switched, Ordering::Release);
    }

    /// The root token's hash: the cluster's switch's, once on (it is
    /// what every replica checks), else `[auth]`'s.
    fn root(&self) -> Option<[u8; TOKEN_HASH_BYTES]> {
        self.rules().enabled.or(self.root)
    }

    fn rules(&self) -> Arc<Rules> {
        self.rules
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The user a call's `authorization: Bearer <token>` names or, without
    /// that header, the user its client certificate names (`certs`: the
    /// chain the TLS handshake verified, leaf first); `UNAUTHENTICATED`
    /// saying why not.
    pub fn authenticate(
        &self,
        meta: &MetadataMap,
        certs: Option<&[CertificateDer<'_>]>,
    ) -> Result<Principal, Status> {
        let Some(header) = meta.get("authorization") else {
            let leaf = certs.and_then(<[_]>::first);
            return match leaf.and_then(|c| common_name(c)) {
                Some(name) => self.rules().principal(&name).ok_or_else(|| {
                    let fix = if name == creek_procs::auth::ROOT_USER {
                        "the name is reserved for the root token".to_owned()
                    } else {
                        format!("add the user (creek user add {name} --role …)")
                    };
                    Status::unauthenticated(format!(
                        "the client certificate names {name:?}, which is no user: send a \
                         token (creek --token or CREEK_TOKEN), or {fix}"
                    ))
                }),
                None => Err(Status::unauthenticated(
                    "this cluster requires a token: send `authorization: Bearer <token>` \
                     (creek --token or CREEK_TOKEN), or a client certificate naming a user",
                )),
            };
        };
        let text = header
            .to_str()
            .ok()
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .ok_or_else(|| {
                Status::unauthenticated("the authorization header is not `Bearer <token>`")
            })?;
        let token = Token::parse(text).map_err(Status::unauthenticated)?;
        let hash = token.hash();
        let unknown = || Status::unauthenticated(format!("unknown or revoked token {}", token.id));
        if token.id == ROOT_TOKEN_ID {
            return match &self.root() {
                Some(root) if same(root, &hash) => Ok(Principal::root()),
                _ => Err(unknown()),
            };
        }
        let rules = self.rules();
        let record = rules.token(&token.id).ok_or_else(unknown)?;
        if !same(&record.hash, &hash) {
            return Err(unknown());
        }
        if record.expired(unix_now()) {
            return Err(Status::unauthenticated(format!(
                "token {} expired at {}: make a new one (creek user token {} --ttl …)",
                token.id,
                utc(record.expires_unix_s),
                record.user
            )));
        }
        rules.principal(&record.user).ok_or_else(|| {
            Status::unauthenticated(format!(
                "token {}: its user {} no longer exists",
                token.id, record.user
            ))
        })
    }

    /// [`Auth::authenticate`], then `PERMISSION_DENIED` naming the missing
    /// right unless the user holds what `need` asks.
    pub fn authorize(
        &self,
        meta: &MetadataMap,
        certs: Option<&[CertificateDer<'_>]>,
        need: &Need,
    ) -> Result<Principal, Status> {
        let who = self.authenticate(meta, certs)?;
        who.check(need)
            .map_err(|d| Status::permission_denied(d.to_string()))?;
        Ok(who)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use creek_procs::auth::{TokenRecord, TOKEN_PREFIX, USER_PREFIX};
    use creek_types::value::Value;
    use tonic::Code;

    fn meta(token: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert(
            "authorization",
            format!("Bearer {token}").parse().expect("ascii"),
        );
        m
    }

    #[test]
    fn a_certificate_names_its_common_name() {
        let make = |cn: Option<&str>| {
            let mut p = rcgen::CertificateParams::default();
            p.distinguished_name = rcgen::DistinguishedName::new();
            p.distinguished_name
                .push(rcgen::DnType::OrganizationName, "Creek");
            if let Some(cn) = cn {
                p.distinguished_name.push(rcgen::DnType::CommonName, cn);
            }
            let key = rcgen::KeyPair::generate().expect("key");
            p.self_signed(&key).expect("cert").der().to_vec()
        };
        assert_eq!(common_name(&make(Some("alice"))), Some("alice".into()));
        assert_eq!(common_name(&make(None)), None);
        let der = make(Some("bob"));
        for cut in [0, 1, 10, der.len() / 2, der.len() - 1] {
            assert_eq!(common_name(&der[..cut]), None, "cut at {cut}");
        }
        assert_eq!(common_name(b"\x30\x84\xff\xff\xff\xff"), None);
    }

    #[test]
    fn tokens_print_and_parse_back() {
        let t = Token::generate(false).expect("rng");
        let text = t.to_string();
        assert!(
            text.starts_with("creek_") && text.len() == 6 + 16 + 1 + 64,
            "{text}"
        );
        assert_eq!(Token::parse(&text), Ok(t.clone()));
        assert_ne!(Token::generate(false).expect("rng"), t);
        for bad in [
            "",
            "creek_",
            "creek_root",
            "tok_root_00",
            "creek_ROOT_00",
            "creek_root_zz",
        ] {
            assert!(Token::parse(bad).is_err(), "{bad}");
        }
        assert!(!format!("{t:?}").contains(&text[23..]));
    }

    #[test]
    fn only_known_unrevoked_tokens_authenticate() {
        let root = Token::generate(true).expect("rng");
        let alice = Token::generate(false).expect("rng");
        let auth = Auth::new(Some(root.hash()));
        let code = |m: &MetadataMap| auth.authenticate(m, None).err().map(|s| s.code());
        assert_eq!(
            auth.authenticate(&meta(&root.to_string()), None)
                .ok()
                .map(|p| p.user),
            Some("root".into())
        );
        assert_eq!(code(&MetadataMap::new()), Some(Code::Unauthenticated));
        assert_eq!(code(&meta("creek_nope")), Some(Code::Unauthenticated));
        assert_eq!(code(&meta(&alice.to_string())), Some(Code::Unauthenticated));
        let user_key = [USER_PREFIX, b"alice"].concat();
        let roles = Value::List(vec![Value::from("readonly")]).encode();
        let token_key = [TOKEN_PREFIX, alice.id.as_bytes()].concat();
        let record = TokenRecord {
            user: "alice".into(),
            hash: alice.hash(),
            expires_unix_s: 0,
        }
        .encode();
        auth.set_rules(Rules::from_records([
            (&user_key[..], &roles[..]),
            (&token_key[..], &record[..]),
        ]));
        assert_eq!(
            auth.authenticate(&meta(&alice.to_string()), None)
                .ok()
                .map(|p| p.user),
            Some("alice".into())
        );
        // Same id, another secret.
        let forged = Token {
            id: alice.id.clone(),
            secret: [0; 32],
        };
        assert_eq!(
            code(&meta(&forged.to_string())),
            Some(Code::Unauthenticated)
        );
        let denied = auth
            .authorize(&meta(&alice.to_string()), None, &Need::Cluster)
            .expect_err("denied");
        assert_eq!(denied.code(), Code::PermissionDenied);
        assert!(
            denied.message().contains("user alice lacks admin"),
            "{}",
            denied.message()
        );
        auth.set_rules(Rules::default());
        assert_eq!(code(&meta(&alice.to_string())), Some(Code::Unauthenticated));
    }

    #[test]
    fn an_expired_token_is_refused_saying_when_it_expired() {
        let alice = Token::generate(false).expect("rng");
        let auth = Auth::new(None);
        let user_key = [USER_PREFIX, b"alice"].concat();
        let roles = Value::List(vec![Value::from("readonly")]).encode();
        let token_key = [TOKEN_PREFIX, alice.id.as_bytes()].concat();
        let with_expiry = |expires_unix_s| {
            let record = TokenRecord {
                user: "alice".into(),
                hash: alice.hash(),
                expires_unix_s,
            }
            .encode();
            auth.set_rules(Rules::from_records([
                (&user_key[..], &roles[..]),
                (&token_key[..], &record[..]),
            ]));
            auth.authenticate(&meta(&alice.to_string()), None)
        };
        let later = unix_now() + 3_600;
        assert_eq!(
            with_expiry(later).map(|p| p.user).ok(),
            Some("alice".into())
        );
        let refused = with_expiry(1_000_000_000).expect_err("expired");
        assert_eq!(refused.code(), Code::Unauthenticated);
        assert_eq!(
            refused.message(),
            format!(
                "token {} expired at 2001-09-09T01:46:40Z: make a new one (creek user token \
                 alice --ttl …)",
                alice.id
            )
        );
    }

    #[test]
    fn utc_times_are_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_795_996_799), "2026-11-29T23:59:59Z");
        assert_eq!(utc(4_102_444_800), "2100-01-01T00:00:00Z");
    }
}
