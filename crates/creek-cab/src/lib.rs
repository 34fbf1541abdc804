//! CAB (placeholder).
