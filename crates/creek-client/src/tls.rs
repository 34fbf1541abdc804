//! TLS options of a [`Client`](crate::Client): the CA that signed the
//! replicas' certificates and, for clusters that require one (the
//! default, docs/security.md), the client's certificate and key.

use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use crate::Error;

/// How a client checks the replicas and proves itself: PEM bytes of the CA
/// and, optionally, of the client's certificate and key.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    ca_pem: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
    domain: Option<String>,
}

impl TlsOptions {
    /// Trust the replicas whose certificates `ca_pem` (a PEM CA
    /// certificate) signed.
    pub fn new(ca_pem: impl Into<Vec<u8>>) -> TlsOptions {
        TlsOptions {
            ca_pem: ca_pem.into(),
            ..TlsOptions::default()
        }
    }

    /// Present this certificate (PEM) and its key (PEM) to the replicas.
    pub fn identity(mut self, cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// The CA certificate (PEM) the replicas' certificates are checked
    /// against.
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca_pem
    }

    /// Check the replicas' certificates for this name instead of the host
    /// of each address.
    pub fn domain_name(mut self, name: impl Into<String>) -> Self {
        self.domain = Some(name.into());
        self
    }

    /// Options from files: the CA, and the client's certificate and key
    /// (both or neither). Every error names the file.
    pub fn from_files(
        ca: &Path,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<TlsOptions, Error> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| {
                Error::InvalidArgument(format!("reading TLS file {}: {e}", p.display()))
            })
        };
        let options = TlsOptions::new(read(ca)?);
        match (cert, key) {
            (Some(c), Some(k)) => {
                let (cert_pem, key_pem) = (read(c)?, read(k)?);
                check_pair(&cert_pem, &key_pem).map_err(|why| {
                    Error::InvalidArgument(format!(
                        "the client certificate {} and key {}: {why}",
                        c.display(),
                        k.display()
                    ))
                })?;
                Ok(options.identity(cert_pem, key_pem))
            }
            (None, None) => Ok(options),
            (Some(c), None) => Err(Error::InvalidArgument(format!(
                "a client certificate ({}) needs its key too",
                c.display()
            ))),
            (None, Some(k)) => Err(Error::InvalidArgument(format!(
                "a client key ({}) needs its certificate too",
                k.display()
            ))),
        }
    }

    /// The same options for a tonic channel of one's own.
    pub fn tonic(&self) -> ClientTlsConfig {
        let mut c = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem));
        if let Some((cert, key)) = &self.identity {
            c = c.identity(Identity::from_pem(cert, key));
        }
        if let Some(d) = &self.domain {
            c = c.domain_name(d.clone());
        }
        c
    }

    /// The same options as one rustls configuration for the native
    /// connections (built once per client, shared by every replica's).
    pub(crate) fn native_config(&self) -> Result<std::sync::Arc<rustls::ClientConfig>, Error> {
        let bad = |why: String| Error::InvalidArgument(format!("TLS options: {why}"));
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut &self.ca_pem[..]) {
            let cert = cert.map_err(|e| bad(format!("the CA does not read as PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| bad(format!("the CA certificate cannot be used: {e}")))?;
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(e.to_string()))?
            .with_root_certificates(roots);
        let config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some((cert_pem, key_pem)) => {
                let certs = rustls_pemfile::certs(&mut &cert_pem[..])
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| bad(format!("the client certificate: {e}")))?;
                let key = rustls_pemfile::private_key(&mut &key_pem[..])
                    .map_err(|e| bad(format!("the client key: {e}")))?
                    .ok_or_else(|| bad("the client key file holds no private key".into()))?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| bad(format!("the client certificate and key: {e}")))?
            }
        };
        Ok(std::sync::Arc::new(config))
    }

    /// The name a replica at `host` must show in its certificate: the
    /// domain name set, else the host itself.
    pub(crate) fn server_name(
        &self,
        host: &str,
    ) -> Result<rustls::pki_types::ServerName<'static>, Error> {
        let name = self
            .domain
            .as_deref()
            .unwrap_or(host.trim_start_matches('[').trim_end_matches(']'));
        rustls::pki_types::ServerName::try_from(name.to_owned()).map_err(|e| {
            Error::InvalidArgument(format!(
                "TLS options: {name:?} is not a name a certificate can hold: {e}"
            ))
        })
    }
}

/// Whether `key_pem` is the private key of the certificate in `cert_pem`
/// (the first one, the client's own), or why not: a mismatched pair
/// otherwise fails only when the connection is made, with no word of why.
fn check_pair(cert_pem: &[u8], key_pem: &[u8]) -> Result<(), String> {
    let certs = rustls_pemfile::certs(&mut &cert_pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the certificate file does not read as PEM: {e}"))?;
    if certs.is_empty() {
        return Err("the certificate file holds no certificate".into());
    }
    let key = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(|e| format!("the key file does not read as PEM: {e}"))?
        .ok_or("the key file holds no private key")?;
    let provider = rustls::crypto::ring::default_provider();
    match rustls::sign::CertifiedKey::from_der(certs, key, &provider) {
        Ok(_) => Ok(()),
        Err(rustls::Error::InconsistentKeys(_)) => Err(
            "the key is not the certificate's (they are not a pair: give the key made with \
             this certificate)"
                .into(),
        ),
        Err(e) => Err(format!("they cannot be used: {e}")),
    }
}

/// The files of [`TlsOptions::from_files`], as a command line takes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// The CA certificate (PEM).
    pub ca: Option<PathBuf>,
    /// The client certificate (PEM).
    pub cert: Option<PathBuf>,
    /// The client key (PEM).
    pub key: Option<PathBuf>,
}

impl TlsFiles {
    /// The options these files make: none without a CA (plaintext); a
    /// certificate or key without a CA is refused.
    pub fn options(&self) -> Result<Option<TlsOptions>, Error> {
        match &self.ca {
            Some(ca) => {
                TlsOptions::from_files(ca, self.cert.as_deref(), self.key.as_deref()).map(Some)
            }
            None if self.cert.is_some() || self.key.is_some() => Err(Error::InvalidArgument(
                "a client certificate or key is given without a CA (--ca or CREEK_CA): TLS \
                 needs the CA that signed the replicas' certificates"
                    .into(),
            )),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (Vec<u8>, Vec<u8>) {
        let made = rcgen::generate_simple_self_signed(vec![name.to_owned()]);
        let made = made.unwrap_or_else(|e| panic!("a certificate: {e}"));
        (
            made.cert.pem().into_bytes(),
            made.key_pair.serialize_pem().into_bytes(),
        )
    }

    #[test]
    fn a_certificate_and_a_key_that_are_no_pair_are_refused_before_connecting() {
        let (cert_a, key_a) = pair("a.creek");
        let (_, key_b) = pair("b.creek");
        assert_eq!(check_pair(&cert_a, &key_a), Ok(()));
        let e = check_pair(&cert_a, &key_b).expect_err("no pair");
        assert!(e.contains("not a pair"), "{e}");
        let e = check_pair(b"junk", &key_a).expect_err("no certificate");
        assert!(e.contains("no certificate"), "{e}");
        let e = check_pair(&cert_a, b"junk").expect_err("no key");
        assert!(e.contains("no private key"), "{e}");
    }
}
