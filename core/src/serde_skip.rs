//! Predicates for `#[serde(skip_serializing_if = ...)]`: fields left out of the JSON at their
//! zero, so files written before a field existed and files written after read the same.

/// True at the type's zero (its default).
pub fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}
