//! One module per kind of job: what each reads before it plans.

pub mod copy;
pub mod namespace;
pub mod resync;
pub mod rule;
pub mod source;
