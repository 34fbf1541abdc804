//! `creek certs`: a certificate authority, replica (node) certificates and
//! client certificates for TLS, as `cockroach cert` makes them.
//!
//! Everything goes into one directory (docs/security.md):
//!
//! | file | what |
//! | --- | --- |
//! | `ca.crt`, `ca.key` | the CA; the key signs the others and should then live offline |
//! | `node-N.crt`, `node-N.key` | replica N: DNS name `replica-N.creek` (its identity on peer links) and the hosts it serves on; server and client use |
//! | `client-NAME.crt`, `client-NAME.key` | a client called NAME; client use only |
//!
//! Keys are ECDSA P-256 (PKCS#8 PEM), written with mode 0600; an existing
//! file is never replaced without `--overwrite`. `create-node` and
//! `create-client` sign with a CA that `create-ca` made (its name is fixed:
//! `CN=Creek CA`).

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// `creek certs`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

// The subcommands are named as `cockroach cert` names its own.
#[allow(clippy::enum_variant_names)]
#[derive(clap::Subcommand)]
enum Command {
    /// Create the certificate authority: DIR/ca.crt and DIR/ca.key.
    CreateCa {
        #[command(flatten)]
        out: Out,
    },
    /// Create replica ID's certificate, signed by DIR/ca.key:
    /// DIR/node-ID.crt and DIR/node-ID.key.
    CreateNode {
        /// The replica id the certificate is bound to (the DNS name
        /// replica-ID.creek).
        #[arg(long)]
        id: u16,
        /// A host name or IP address clients reach the replica by (repeat);
        /// default: localhost and 127.0.0.1.
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
        #[command(flatten)]
        out: Out,
    },
    /// Create a client certificate for NAME, signed by DIR/ca.key:
    /// DIR/client-NAME.crt and DIR/client-NAME.key.
    CreateClient {
        /// The client's name (letters, digits, '.', '_', '-'): the
        /// certificate's common name.
        name: String,
        #[command(flatten)]
        out: Out,
    },
    /// A whole local set in one go: the CA, replicas 1..=N on the hosts
    /// given (default localhost and 127.0.0.1) and the client `root`.
    CreateLocal {
        /// How many replicas.
        #[arg(long, default_value_t = 3)]
        replicas: u16,
        /// A host name or IP address of every replica (repeat).
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
        #[command(flatten)]
        out: Out,
    },
}

#[derive(clap::Args)]
struct Out {
    /// The certificate directory (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// Replace files that exist.
    #[arg(long)]
    overwrite: bool,
}

/// Run `creek certs …`.
pub fn run(args: &Args) -> Result<(), String> {
    let wrote = match &args.command {
        Command::CreateCa { out } => create_ca(&out.dir, out.overwrite),
        Command::CreateNode { id, hosts, out } => create_node(&out.dir, *id, hosts, out.overwrite),
        Command::CreateClient { name, out } => create_client(&out.dir, name, out.overwrite),
        Command::CreateLocal {
            replicas,
            hosts,
            out,
        } => create_local(&out.dir, *replicas, hosts, out.overwrite),
    }?;
    println!("{wrote}");
    Ok(())
}

/// The CA, `n` replicas on `hosts` and the client `root` in `dir`; what
/// was written, a line per file pair. (The `create_*` functions return
/// what they wrote rather than print it: a benchmark that makes its
/// certificates keeps its standard output for its JSON.)
pub fn create_local(
    dir: &Path,
    n: u16,
    hosts: &[String],
    overwrite: bool,
) -> Result<String, String> {
    if n == 0 {
        return Err("--replicas must be at least 1".into());
    }
    let mut wrote = vec![create_ca(dir, overwrite)?];
    for id in 1..=n {
        wrote.push(create_node(dir, id, hosts, overwrite)?);
    }
    wrote.push(create_client(dir, "root", overwrite)?);
    Ok(wrote.join("\n"))
}

/// DIR/ca.crt and DIR/ca.key; what was written.
pub fn create_ca(dir: &Path, overwrite: bool) -> Result<String, String> {
    let crt = dir.join("ca.crt");
    let key_path = dir.join("ca.key");
    refuse_existing(&[&crt, &key_path], overwrite)?;
    let key = KeyPair::generate().map_err(|e| format!("generating the CA key: {e}"))?;
    let cert = ca_params(10)
        .self_signed(&key)
        .map_err(|e| format!("signing the CA certificate: {e}"))?;
    write_file(&key_path, &key.serialize_pem(), true)?;
    write_file(&crt, &cert.pem(), false)?;
    Ok(format!(
        "wrote {} and {}",
        crt.display(),
        key_path.display()
    ))
}

/// DIR/node-ID.crt and DIR/node-ID.key; what was written.
pub fn create_node(
    dir: &Path,
    id: u16,
    hosts: &[String],
    overwrite: bool,
) -> Result<String, String> {
    if id == 0 {
        return Err("--id 0 is reserved; replica ids start at 1".into());
    }
    let crt = dir.join(format!("node-{id}.crt"));
    let key_path = dir.join(format!("node-{id}.key"));
    refuse_existing(&[&crt, &key_path], overwrite)?;
    let hosts: Vec<String> = if hosts.is_empty() {
        vec!["localhost".into(), "127.0.0.1".into()]
    } else {
        hosts.to_vec()
    };
    let mut params = leaf_params(&format!("replica-{id}"), 5);
    let identity = format!("replica-{id}.creek");
    params.subject_alt_names.push(dns(&identity)?);
    for h in &hosts {
        params.subject_alt_names.push(match h.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => dns(h)?,
        });
    }
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    sign(dir, params, &crt, &key_path)?;
    Ok(format!(
        "wrote {} and {} (replica {id}: {identity}, hosts {})",
        crt.display(),
        key_path.display(),
        hosts.join(", ")
    ))
}

/// DIR/client-NAME.crt and DIR/client-NAME.key; what was written.
pub fn create_client(dir: &Path, name: &str, overwrite: bool) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok {
        return Err(format!(
            "client name {name:?}: use 1 to 64 letters, digits, '.', '_' or '-'"
        ));
    }
    let crt = dir.join(format!("client-{name}.crt"));
    let key_path = dir.join(format!("client-{name}.key"));
    refuse_existing(&[&crt, &key_path], overwrite)?;
    let mut params = leaf_params(name, 5);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    sign(dir, params, &crt, &key_path)?;
    Ok(format!(
        "wrote {} and {}",
        crt.display(),
        key_path.display()
    ))
}

/// The CA's parameters. They are made again from the fixed name to sign
/// with a CA read back from its key (the issuer a certificate names is
/// this name; its key identifier comes from the key).
fn ca_params(years: i32) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name.push(DnType::CommonName, "Creek CA");
    p.distinguished_name.push(DnType::OrganizationName, "Creek");
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut p, years);
    p
}

fn leaf_params(common_name: &str, years: i32) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name.push(DnType::CommonName, common_name);
    p.distinguished_name.push(DnType::OrganizationName, "Creek");
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    validity(&mut p, years);
    p
}

/// Valid from the start of last year (clocks disagree) for `years`.
fn validity(p: &mut CertificateParams, years: i32) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let year = 1970 + i32::try_from(secs / 31_556_952).unwrap_or(0);
    p.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
    p.not_after = rcgen::date_time_ymd(year + years, 1, 1);
}

fn dns(name: &str) -> Result<SanType, String> {
    rcgen::Ia5String::try_from(name)
        .map(SanType::DnsName)
        .map_err(|e| format!("host {name:?}: {e}"))
}

/// Sign `params` with DIR's CA and write the certificate and a new key.
fn sign(dir: &Path, params: CertificateParams, crt: &Path, key_path: &Path) -> Result<(), String> {
    let (ca, ca_key) = load_ca(dir)?;
    let key = KeyPair::generate().map_err(|e| format!("generating a key: {e}"))?;
    let cert = params
        .signed_by(&key, &ca, &ca_key)
        .map_err(|e| format!("signing {}: {e}", crt.display()))?;
    write_file(key_path, &key.serialize_pem(), true)?;
    write_file(crt, &cert.pem(), false)
}

fn load_ca(dir: &Path) -> Result<(Certificate, KeyPair), String> {
    let path = dir.join("ca.key");
    let pem = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "reading the CA key {}: {e} (create it with `creek certs create-ca --dir {}`)",
            path.display(),
            dir.display()
        )
    })?;
    let key = KeyPair::from_pem(&pem)
        .map_err(|e| format!("{}: not a usable key: {e}", path.display()))?;
    let ca = ca_params(10)
        .self_signed(&key)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((ca, key))
}

fn refuse_existing(paths: &[&Path], overwrite: bool) -> Result<(), String> {
    if overwrite {
        return Ok(());
    }
    match paths.iter().find(|p| p.exists()) {
        Some(p) => Err(format!(
            "{} exists; pass --overwrite to replace it",
            p.display()
        )),
        None => Ok(()),
    }
}

/// Write `text` to `path` (its directory made if missing); a key gets
/// mode 0600 from its creation on.
pub(crate) fn write_file(path: &Path, text: &str, secret: bool) -> Result<(), String> {
    let err = |e: std::io::Error| format!("writing {}: {e}", path.display());
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600);
        // An existing file keeps its mode through open: set it first.
        if path.exists() {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
        }
    }
    let mut f = options.open(path).map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)?;
    f.sync_all().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("creek-certs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_local_set_is_written_with_private_keys() {
        let d = temp_dir("local");
        create_local(&d, 2, &[], false).expect("create");
        for f in [
            "ca.crt",
            "ca.key",
            "node-1.crt",
            "node-1.key",
            "node-2.crt",
            "node-2.key",
            "client-root.crt",
            "client-root.key",
        ] {
            assert!(d.join(f).is_file(), "{f} missing");
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(d.join("node-1.key"))
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // The server takes them: each replica's certificate is bound to
        // its own id and to no other.
        let one = creek_server::TlsConfig::in_dir(&d, 1);
        creek_server::tls::Tls::load(creek_core::ReplicaId(1), one.clone()).expect("replica 1");
        let e = creek_server::tls::Tls::load(creek_core::ReplicaId(2), one)
            .expect_err("node-1 for replica 2");
        assert!(e.to_string().contains("replica-2.creek"), "{e}");
        let e = create_ca(&d, false).expect_err("exists");
        assert!(e.contains("--overwrite"), "{e}");
        create_node(&d, 1, &["db.example".into()], true).expect("overwrite");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn bad_names_are_refused() {
        let d = temp_dir("names");
        let e = create_client(&d, "a/b", false).expect_err("slash");
        assert!(e.contains("letters"), "{e}");
        let e = create_node(&d, 1, &[], false).expect_err("no CA");
        assert!(e.contains("create-ca"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
