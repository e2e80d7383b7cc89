//! The machinery that runs jobs (SPEC §5): the worker pool that takes them from the queue
//! ([`crate::queue`]), the reconciler that decides when full resyncs run, and the leader
//! election it follows.

pub mod leader;
pub mod published;
pub mod reconcile;
pub mod worker;
