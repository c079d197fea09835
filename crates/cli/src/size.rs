//! Sizes with K/M/G/T suffixes, as Lustre tools accept them (nacre_types::units).

pub use nacre_types::units::{human, parse_size};
