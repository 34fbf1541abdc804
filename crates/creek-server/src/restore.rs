//! Restoring a backup: a replica's data directory for a new cluster, made
//! from a checkpoint that `Admin.Backup` streamed (`creek backup`).
//!
//! Every replica of the new cluster is restored from the same backup (one
//! call per replica, with that replica's configuration). Its directory gets
//! the backup's committed state as its checkpoint — the state after the
//! backup's position in the old cluster's committed order, with the old
//! cluster's history left behind: the new cluster numbers its committed
//! ops, its consensus log and its op ids afresh — and a new identity, so
//! the replicas form a new cluster once every one of them has started, as
//! any new cluster does. Client sessions are part of the state and carry
//! over.

use std::path::{Path, PathBuf};

use creek_core::Checkpoint;
use creek_node::{Identity, Write};

use crate::ServerConfig;

/// Why a restore did not happen. Nothing was written (a directory that
/// was created for it is removed again).
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The data directory already holds something.
    #[error(
        "the data directory {0} is not empty: a restore starts a new replica; remove it or pick another"
    )]
    NotEmpty(PathBuf),
    /// The store could not be created or written.
    #[error("writing the data directory {dir}: {source}")]
    Store {
        /// The data directory.
        dir: PathBuf,
        /// What went wrong.
        source: creek_store::StoreError,
    },
}

/// Whether `dir` is missing or an empty directory.
fn is_empty_dir(dir: &Path) -> bool {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// The checkpoint a restored replica starts from: the backup's state and
/// clock, nothing of the old cluster's history.
pub fn restored_checkpoint(backup: Checkpoint) -> Checkpoint {
    Checkpoint {
        state: backup.state,
        hlc: backup.hlc,
        ..Checkpoint::default()
    }
}

/// Make `config`'s data directory a new replica holding `backup`'s state
/// (see the module docs). `nonce` is the new directory's identity nonce
/// (random in production).
pub fn restore(config: &ServerConfig, backup: Checkpoint, nonce: u64) -> Result<(), RestoreError> {
    let dir = &config.data_dir;
    if !is_empty_dir(dir) {
        return Err(RestoreError::NotEmpty(dir.clone()));
    }
    let store_err = |source| RestoreError::Store {
        dir: dir.clone(),
        source,
    };
    let voters = config
        .replicas
        .iter()
        .map(|r| creek_cab::raft_id(creek_core::ReplicaId(r.id)))
        .collect();
    let written = creek_store::load(dir, voters).and_then(|loaded| {
        let write = Write {
            seq: 1,
            checkpoint: Some(restored_checkpoint(backup)),
            identity: Some(Identity::joining(nonce)),
            ..Write::default()
        };
        loaded.store.write(&[write])
    });
    written.map_err(|e| {
        let _ = std::fs::remove_dir_all(dir);
        store_err(e)
    })
}
