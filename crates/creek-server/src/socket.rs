//! Writes to a plaintext socket that more than one thread writes to: the
//! thread that has bytes writes what the socket takes at once, and a task
//! writes the rest (the peer transport's links and the native client
//! connections share this rule; each keeps its own order of who writes).

use tokio::net::TcpStream;

/// Write all of `bytes` to a socket other threads may write to directly
/// too (under the caller's ordering rule), waiting for room as needed: at
/// most `stall` each time, if given (then `TimedOut`).
pub(crate) async fn write_all_shared(
    stream: &TcpStream,
    bytes: &[u8],
    stall: Option<std::time::Duration>,
) -> std::io::Result<()> {
    let mut written = 0;
    while written < bytes.len() {
        match stall {
            None => stream.writable().await?,
            Some(stall) => tokio::time::timeout(stall, stream.writable())
                .await
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??,
        }
        written += write_now(stream, &bytes[written..])?;
    }
    Ok(())
}

/// Write what the socket takes now, without waiting.
pub(crate) fn write_now(stream: &TcpStream, bytes: &[u8]) -> std::io::Result<usize> {
    let mut written = 0;
    while written < bytes.len() {
        match stream.try_write(&bytes[written..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(k) => written += k,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}
