//! Attention data parallelism (dynamo_fpm.md §7).
