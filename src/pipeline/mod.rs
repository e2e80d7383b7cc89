//! The machinery between triggers and work (SPEC §5): the bounded, coalescing queue and the
//! jobs waiting in it for persisted changes, the worker pool that runs jobs, the reconciler that
//! decides when full resyncs run, and the leader election it follows.

pub mod context;
pub mod job;
pub mod leader;
pub mod prefetch;
pub mod queue;
pub mod ready;
pub mod reconcile;
pub mod unseen;
pub mod waiters;
pub mod worker;
