//! Shared helpers for kvsim integration tests.
