//! Positions and compile errors.

use std::fmt;

/// A position in the source: 1-based line and column (columns count
/// characters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub col: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.col)
    }
}

/// One problem found while compiling, at a position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileError {
    /// Where.
    pub pos: Pos,
    /// What, without the position.
    pub message: String,
}

impl CompileError {
    pub(crate) fn new(pos: Pos, message: impl Into<String>) -> Self {
        CompileError {
            pos,
            message: message.into(),
        }
    }
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.pos, self.message)
    }
}

/// Every problem [`compile`](super::compile) found, in source order; shown
/// one per line as `line L:C: message`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct CompileErrors(pub Vec<CompileError>);

impl CompileErrors {
    /// Whether any message contains `needle` (for tests and tools).
    pub fn mentions(&self, needle: &str) -> bool {
        self.0.iter().any(|e| e.message.contains(needle))
    }
}

impl fmt::Display for CompileErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
