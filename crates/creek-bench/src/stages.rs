//! The stages of an op's path as the replica that received it timed them
//! (`creek_op_stage_seconds` on its `/metrics`): scraped before and after a
//! measurement, the difference of the bucket counts gives the stages'
//! medians over exactly the ops measured.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Cumulative bucket counts per (level, stage): upper bound (s) → count.
pub(crate) type Buckets = BTreeMap<(String, String), Vec<(f64, f64)>>;

/// The stage histogram of the replica serving `/metrics` at `addr`: over
/// HTTPS, checked against `tls`'s CA by the address's IP, on a cluster
/// with TLS (its HTTP port then serves HTTPS).
pub(crate) async fn scrape(
    addr: SocketAddr,
    tls: Option<&creek_client::TlsOptions>,
) -> Result<Buckets, String> {
    let connector = tls.map(connector).transpose()?;
    let fetch = async {
        let s = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        let mut body = String::new();
        match &connector {
            None => get(s, &request, &mut body).await?,
            Some(c) => {
                let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
                get(c.connect(name, s).await?, &request, &mut body).await?;
            }
        }
        Ok::<_, std::io::Error>(body)
    };
    let text = tokio::time::timeout(Duration::from_secs(5), fetch)
        .await
        .map_err(|_| format!("{addr}/metrics did not answer within 5 s"))?
        .map_err(|e| format!("reading {addr}/metrics: {e}"))?;
    let status = text.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("{addr}/metrics answered {status:?}"));
    }
    Ok(parse(&text))
}

/// Send `request` on `s` and read the whole answer into `body`.
async fn get<S>(mut s: S, request: &str, body: &mut String) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    s.write_all(request.as_bytes()).await?;
    s.read_to_string(body).await?;
    Ok(())
}

/// A TLS connector trusting `tls`'s CA (the HTTP port asks no client
/// certificate).
fn connector(tls: &creek_client::TlsOptions) -> Result<tokio_rustls::TlsConnector, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut &tls.ca_pem()[..]) {
        let cert = cert.map_err(|e| format!("the CA certificate: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("the CA certificate: {e}"))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(std::sync::Arc::new(
        config,
    )))
}

/// The `creek_op_stage_seconds_bucket` lines of a text exposition.
fn parse(text: &str) -> Buckets {
    let mut out = Buckets::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("creek_op_stage_seconds_bucket{") else {
            continue;
        };
        let Some((labels, count)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels.split(',').find_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (k.trim() == name).then(|| v.trim_matches('"').to_owned())
            })
        };
        let (Some(level), Some(stage), Some(le)) = (label("level"), label("stage"), label("le"))
        else {
            continue;
        };
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            match le.parse() {
                Ok(v) => v,
                Err(_) => continue,
            }
        };
        let Ok(count) = count.trim().parse::<f64>() else {
            continue;
        };
        out.entry((level, stage)).or_default().push((le, count));
    }
    for buckets in out.values_mut() {
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Per stage of `level`, the median (µs) of the observations made between
/// `before` and `after`, interpolated within its bucket; stages without
/// observations are left out.
pub(crate) fn medians(before: &Buckets, after: &Buckets, level: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for ((l, stage), now) in after {
        if l != level {
            continue;
        }
        let then = before.get(&(l.clone(), stage.clone()));
        let at = |le: f64| {
            then.and_then(|b| b.iter().find(|(x, _)| *x == le).map(|(_, c)| *c))
                .unwrap_or(0.0)
        };
        let delta: Vec<(f64, f64)> = now.iter().map(|&(le, c)| (le, c - at(le))).collect();
        if let Some(m) = median(&delta) {
            out.insert(stage.clone(), (m * 1e6).round() as u64);
        }
    }
    out
}

/// The median of cumulative buckets (upper bound, count), in seconds.
fn median(cumulative: &[(f64, f64)]) -> Option<f64> {
    let total = cumulative.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let half = total / 2.0;
    let mut lower = (0.0, 0.0);
    for &(le, count) in cumulative {
        if count >= half {
            if !le.is_finite() {
                return Some(lower.0);
            }
            let share = if count > lower.1 {
                (half - lower.1) / (count - lower.1)
            } else {
                0.0
            };
            return Some(lower.0 + (le - lower.0) * share);
        }
        lower = (le, count);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "\
# TYPE creek_op_stage_seconds histogram
creek_op_stage_seconds_bucket{level=\"strong\",stage=\"persisted\",le=\"0.0001\"} 1
creek_op_stage_seconds_bucket{level=\"strong\",stage=\"persisted\",le=\"0.0002\"} 1
creek_op_stage_seconds_bucket{level=\"strong\",stage=\"persisted\",le=\"0.0004\"} 2
creek_op_stage_seconds_bucket{level=\"strong\",stage=\"persisted\",le=\"+Inf\"} 2
";
    const AFTER: &str = "\
creek_op_stage_seconds_bucket{level=\"strong\",stage=\"persisted\",le=\"0.0001\"} 1
creek_op_stage_seconds_bucket{level=\"strong\",stage=\"persisted\",le=\"0.0002\"} 5
creek_op_stage_seconds_bucket{level=\"strong\",stage=\"persisted\",le=\"0.0004\"} 12
creek_op_stage_seconds_bucket{level=\"strong\",stage=\"persisted\",le=\"+Inf\"} 12
creek_op_stage_seconds_bucket{level=\"weak\",stage=\"invoked\",le=\"0.0001\"} 0
creek_op_stage_seconds_bucket{level=\"weak\",stage=\"invoked\",le=\"+Inf\"} 0
creek_view_latency_seconds_bucket{view=\"stable\",le=\"0.0001\"} 9
";

    /// Only the ops between the scrapes count: 10 of them, 4 in
    /// (100, 200] µs and 6 in (200, 400] µs, so the median lies a sixth
    /// of the way into the second bucket.
    #[test]
    fn medians_come_from_the_buckets_filled_between_two_scrapes() {
        let m = medians(&parse(BEFORE), &parse(AFTER), "strong");
        assert_eq!(m.get("persisted"), Some(&233));
        assert_eq!(m.len(), 1);
        assert!(medians(&parse(BEFORE), &parse(AFTER), "weak").is_empty());
    }
}
