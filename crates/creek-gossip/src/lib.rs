//! Gossip (placeholder).
