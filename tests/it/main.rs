//! ncclenv's integration tests: one test binary (`cargo test --test it`), one module per area. See
//! tests/README.md for how to run all of them, one module or one test, and what needs root, Docker or the
//! NCCL wheels.

mod common;

mod accelerate_launch;
mod arm64;
mod c_interface;
mod check_entrypoint;
mod check_fake;
mod check_no_gpu;
mod check_real_nccl;
mod completions;
mod decide_core;
mod docker_e2e;
mod doctor_schema;
mod exec_semantics;
mod explain;
mod faster_interface;
mod field_cases;
mod gpu_check_script;
mod host_probe;
mod late_master;
mod launcher_forms;
mod logging;
mod mpi_e2e;
mod packaging;
mod paddle_e2e;
mod preflight;
mod probe_net;
mod rdma_entrypoint;
mod reliability;
mod static_binary;
