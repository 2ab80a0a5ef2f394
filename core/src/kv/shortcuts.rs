//! Shortcuts that skip steps which would change nothing (`manager::steady`). Unit tests
//! switch them off to compare the model with and without them after every op; in any
//! other build they are always on.

#[cfg(test)]
thread_local! {
    static OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the shortcuts may be taken.
#[inline(always)]
pub(crate) fn on() -> bool {
    #[cfg(test)]
    {
        !OFF.with(std::cell::Cell::get)
    }
    #[cfg(not(test))]
    {
        true
    }
}

/// `f()` with the shortcuts off (on this thread).
#[cfg(test)]
pub(crate) fn without<T>(f: impl FnOnce() -> T) -> T {
    OFF.with(|o| o.set(true));
    let r = f();
    OFF.with(|o| o.set(false));
    r
}
