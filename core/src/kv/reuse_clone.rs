//! `Clone` for the model's types that hold storage, with a `clone_from` that reuses the
//! target's vectors and maps. The exhaustive search (sim/src/exhaustive) copies its state
//! into one scratch state per transition; with derived `Clone` (whose `clone_from` clones
//! anew) every copy allocated and freed each vector and map of the model, which was most
//! of the search's time. Each impl destructures its type whole, so a field added later
//! fails to compile here instead of being left out of the copy.

/// `impl Clone for TYPE` (or `TYPE<V>`, with `V: Clone`) field by field: `clone` clones
/// each field, `clone_from` calls each field's `clone_from`. Invoke it in the type's own
/// module (private fields); other crates' types holding the model use it too.
#[macro_export]
macro_rules! reuse_clone {
    ($ty:ident $(<$g:ident>)? { $($field:ident),* $(,)? }) => {
        impl$(<$g: Clone>)? Clone for $ty$(<$g>)? {
            fn clone(&self) -> Self {
                let $ty { $($field),* } = self;
                $ty { $($field: Clone::clone($field)),* }
            }

            fn clone_from(&mut self, source: &Self) {
                let $ty { $($field),* } = self;
                $( Clone::clone_from($field, &source.$field); )*
            }
        }
    };
}
