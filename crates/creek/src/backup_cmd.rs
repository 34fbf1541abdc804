//! `creek backup` and `creek restore`: a consistent checkpoint of a running
//! cluster to a directory, and new replicas made from one.
//!
//! A backup directory holds `checkpoint.bin` (the checkpoint's encoding, as
//! replicas store and transfer checkpoints) and `manifest.json` (where it
//! comes from, its position in the committed order, its length and CRC-32).
//! Both commands stream the checkpoint through a fixed buffer and check the
//! CRC before anything is kept; a restore then decodes it (the state is
//! held in memory once, as a replica holds it).

use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};

use creek_proto::pb;
use creek_proto::pb::admin_client::AdminClient;
use creek_server::ServerConfig;
use serde_json::json;

use crate::cli::{runtime, Endpoints, Format, Output};

const CHECKPOINT_FILE: &str = "checkpoint.bin";
const MANIFEST_FILE: &str = "manifest.json";

/// Arguments of `creek backup`.
#[derive(clap::Args, Debug)]
pub struct BackupArgs {
    /// The directory to write the backup into (created; must not hold a
    /// backup already).
    #[arg(long)]
    to: PathBuf,
    /// Where the cluster is (the first replica that answers takes the
    /// checkpoint).
    #[command(flatten)]
    endpoints: Endpoints,
    /// `-o json` prints the manifest as one JSON line.
    #[command(flatten)]
    output: Output,
}

/// Arguments of `creek restore`.
#[derive(clap::Args, Debug)]
pub struct RestoreArgs {
    /// The backup directory (`creek backup --to`).
    #[arg(long)]
    from: PathBuf,
    /// The configuration of the replica to make (its data directory must be
    /// missing or empty). Run once per replica of the new cluster.
    #[arg(long)]
    config: PathBuf,
}

/// `creek backup`.
pub fn backup(args: &BackupArgs) -> Result<(), String> {
    if args.to.join(MANIFEST_FILE).exists() {
        return Err(format!(
            "{} already holds a backup; pick another directory",
            args.to.display()
        ));
    }
    std::fs::create_dir_all(&args.to)
        .map_err(|e| format!("creating {}: {e}", args.to.display()))?;
    let partial = args.to.join(format!("{CHECKPOINT_FILE}.partial"));
    let result = runtime()?.block_on(stream_backup(&args.endpoints, &partial));
    let manifest = match result {
        Ok(m) => m,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, args.to.join(CHECKPOINT_FILE))
        .map_err(|e| format!("naming the checkpoint file: {e}"))?;
    write_synced(
        &args.to.join(MANIFEST_FILE),
        serde_json::to_string_pretty(&manifest)
            .map_err(|e| e.to_string())?
            .as_bytes(),
    )?;
    if args.output.output == Format::Json {
        println!("{manifest}");
        return Ok(());
    }
    println!(
        "backup of replica {} (cluster {}) in {}: {} keys, {} ops committed before it, {} bytes",
        manifest["replica"],
        manifest["cluster_id"].as_str().unwrap_or("?"),
        args.to.display(),
        manifest["keys"],
        manifest["committed"],
        manifest["bytes"],
    );
    Ok(())
}

/// Stream a checkpoint from the first replica of `addrs` that answers into
/// `file`; the manifest, once its CRC and length check out.
async fn stream_backup(endpoints: &Endpoints, file: &Path) -> Result<serde_json::Value, String> {
    let mut failures = Vec::new();
    for addr in &endpoints.list() {
        let mut admin = match endpoints.channel(addr).await {
            Ok(c) => AdminClient::new(c),
            Err(e) => {
                failures.push(format!("{addr}: {e}"));
                continue;
            }
        };
        let stream = match admin.backup(endpoints.request(pb::BackupRequest {})?).await {
            Ok(s) => s.into_inner(),
            Err(e) => {
                failures.push(format!("{addr}: {}", e.message()));
                continue;
            }
        };
        return receive(stream, file).await;
    }
    Err(format!("no replica took a backup: {}", failures.join("; ")))
}

async fn receive(
    mut stream: tonic::Streaming<pb::BackupChunk>,
    file: &Path,
) -> Result<serde_json::Value, String> {
    use pb::backup_chunk::Part;
    let mut out =
        std::fs::File::create(file).map_err(|e| format!("creating {}: {e}", file.display()))?;
    let mut header = None;
    let mut crc = crc32fast::Hasher::new();
    let mut bytes = 0u64;
    loop {
        let chunk = stream
            .message()
            .await
            .map_err(|e| format!("the replica stopped the backup: {}", e.message()))?
            .ok_or("the backup ended before its trailer")?;
        match chunk.part {
            Some(Part::Header(h)) if header.is_none() => header = Some(h),
            Some(Part::Data(d)) if header.is_some() => {
                crc.update(&d);
                bytes += d.len() as u64;
                out.write_all(&d)
                    .map_err(|e| format!("writing {}: {e}", file.display()))?;
            }
            Some(Part::Trailer(t)) if header.is_some() => {
                let local = crc.finalize();
                if t.bytes != bytes || t.crc32 != local {
                    return Err(format!(
                        "the backup arrived damaged: {bytes} bytes with CRC-32 {local:08x}, the \
                         replica sent {} bytes with CRC-32 {:08x}",
                        t.bytes, t.crc32
                    ));
                }
                out.sync_all()
                    .map_err(|e| format!("syncing {}: {e}", file.display()))?;
                let h = header.ok_or("no header")?;
                return Ok(json!({
                    "format": h.format,
                    "cluster_id": format!("{:016x}", h.cluster_id),
                    "replica": h.replica,
                    "committed": h.committed,
                    "log_index": h.log_index,
                    "keys": h.keys,
                    "bytes": bytes,
                    "crc32": format!("{local:08x}"),
                    "taken_at_unix_secs": std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs()),
                }));
            }
            _ => return Err("the replica sent the backup out of order".into()),
        }
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("partial");
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_all()
    });
    written
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

/// `creek restore`.
pub fn restore(args: &RestoreArgs) -> Result<(), String> {
    let config = ServerConfig::from_file(&args.config).map_err(|e| e.to_string())?;
    let manifest: serde_json::Value = std::fs::read(args.from.join(MANIFEST_FILE))
        .map_err(|e| {
            format!(
                "reading the backup's manifest in {}: {e}",
                args.from.display()
            )
        })
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| format!("the manifest: {e}")))?;
    let file = args.from.join(CHECKPOINT_FILE);
    // Checked before anything is decoded or written.
    let (bytes, crc) = crc_of(&file)?;
    let want_crc = manifest["crc32"].as_str().unwrap_or_default();
    let want_bytes = manifest["bytes"].as_u64().unwrap_or(u64::MAX);
    if format!("{crc:08x}") != want_crc || bytes != want_bytes {
        return Err(format!(
            "{} is damaged: {bytes} bytes with CRC-32 {crc:08x}, the manifest says {want_bytes} \
             bytes with CRC-32 {want_crc}; nothing was restored",
            file.display()
        ));
    }
    let encoded = std::fs::read(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let checkpoint = creek_wire::checkpoint::decode(&encoded)
        .map_err(|e| format!("{} does not decode: {e}", file.display()))?;
    drop(encoded);
    let keys = checkpoint.state.len();
    creek_server::restore::restore(&config, checkpoint, creek_server::fresh_nonce())
        .map_err(|e| e.to_string())?;
    println!(
        "replica {} restored in {}: {keys} keys, the state after {} committed ops of cluster {}. \
         Restore every replica of the new cluster, then start each (creek serve --config {}); \
         the cluster forms once all have started.",
        config.id,
        config.data_dir.display(),
        manifest["committed"],
        manifest["cluster_id"].as_str().unwrap_or("?"),
        args.config.display(),
    );
    Ok(())
}

/// Length and CRC-32 of `file`, read through a fixed buffer.
fn crc_of(file: &Path) -> Result<(u64, u32), String> {
    let mut f =
        std::fs::File::open(file).map_err(|e| format!("opening {}: {e}", file.display()))?;
    let mut crc = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| format!("reading {}: {e}", file.display()))?;
        if n == 0 {
            return Ok((total, crc.finalize()));
        }
        crc.update(&buf[..n]);
        total += n as u64;
    }
}
