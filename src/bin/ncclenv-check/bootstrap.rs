//! The bootstrap check: load libnccl, `ncclGetVersion`, `ncclGetUniqueId`, and decode the address NCCL bound.

use crate::nccl::Nccl;
use crate::output::{emit, step};
use ncclenv::check::protocol::{HelperResult, Mode, Step};

/// Run the bootstrap check in this process; `note` goes into the result (the allreduce's fallback says why).
pub fn bootstrap(note: Option<String>) -> HelperResult {
    step(None, Step::Load);
    let nccl = match Nccl::load() {
        Ok(n) => n,
        Err(e) => {
            return HelperResult {
                note,
                ..HelperResult::failed(Mode::Bootstrap, e)
            }
        }
    };
    emit(&nccl.lib_msg());
    step(None, Step::Id);
    let mut r = match nccl.unique_id() {
        Ok(id) => {
            let mut r = HelperResult::new(Mode::Bootstrap, true);
            r.set_bootstrap(id.bootstrap());
            r
        }
        Err(e) => HelperResult::failed(Mode::Bootstrap, e),
    };
    r.nccl_version = Some(nccl.version);
    r.path = Some(nccl.path.clone());
    r.note = note;
    r
}
