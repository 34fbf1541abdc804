//! A causal context's records as the wire sends them: exceptions as gaps.

/// The number of seqs in `runs` (an in-memory set's, so it fits).
pub(crate) fn run_seqs(runs: &[(u64, u64)]) -> usize {
    runs.iter()
        .map(|&(s, e)| usize::try_from(e - s + 1).unwrap_or(usize::MAX))
        .fold(0, usize::saturating_add)
}

/// The encoded gaps of a record's exceptions: the first seq of each run
/// as its distance past the previous seq (`x - prev - 1`, the first from
/// the counter), then a 0 for each further seq of the run.
pub(crate) fn exception_gaps(counter: u64, runs: &[(u64, u64)]) -> impl Iterator<Item = u64> + '_ {
    let mut prev = counter;
    runs.iter().flat_map(move |&(s, e)| {
        // Normalized runs lie above the counter and above each other;
        // wrapping keeps this total for any input.
        let first = s.wrapping_sub(prev).wrapping_sub(1);
        prev = e;
        std::iter::once(first).chain(std::iter::repeat_n(0, (e - s) as usize))
    })
}

/// Rebuilds a record's exceptions as runs from their encoded gaps (see
/// [`exception_gaps`]); `None` once a seq would overflow.
pub(crate) struct RunsFromGaps {
    prev: u64,
    runs: Vec<(u64, u64)>,
}

impl RunsFromGaps {
    pub(crate) fn new(counter: u64) -> Self {
        RunsFromGaps {
            prev: counter,
            runs: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, gap: u64) -> Option<()> {
        let x = self.prev.checked_add(gap)?.checked_add(1)?;
        match self.runs.last_mut() {
            Some((_, end)) if gap == 0 => *end = x,
            _ => self.runs.push((x, x)),
        }
        self.prev = x;
        Some(())
    }

    pub(crate) fn finish(self) -> Vec<(u64, u64)> {
        self.runs
    }
}
