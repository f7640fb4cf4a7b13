//! `enum_with_unknown!`: wire codes whose unknown values stay values.
//!
//! An unknown code parses as `Unknown(raw)` instead of failing, so a
//! decoder can still show it and the engine can decide (count, NACK, drop).

macro_rules! enum_with_unknown {
    (
        $(#[$enum_attr:meta])*
        pub enum $name:ident($ty:ty) {
            $(
                $(#[$variant_attr:meta])*
                $variant:ident = $value:expr
            ),+ $(,)?
        }
    ) => {
        $(#[$enum_attr])*
        #[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Clone, Copy, Hash)]
        pub enum $name {
            $(
                $(#[$variant_attr])*
                $variant
            ),*,
            /// A code this version of udrma does not know, kept as its raw value.
            Unknown($ty),
        }

        impl ::core::convert::From<$ty> for $name {
            fn from(value: $ty) -> Self {
                match value {
                    $( $value => $name::$variant ),*,
                    other => $name::Unknown(other),
                }
            }
        }

        impl ::core::convert::From<$name> for $ty {
            fn from(value: $name) -> Self {
                match value {
                    $( $name::$variant => $value ),*,
                    $name::Unknown(other) => other,
                }
            }
        }
    };
}
