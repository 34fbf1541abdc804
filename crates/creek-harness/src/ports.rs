//! Loopback ports for the processes a harness starts, reserved together.
//!
//! A port found by binding port 0 is free only while it is held: once
//! released, the system may hand the same one to the next bind. So the
//! ports of a cluster are bound all at once and held until every one is
//! chosen, and a process-wide set remembers every port handed out, so a
//! later reservation (another cluster, a test running beside this one)
//! never gets one again. Two benchmark harnesses that found their ports
//! one at a time were once handed the same port twice.
//!
//! Not for choosing the ports of a long-lived cluster a user runs: `creek
//! dev` takes its ports from its flags and only checks them ([`check_free`]).

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Mutex, PoisonError};

/// How many ports handed out before one reservation may be offered again
/// by the system before it gives up.
const REOFFERED_MAX: usize = 256;

/// Every port [`reserve`] handed out in this process.
static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// `n` distinct loopback addresses whose ports were free when chosen and
/// were never handed out before in this process. The listeners are
/// released when this returns: the caller binds the ports next.
pub fn reserve(n: usize) -> Result<Vec<SocketAddr>, String> {
    // Held for the whole reservation, so two concurrent reservations
    // cannot choose the same port.
    let mut given = GIVEN.lock().unwrap_or_else(PoisonError::into_inner);
    let mut held: Vec<(TcpListener, SocketAddr)> = Vec::with_capacity(n);
    // Ports given before, held too so the system offers others.
    let mut reoffered: Vec<TcpListener> = Vec::new();
    while held.len() < n {
        if reoffered.len() > REOFFERED_MAX {
            return Err(
                "finding a free port: the system kept giving ports already in use here".into(),
            );
        }
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free port: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("finding a free port: {e}"))?;
        if given.contains(&addr.port()) {
            reoffered.push(listener);
        } else {
            held.push((listener, addr));
        }
    }
    let addrs: Vec<SocketAddr> = held.iter().map(|(_, a)| *a).collect();
    given.extend(addrs.iter().map(SocketAddr::port));
    Ok(addrs)
}

/// One loopback address, as [`reserve`] chooses it.
pub fn reserve_one() -> Result<SocketAddr, String> {
    reserve(1)?
        .pop()
        .ok_or_else(|| "finding a free port: none reserved".to_owned())
}

/// Whether every address in `addrs` can be bound now, all held at once
/// (an address listed twice is bound once). The error names the first
/// that cannot, by its index in `addrs`, and why.
pub fn check_free(addrs: &[SocketAddr]) -> Result<(), (usize, std::io::Error)> {
    let mut held = Vec::with_capacity(addrs.len());
    let mut seen = BTreeSet::new();
    for (i, addr) in addrs.iter().enumerate() {
        if !seen.insert(*addr) {
            continue;
        }
        held.push(TcpListener::bind(addr).map_err(|e| (i, e))?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_reserved_are_distinct_across_reservations_and_threads() {
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..5).map(|_| reserve(6)).collect::<Vec<_>>()))
            .collect();
        let mut all = BTreeSet::new();
        let mut count = 0;
        for t in threads {
            for r in t.join().expect("a reserving thread panicked") {
                let addrs = r.expect("reserve");
                assert_eq!(addrs.len(), 6);
                for a in addrs {
                    assert!(a.ip().is_loopback());
                    all.insert(a.port());
                    count += 1;
                }
            }
        }
        assert_eq!(all.len(), count, "a port was handed out twice");
        assert!(reserve_one().is_ok_and(|a| !all.contains(&a.port())));
    }

    /// Deterministic whatever else runs: a port just released may be taken
    /// at once by any outgoing connection (they draw from the same range),
    /// so "free" here is port 0, which always binds.
    #[test]
    fn check_free_names_the_first_taken_address() {
        let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
        let taken_addr = taken.local_addr().expect("addr");
        let any: SocketAddr = "127.0.0.1:0".parse().expect("an address");
        assert!(check_free(&[any, any]).is_ok());
        let Err((i, _)) = check_free(&[any, taken_addr]) else {
            panic!("a held port was reported free");
        };
        assert_eq!(i, 1);
        let Err((i, _)) = check_free(&[taken_addr, any]) else {
            panic!("a held port was reported free");
        };
        assert_eq!(i, 0);
    }
}
