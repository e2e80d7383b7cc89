//! The pure core of copyrator: what it knows (model, marks, selectors, rules, trust) and what
//! it decides (the planner). Nothing here does I/O: the crate depends on no async runtime and
//! no API client, so purity is a fact the compiler checks, and the product's rules (SPEC §2-4,
//! §9) are tested here without any server.

pub mod bundle;
pub mod content;
pub mod copyrule;
pub mod grants;
pub mod hub;
pub mod marks;
pub mod model;
pub mod namespaced;
pub mod plan;
pub mod powers;
pub mod rules;
pub mod selector;
pub mod template;
pub mod tenancy;
pub mod transform;
