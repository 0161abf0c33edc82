//! ncclenv: give a multi-GPU job an NCCL environment that works, or stop with the exact reason.
//!
//! The flow is one direction: probes (`probe`) read the kernel, sysfs, `/dev`, rlimits and the environment into
//! a plain [`snapshot::Snapshot`]; the pure [`decide::decide`] turns it and the [`config::Config`] into a
//! [`plan::Plan`]; the shell (`main.rs`) reports, applies and execs. NCCL's own rules (list syntax, interface
//! order) live in [`nccl_rules`] alone; NCCL's log format in [`nccl_log`]; NCCL's error messages in
//! [`nccl_errors`]; what launchers say about the job (master, node count, node rank, this node's address,
//! the framework) lives in [`launcher`] alone.

#![warn(missing_docs)]

pub mod accelerate;
pub mod check;
pub mod cli;
pub mod code_table;
pub mod completions;
pub mod config;
pub mod cross_node;
pub mod decide;
pub mod doctor;
pub mod environ;
pub mod exec;
pub mod exit;
pub mod explain;
pub mod findings;
pub mod install;
pub mod launch_facts;
pub mod launcher;
pub mod nccl_defects;
pub mod nccl_errors;
pub mod nccl_log;
pub mod nccl_rules;
pub mod orchestrator;
pub mod plan;
pub mod preflight;
pub mod probe;
pub mod report;
pub mod shell;
pub mod signals;
pub mod snapshot;
pub mod spread;
pub mod text;

#[cfg(test)]
mod doc_table;
#[cfg(test)]
extern crate self as ncclenv;
#[cfg(test)]
#[path = "../tests/it/common/snapshot.rs"]
#[allow(dead_code)]
mod test_machine;
#[cfg(test)]
mod test_snapshot;
